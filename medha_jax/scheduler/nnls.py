"""Weighted non-negative least squares on a handful of features, in pure Python.

  rows (features), targets, weights --> Gram matrix G = A^T W^2 A, h = A^T W^2 y (n x n, n <= ~8)
  --> column scaling --> Lawson-Hanson active set --> x >= 0 minimising ||W (A x - y)||

Non-negative because every term of the runtime model is a cost: a negative coefficient would make
predicted time fall as work grows, and the batch packer's binary search relies on predictions
that never decrease. Pure Python (the fit runs once per profile); no numpy.
"""

from __future__ import annotations


def solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve a x = b (small, square) by Gaussian elimination with partial pivoting."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-300:
            raise ZeroDivisionError("singular system")
        m[col], m[piv] = m[piv], m[col]
        p = m[col][col]
        for r in range(col + 1, n):
            f = m[r][col] / p
            if f:
                row, prow = m[r], m[col]
                for c in range(col, n + 1):
                    row[c] -= f * prow[c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        s = m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))
        x[r] = s / m[r][r]
    return x


def nnls(rows: list[list[float]], y: list[float], weights: list[float] | None = None,
         max_iter: int = 100) -> list[float]:
    """Coefficients x >= 0 minimising sum_i (w_i * (rows_i . x - y_i))^2."""
    if not rows:
        raise ValueError("no samples to fit")
    n = len(rows[0])
    w2 = [1.0] * len(rows) if weights is None else [w * w for w in weights]
    g = [[0.0] * n for _ in range(n)]
    h = [0.0] * n
    for row, t, ww in zip(rows, y, w2):
        for i in range(n):
            ri = row[i] * ww
            if ri:
                h[i] += ri * t
                gi = g[i]
                for j in range(n):
                    gi[j] += ri * row[j]
    # Scale columns to unit norm so features of wildly different magnitude condition well.
    scale = [g[i][i] ** 0.5 for i in range(n)]
    live = [i for i in range(n) if scale[i] > 0.0]
    gs = [[g[i][j] / (scale[i] * scale[j]) for j in live] for i in live]
    hs = [h[i] / scale[i] for i in live]
    xs = _lawson_hanson(gs, hs, max_iter)
    x = [0.0] * n
    for k, i in enumerate(live):
        x[i] = xs[k] / scale[i]
    return x


def _lawson_hanson(g: list[list[float]], h: list[float], max_iter: int) -> list[float]:
    n = len(h)
    tol = 1e-12 * max(1.0, max((abs(v) for v in h), default=1.0))
    x = [0.0] * n
    passive: list[int] = []

    def gradient() -> list[float]:
        return [h[i] - sum(g[i][j] * x[j] for j in range(n)) for i in range(n)]

    def sub_solve(p: list[int]) -> list[float]:
        ridge = 1e-12
        a = [[g[i][j] + (ridge if i == j else 0.0) for j in p] for i in p]
        z = solve(a, [h[i] for i in p])
        full = [0.0] * n
        for k, i in enumerate(p):
            full[i] = z[k]
        return full

    for _ in range(max_iter):
        w = gradient()
        active = [i for i in range(n) if i not in passive]
        if not active:
            break
        j = max(active, key=lambda i: w[i])
        if w[j] <= tol:
            break
        passive.append(j)
        for _ in range(max_iter):
            z = sub_solve(passive)
            if all(z[i] > 0.0 for i in passive):
                x = z
                break
            alpha = min(x[i] / (x[i] - z[i]) for i in passive if z[i] <= 0.0)
            x = [x[i] + alpha * (z[i] - x[i]) for i in range(n)]
            passive = [i for i in passive if x[i] > 1e-15]
            for i in range(n):
                if i not in passive:
                    x[i] = 0.0
            if not passive:
                break
    return x
