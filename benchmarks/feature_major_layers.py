"""Why the layer loop runs feature-major: a Llama layer stack laid out both ways, side by side.

    python benchmarks/feature_major_layers.py                 # T = 1, 4, 16, 64, 512, 2048
    python benchmarks/feature_major_layers.py --tokens 16,512 --rounds 9
    bash benchmarks/gpu_session.sh layers                     # the same on a GPU

Data flow: random weights of the 31M benchmark Llama's layers (8 layers, D 512, F 1536, 8 query
heads, 2 kv heads, head_dim 64, float32), stacked [L, ...] and run by `lax.scan` as the engine
does, in two forms with the same arithmetic:
  token-major:   x [T, D], weights [in, out] (medha-jax before 2026-11-28): y @ W
  feature-major: x [D, T], weights [out, in] (Hugging Face's layout, medha-jax's now): W @ y
each layer: RMSNorm -> q/k/v projections -> RoPE -> causal attention among the T tokens (a
stand-in for the paged attention, which both forms call token-major) -> o projection ->
RMSNorm -> SwiGLU MLP; -> per T, `--rounds` interleaved rounds timing each form, median ms per
stack, the ratio, and the largest difference between the forms' outputs -> results/NAME.json/.md
(default feature_major_layers_<platform>) with the machine and its load. No engine: the
projections' cost alone, where the layout matters.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
L, D, F, H, K, Dh = 8, 512, 1536, 8, 2, 64


def _weights(seed: int):
    rng = np.random.default_rng(seed)

    def w(*shape):
        return jnp.asarray(rng.standard_normal(shape, dtype=np.float32) * 0.05)

    io = dict(wq=w(L, D, H, Dh), wk=w(L, D, K, Dh), wv=w(L, D, K, Dh), wo=w(L, H, Dh, D), wg=w(L, D, F),
              wu=w(L, D, F), wd=w(L, F, D), n1=w(L, D) + 1, n2=w(L, D) + 1)
    oi = dict(wq=io["wq"].transpose(0, 2, 3, 1), wk=io["wk"].transpose(0, 2, 3, 1), wv=io["wv"].transpose(0, 2, 3, 1),
              wo=io["wo"].transpose(0, 3, 1, 2), wg=io["wg"].transpose(0, 2, 1), wu=io["wu"].transpose(0, 2, 1),
              wd=io["wd"].transpose(0, 2, 1), n1=io["n1"], n2=io["n2"])
    return io, oi


def _rms(x, g, axis):
    shape = [1] * x.ndim
    shape[axis] = -1
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=axis, keepdims=True) + 1e-6) * g.reshape(shape)


def _rope(x, pos, feature_major: bool):
    half = Dh // 2
    ang = pos[:, None] * (1.0 / (10000 ** (jnp.arange(half) / half)))[None, :]  # ang: f32[T, Dh/2]
    c, s = jnp.cos(ang), jnp.sin(ang)
    if feature_major:  # x: [N, Dh, T]
        c, s = c.T, s.T
        x1, x2 = x[:, :half, :], x[:, half:, :]
        return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-2)
    c, s = c[:, None, :], s[:, None, :]  # x: [T, N, Dh]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def _attend(q, k, v):
    """q: [T, H, Dh], k/v: [T, K, Dh] -> [T, H, Dh], causal among the T tokens."""
    T = q.shape[0]
    s = jnp.einsum("tkgd,jkd->kgtj", q.reshape(T, K, H // K, Dh), k) * Dh ** -0.5
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
    return jnp.einsum("kgtj,jkd->tkgd", jax.nn.softmax(s, -1), v).reshape(T, H, Dh)


def _layer_token_major(x, p, pos):  # x: [T, D], weights [in, out]
    y = _rms(x, p["n1"], -1)
    q, k, v = (jnp.einsum("td,dhk->thk", y, p[n]) for n in ("wq", "wk", "wv"))
    x = x + jnp.einsum("thk,hkd->td", _attend(_rope(q, pos, False), _rope(k, pos, False), v), p["wo"])
    y = _rms(x, p["n2"], -1)
    h = jax.nn.silu(jnp.einsum("td,df->tf", y, p["wg"])) * jnp.einsum("td,df->tf", y, p["wu"])
    return x + jnp.einsum("tf,fd->td", h, p["wd"])


def _layer_feature_major(x, p, pos):  # x: [D, T], weights [out, in]
    y = _rms(x, p["n1"], 0)
    q, k, v = (jnp.einsum("hkd,dt->hkt", p[n], y) for n in ("wq", "wk", "wv"))  # [N, Dh, T]
    q, k = (_rope(a, pos, True).transpose(2, 0, 1) for a in (q, k))
    x = x + jnp.einsum("dhk,thk->dt", p["wo"], _attend(q, k, v.transpose(2, 0, 1)))
    y = _rms(x, p["n2"], 0)
    return x + jnp.einsum("df,ft->dt", p["wd"], jax.nn.silu(p["wg"] @ y) * (p["wu"] @ y))


@jax.jit
def token_major(x, params, pos):
    return jax.lax.scan(lambda h, p: (_layer_token_major(h, p, pos), None), x, params)[0]


@jax.jit
def feature_major(x, params, pos):
    return jax.lax.scan(lambda h, p: (_layer_feature_major(h, p, pos), None), x.T, params)[0].T


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", default="1,4,16,64,512,2048", help="comma-separated batch token counts T")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default=None, help="default feature_major_layers_<platform>")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    io, oi = _weights(0)
    rng = np.random.default_rng(1)
    rows = []
    for T in map(int, args.tokens.split(",")):
        x = jnp.asarray(rng.standard_normal((T, D), dtype=np.float32))
        pos = jnp.arange(T, dtype=jnp.float32) + 500.0
        forms = {"token-major": (token_major, io), "feature-major": (feature_major, oi)}
        outs = {k: np.asarray(f(x, p, pos)) for k, (f, p) in forms.items()}
        diff = float(np.max(np.abs(outs["token-major"] - outs["feature-major"])))
        reps = max(3, 800 // T)
        ms: dict[str, list[float]] = {k: [] for k in forms}
        for _ in range(args.rounds):
            for k, (f, p) in forms.items():
                f(x, p, pos).block_until_ready()
                t0 = time.perf_counter()
                for _ in range(reps):
                    f(x, p, pos).block_until_ready()
                ms[k].append((time.perf_counter() - t0) / reps * 1e3)
        tm, fm = statistics.median(ms["token-major"]), statistics.median(ms["feature-major"])
        rows.append(dict(tokens=T, token_major_ms=tm, feature_major_ms=fm, speedup=tm / fm, max_abs_diff=diff,
                         rounds_ms=ms))
        print(f"T={T}: token-major {tm:.2f} ms, feature-major {fm:.2f} ms ({tm / fm:.2f}x), max diff {diff:.1e}",
              flush=True)
    platform = jax.devices()[0].platform
    report = dict(run_info("feature_major_layers.py", argv, load_before), device=str(jax.devices()[0].device_kind),
                  layers=L, hidden=D, mlp=F, heads=H, kv_heads=K, head_dim=Dh, rounds=args.rounds, rows=rows)
    lines = [f"# A Llama layer stack token-major vs feature-major (XLA:{platform.upper()}, {report['device']})", "",
             f"{provenance(report)} {L} layers of the 31M benchmark Llama (D {D}, F {F}, {H} heads, {K} kv heads, "
             f"head_dim {Dh}), float32, `lax.scan` over stacked weights as in the engine; causal attention among "
             f"the T tokens stands in for the paged attention. Median of {args.rounds} interleaved rounds.", "",
             "| tokens T | token-major, weights [in, out] (ms) | feature-major, weights [out, in] (ms) | "
             "speed-up | max abs diff |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['tokens']} | {r['token_major_ms']:.2f} | {r['feature_major_ms']:.2f} | "
                     f"{r['speedup']:.2f}x | {r['max_abs_diff']:.1e} |")
    write_results(args.out, args.name or f"feature_major_layers_{platform}", report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
