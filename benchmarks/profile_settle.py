"""The runtime profile timed with and without settle runs, side by side: how much of the predictor's
held-out error is the order its samples were timed in.

    python benchmarks/profile_settle.py                  # the convoy's engine, 7 repeats, ~16 min
    python benchmarks/profile_settle.py --repeats 5 --passes 2

Data flow: the convoy benchmark's engine (demo model, its default shapes: `convoy.engine_shapes`,
pages of 64, one 16-slot sequence bucket, 32K contexts) -> the full profile grid
(`runtime_profiler.composition_grid`, as `python -m medha_jax.profile` measures it) ->
`runtime_profiler.measure_all` once per mode and pass, the modes alternating (off: SETTLE_BELOW 0,
every timed run follows another composition, as before profile version 10; on: the default, an
untimed run of the same composition before each timed run under SETTLE_BELOW), every timing kept ->
per mode: the held-out MAPE (5-fold, three fold seeds) of fits to the median of the first 3 repeats
(what `--repeats 3` keeps) and of all of them, for iterations with and without a prefill chunk; the
noise floor (the median of the first half of the repeats against the second half's); how much slower
than its fastest run a small iteration ran after a big one -> a probe of one small decode iteration
timed back to back, right after a 2K-token chunk over 16K keys, after that chunk and one run of its
own, and after 300 ms idle -> results/NAME.json/.md (default profile_settle_<platform>) with the
machine and its load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import convoy  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

from medha_jax import runtime_profiler as rp  # noqa: E402
from medha_jax.profile import parser as profile_flags, profiling_parts  # noqa: E402
from medha_jax.scheduler import Composition  # noqa: E402
from medha_jax.scheduler.predictor import RuntimePredictor, has_prefill  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SMALL, BIG = 0.02, 1.0  # seconds: "a small iteration after a big one"


def build_parts(smoke: bool):
    """The engine `python -m medha_jax.profile` measures on, with the convoy's shapes
    (`profile.profiling_parts`); smoke: its `--smoke` shapes (128-token contexts)."""
    shapes = convoy.engine_shapes(vars(convoy.parse_args(["--smoke"] if smoke else [])))
    flags = ["--model", "demo", "--num-devices", "1", "--no-background-compile",
             *(a for k, v in shapes.items() for a in (f"--{k.replace('_', '-')}", str(v)))]
    _, parts = profiling_parts(profile_flags().parse_args(flags))
    return parts, " ".join(flags)


def summarize(timed: list[tuple[Composition, list[float]]], tiling, repeats: int) -> dict:
    def fit_errors(samples):
        held = [rp.fit_with_holdout(samples, tiling=tiling, seed=s)[1] for s in (0, 1, 2)]
        p = RuntimePredictor.fit(samples, tiling=tiling)
        kinds = {True: [], False: []}
        for c, t in samples:
            kinds[has_prefill(c)].append(abs(p.predict_raw(c) - t) / t)
        return dict(held_out=held, train=p.fit_info["train_mape"],
                    prefill=statistics.fmean(kinds[True]), decode_only=statistics.fmean(kinds[False]))

    out = {"median_first3": fit_errors([(c, statistics.median(ts[:3])) for c, ts in timed]),
           f"median_all{repeats}": fit_errors([(c, statistics.median(ts)) for c, ts in timed])}
    h = repeats // 2
    halves = [(abs(statistics.median(ts[:h]) - statistics.median(ts[h:2 * h])) / statistics.median(ts[h:2 * h]),
               has_prefill(c)) for c, ts in timed]
    out["halves"] = dict(all=statistics.fmean(e for e, _ in halves),
                         decode_only=statistics.fmean(e for e, p in halves if not p),
                         worst=max(e for e, _ in halves))
    fastest = [min(ts) for _, ts in timed]
    order = [(rnd, i) for rnd, o in enumerate(rp.round_orders(len(timed), 1 + repeats)) for i in o]
    after_big = []
    for (_, p), (rnd, i) in zip(order, order[1:]):
        if rnd and fastest[i] < SMALL and fastest[p] >= BIG:
            after_big.append(timed[i][1][rnd - 1] / fastest[i])
    out["small_after_big"] = dict(n=len(after_big), median=statistics.median(after_big) if after_big else None)
    return out


def probe(ex, vocab: int, max_kv: int, reps: int) -> dict:
    """Milliseconds of one small decode iteration (2 decodes at 256 keys): back to back, after a
    2K-token chunk over 16K keys, after that chunk and one run of its own, after 300 ms idle (on a
    smaller engine: 2 decodes at a quarter of its context, after a chunk of half of it over the rest)."""
    gp = ex.total_pages // ex.kvp
    dkv, q = min(256, max_kv // 4), min(2048, ex.ladders.tokens[-1], max_kv // 2)
    small = rp.synthetic_batch(Composition.of([(1, dkv)] * 2), ex.page_size, gp, vocab)
    big = rp.synthetic_batch(Composition.of([(q, min(16384, max_kv - q))]), ex.page_size, gp, vocab)
    for b in (small, big):
        ex.execute(b)

    def timed(b):
        t0 = time.perf_counter()
        ex.execute(b)
        return time.perf_counter() - t0

    cases = {"back to back": lambda: None, "after the 2K chunk": lambda: ex.execute(big),
             "after the chunk and one of its own": lambda: (ex.execute(big), ex.execute(small)),
             "after 300 ms idle": lambda: time.sleep(0.3)}
    runs = {k: [] for k in cases}
    for _ in range(reps):  # the cases interleaved
        for k, before in cases.items():
            before()
            runs[k].append(timed(small))
    return {k: dict(median_ms=1e3 * statistics.median(v), min_ms=1e3 * min(v), max_ms=1e3 * max(v))
            for k, v in runs.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7, help="timed rounds per mode and pass (>= 4: two halves)")
    ap.add_argument("--passes", type=int, default=1, help="off then on, then on then off, ...")
    ap.add_argument("--probe-reps", type=int, default=12)
    ap.add_argument("--smoke", action="store_true", help="the convoy's --smoke shapes: the code path only")
    ap.add_argument("--name", default=None)
    ap.add_argument("--out", default=str(RESULTS))
    ns = ap.parse_args(argv)
    if ns.repeats < 4:
        ap.error("--repeats must be at least 4 (the noise floor compares two halves)")
    load_before = os.getloadavg()
    parts, flags = build_parts(ns.smoke)
    ex = parts.executor
    vocab = parts.model_config.vocab_size
    max_kv = rp.profile_max_kv(ex, parts.max_model_len)
    comps = rp.composition_grid(ex.ladders.tokens[-1], ex.ladders.seqs[-1], max_kv)
    tiling = rp.Tiling.for_executor(ex)
    default_settle = rp.SETTLE_BELOW
    modes = {"off": 0.0, "on": default_settle}
    report = {"engine_flags": flags, "settle_below": default_settle, "compositions": len(comps),
              "repeats": ns.repeats, "passes": []}
    for n in range(ns.passes):
        for mode in (("off", "on") if n % 2 == 0 else ("on", "off")):
            rp.SETTLE_BELOW = modes[mode]
            t0 = time.perf_counter()
            timed = rp.measure_all(ex, comps, vocab_size=vocab, repeats=ns.repeats, progress=False)
            wall = time.perf_counter() - t0
            rp.SETTLE_BELOW = default_settle
            row = {"pass": n, "mode": mode, "wall_s": wall, **summarize(timed, tiling, ns.repeats),
                   "samples": [[c.to_json(), ts] for c, ts in timed]}
            report["passes"].append(row)
            print(f"pass {n} settle {mode}: {wall:.0f} s, held-out (median of 3) "
                  + " ".join(f"{100 * e:.1f}%" for e in row["median_first3"]["held_out"]), flush=True)
    report["probe"] = probe(ex, vocab, max_kv, ns.probe_reps)
    report.update(run_info("profile_settle.py", argv, load_before))
    name = ns.name or f"profile_settle_{report['machine'].split()[0].lower()}"
    write_results(Path(ns.out), name, report, markdown(report))
    return 0


def pct(x) -> str:
    return f"{100 * x:.1f}%"


def markdown(r: dict) -> list[str]:
    k = f"median_all{r['repeats']}"
    lines = [f"# Runtime profile timed with and without settle runs ({r['compositions']} compositions, "
             f"{r['repeats']} repeats)", "", provenance(r), "",
             f"Engine: `{r['engine_flags']}`. Settle: an untimed run of the same composition before each timed "
             f"run of one that took under {r['settle_below']} s in the first pass (`runtime_profiler.SETTLE_BELOW`).",
             "", "| pass | settle | wall s | held-out MAPE, median of 3 (3 fold seeds) | its prefill / decode-only "
             f"(train) | held-out, median of {r['repeats']} | halves disagree (decode-only, worst) | small after big "
             "(n, median x its fastest) |", "|---|---|---|---|---|---|---|---|"]
    for p in r["passes"]:
        m3, ma, h, sb = p["median_first3"], p[k], p["halves"], p["small_after_big"]
        after = f"{sb['n']}, {sb['median']:.2f}x" if sb["median"] else "none"
        lines.append(f"| {p['pass']} | {p['mode']} | {p['wall_s']:.0f} | {' / '.join(pct(e) for e in m3['held_out'])} "
                     f"| {pct(m3['prefill'])} / {pct(m3['decode_only'])} ({pct(m3['train'])}) "
                     f"| {' / '.join(pct(e) for e in ma['held_out'])} "
                     f"| {pct(h['all'])} ({pct(h['decode_only'])}, {h['worst']:.2f}) | {after} |")
    lines += ["", "One small decode iteration (2 decodes at 256 keys; `--smoke`: fewer), the cases interleaved:", "",
              "| before it | median ms | min | max |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['median_ms']:.1f} | {v['min_ms']:.1f} | {v['max_ms']:.1f} |" for k, v in r["probe"].items()]
    return lines


if __name__ == "__main__":
    sys.exit(main())
