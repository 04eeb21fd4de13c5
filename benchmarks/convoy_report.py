"""Helpers of benchmarks/convoy.py: per-configuration summaries, the table, and the plots.

  [RequestResult] --summarize--> TTFT P50/P99 per class (short, long), TPOT P50/P99 of short requests,
                                 throughput, deadline misses per class, the long request's TTFT and
                                 completion time, errors
  {config: summary} --table--> fixed-width text (printed) / markdown
  two configurations' request lists (same workload) --paired_percentile_diff--> the difference of a TTFT
      percentile over the requests both served, with a 95% paired-bootstrap interval: is a gap noise?
  {config: [RequestResult]} --plot_ttft_over_time / plot_ttft_cdf--> PNG (matplotlib, Agg)
"""

from __future__ import annotations

import math
import random


def percentile(values, q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]); None for no values."""
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return None
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def short_ttfts(requests: list[dict]) -> dict[tuple[str, int], float]:
    """A configuration's pooled requests (results JSON entries, rounds one after the other) -> the
    short requests' TTFTs keyed by (request id, its occurrence: the round), those with a first token."""
    seen: dict[str, int] = {}
    out = {}
    for q in requests:
        n = seen[q["request_id"]] = seen.get(q["request_id"], -1) + 1
        if q["kind"] == "short" and q.get("ttft_s") is not None:
            out[(q["request_id"], n)] = q["ttft_s"]
    return out


def paired_percentile_diff(a: dict, b: dict, q: float = 99, reps: int = 2000, seed: int = 0):
    """a, b: {request key: value} of one workload under two configurations -> (percentile q of a's
    values less b's, over the keys both have; the 2.5th and 97.5th percentiles of that difference
    over `reps` resamples of the keys with replacement, the same keys for both): the interval a gap
    between the two configurations' percentiles has to leave before it says more than which
    requests happened to land in the tail. None without shared keys."""
    keys = sorted(set(a) & set(b))
    if not keys:
        return None
    xa, xb = [a[k] for k in keys], [b[k] for k in keys]
    rng, n = random.Random(seed), len(keys)
    diffs = []
    for _ in range(reps):
        idx = [rng.randrange(n) for _ in range(n)]
        diffs.append(percentile([xa[i] for i in idx], q) - percentile([xb[i] for i in idx], q))
    diffs.sort()
    return percentile(xa, q) - percentile(xb, q), diffs[int(0.025 * reps)], diffs[int(0.975 * reps) - 1]


def gap_reading(lo: float, hi: float, name: str) -> str:
    """A paired interval of `name`'s percentile less the other's -> 'noise' (it holds 0), or which
    way the gap goes beyond it."""
    return "noise" if lo <= 0 <= hi else f"{name} {'faster' if hi < 0 else 'slower'}"


def summarize(results) -> dict:
    ok = [r for r in results if r.error is None and r.finish_s is not None]
    out: dict = {"num_requests": len(results), "num_completed": len(ok),
                 "num_errors": sum(r.error is not None for r in results)}
    for kind in ("short", "long"):
        rs = [r for r in results if r.kind == kind]
        done = [r for r in rs if r.error is None and r.ttft is not None]
        ttfts = [r.ttft for r in done]
        tpots = [r.tpot for r in done if r.tpot is not None]
        # a request that never produced its first token missed its deadline too
        misses = sum(1 for r in rs if r.ttft_deadline_s is not None and (r.ttft is None or r.ttft > r.ttft_deadline_s))
        out[kind] = {
            "count": len(rs), "completed": sum(r.finish_s is not None and r.error is None for r in rs),
            "ttft_p50_s": percentile(ttfts, 50), "ttft_p90_s": percentile(ttfts, 90),
            "ttft_p99_s": percentile(ttfts, 99), "ttft_max_s": max(ttfts) if ttfts else None,
            "ttft_mean_s": sum(ttfts) / len(ttfts) if ttfts else None,
            "tpot_p50_s": percentile(tpots, 50), "tpot_p99_s": percentile(tpots, 99),
            "deadline_misses": misses,
            "deadline_miss_rate": misses / len(rs) if rs else None,
        }
    longs = [r for r in results if r.kind == "long"]
    out["long_requests"] = [
        {"request_id": r.request_id, "prompt_len": r.prompt_len, "arrival_s": r.arrival_s, "ttft_s": r.ttft,
         "completion_s": r.e2e, "deadline_s": r.ttft_deadline_s, "preemptions": r.num_preemptions, "error": r.error}
        for r in longs
    ]
    comp = [r.e2e for r in longs if r.e2e is not None]
    out["long_completion_s"] = max(comp) if comp and len(comp) == len(longs) else None
    if ok:
        start = min(r.send_s for r in ok)
        end = max(r.finish_s for r in ok)
        span = max(end - start, 1e-9)
        toks = sum(r.prompt_len + r.num_tokens for r in ok)
        out["makespan_s"] = span
        out["throughput_tok_s"] = toks / span
        out["throughput_out_tok_s"] = sum(r.num_tokens for r in ok) / span
        out["throughput_req_s"] = len(ok) / span
    return out


def _f(x, digits=2, unit=""):
    if x is None:
        return "-"
    if isinstance(x, float) and x >= 100:
        return f"{x:.0f}{unit}"
    return f"{x:.{digits}f}{unit}"


COLUMNS = [
    ("config", lambda n, s: n),
    ("short TTFT P50", lambda n, s: _f(s["short"]["ttft_p50_s"], unit=" s")),
    ("short TTFT P99", lambda n, s: _f(s["short"]["ttft_p99_s"], unit=" s")),
    ("long TTFT", lambda n, s: _f(s["long"]["ttft_p50_s"] if s["long"]["count"] == 1 else s["long"]["ttft_p99_s"],
                                   unit=" s")),
    ("short TPOT P50", lambda n, s: _f(s["short"]["tpot_p50_s"], 3, " s")),
    ("short TPOT P99", lambda n, s: _f(s["short"]["tpot_p99_s"], 3, " s")),
    ("tok/s", lambda n, s: _f(s.get("throughput_tok_s"), 0)),
    ("req/s", lambda n, s: _f(s.get("throughput_req_s"), 2)),
    ("misses short", lambda n, s: f"{s['short']['deadline_misses']}/{s['short']['count']}"),
    ("misses long", lambda n, s: f"{s['long']['deadline_misses']}/{s['long']['count']}"),
    ("long done after", lambda n, s: _f(s.get("long_completion_s"), 1, " s")),
    ("errors", lambda n, s: str(s["num_errors"])),
]


def table_rows(summaries: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    head = [c for c, _ in COLUMNS]
    rows = [[fn(name, s) for _, fn in COLUMNS] for name, s in summaries.items()]
    return head, rows


def text_table(summaries: dict[str, dict]) -> str:
    head, rows = table_rows(summaries)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def markdown_table(summaries: dict[str, dict]) -> str:
    head, rows = table_rows(summaries)
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


COLORS = {"fcfs_nonchunked": "tab:red", "fcfs": "tab:orange", "edf": "tab:purple", "lrs": "tab:brown",
          "lars": "tab:green"}


def _short_deadline(results) -> float | None:
    """The median TTFT deadline of the short requests (they share the floor in practice)."""
    return percentile([r.ttft_deadline_s for r in results if r.kind == "short"], 50)


def plot_ttft_over_time(runs: dict[str, list], path: str, title: str = "") -> None:
    """One panel per configuration: each request's TTFT at its arrival time (Medha Fig. 1b)."""
    plt = _plt()
    n = len(runs)
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.3 * n + 0.6), sharex=True, sharey=True, squeeze=False)
    for ax, (name, results) in zip(axes[:, 0], runs.items()):
        c = COLORS.get(name, None)
        sh = [r for r in results if r.kind == "short" and r.ttft is not None]
        ax.scatter([r.send_s for r in sh], [r.ttft for r in sh], s=9, color=c, label="short requests")
        for r in results:
            if r.kind != "long":
                continue
            end = r.first_token_s if r.first_token_s is not None else r.send_s
            ax.axvspan(r.send_s, end, color="grey", alpha=0.15, lw=0)
            if r.ttft is not None:
                ax.scatter([r.send_s], [r.ttft], marker="*", s=120, color="black",
                           label=f"long request ({r.prompt_len} tokens)")
        failed = [r for r in results if r.kind == "short" and r.ttft is None]
        if failed:
            ax.scatter([r.arrival_s for r in failed], [ax.get_ylim()[1]] * len(failed), marker="x", color="k",
                       label="no first token")
        dl = _short_deadline(results)
        if dl is not None:
            ax.axhline(dl, color="k", ls="--", lw=0.8, label=f"short TTFT deadline ({dl:.2g} s)")
        ax.set_yscale("log")
        ax.set_ylabel("TTFT (s)")
        ax.set_title(name, fontsize=10, loc="left")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("arrival time (s); shaded: the long request's prefill (arrival to first token)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_ttft_cdf(runs: dict[str, list], path: str, title: str = "") -> None:
    """CDF of short-request TTFT per configuration (Medha Fig. 1a / 9a); the long request's TTFT as a mark."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, results in runs.items():
        c = COLORS.get(name, None)
        xs = sorted(r.ttft for r in results if r.kind == "short" and r.ttft is not None)
        if xs:
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.step(xs, ys, where="post", color=c, label=name)
        for r in results:
            if r.kind == "long" and r.ttft is not None:
                ax.axvline(r.ttft, color=c, ls=":", lw=1)
    dl = _short_deadline(next(iter(runs.values()), []))
    if dl is not None:
        ax.axvline(dl, color="k", ls="--", lw=0.8, label=f"short TTFT deadline ({dl:.2g} s)")
    ax.set_xscale("log")
    ax.set_xlabel("short-request TTFT (s); dotted: the long request's TTFT")
    ax.set_ylabel("CDF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
