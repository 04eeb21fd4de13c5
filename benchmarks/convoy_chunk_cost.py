"""Where the convoy's long request loses time against fcfs_nonchunked: its budgeted chunks against the
whole prompt on the engine's own tick program, and the served iterations against those ticks.

    python benchmarks/convoy_chunk_cost.py benchmarks/results/convoy_idle_gap.json \
        --traces /tmp/cv/trace_slo_1.jsonl,/tmp/cv/trace_edf_0.jsonl --name convoy_chunk_cost_cpu

Data flow: a convoy results JSON (its long prompt's length, t_target, the runtime profile and engine
settings it ran with) -> the budgeted chunk plan (`PrefillTimeCache`, as the convoy's deadlines and
floor line derive it: the prompt alone, each chunk the largest whose predicted iteration fits
t_target) -> the engine's tick program (`tick_batches`: the demo model's seeded weights, one device,
the convoy's pages) timed on every chunk size of the plan at its first, middle and last cached
length, and on the whole prompt at once -> the plan's time, each chunk interpolated over cached
length within its size -> with --traces (`serve --iteration-trace` files of the same workload, e.g.
`convoy.py --iteration-trace`'s): for every served iteration that held a long chunk of a sampled
size, its measured time over that chunk's tick alone, split by what rode with it (decodes only, or
other prompts' prefills too); and the long prefill's window: its iterations' measured time, the
same chunks' ticks alone, and the iterations without a long chunk -> results/NAME.{json,md}.

The plan's ticks against the whole prompt's are what chunking itself costs (each iteration's fixed
time, narrower attention tiles); the served iterations against the ticks are what serving adds
(the decodes and prompts beside the chunk, the sampler, the host); the rest of the window is the
other requests' iterations.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from results_io import provenance, run_info, write_results  # noqa: E402
from tick_batches import per_layer_params, time_ticks  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def chunk_plan(report: dict) -> list[tuple[int, int]]:
    """The long prompt's budgeted chunks alone, (tokens, cached length) each, from the convoy's report
    (the prefill-time simulation its deadlines and floor line come from, `convoy.prefill_time_cache`)."""
    from convoy import prefill_time_cache

    from medha_jax.scheduler.predictor import RuntimePredictor

    choice, settings = report["choice"], report["settings"]
    _, cache = prefill_time_cache(RuntimePredictor.load(report["profile"]["path"]), choice, settings["max_num_seqs"],
                                  settings.get("time_budget_token_cap"), cache_dir="")
    L = choice["long_len"]
    cache.build(L + 1)
    starts = [s for s in cache.chunk_starts() if s < L] + [L]
    return [(b - a, a) for a, b in zip(starts, starts[1:])]


def sample_points(plan: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each chunk size at its first, middle and last cached length (fewer when it occurs less)."""
    by_size: dict[int, list[int]] = {}
    for q, kv in plan:
        by_size.setdefault(q, []).append(kv)
    points = []
    for q, kvs in sorted(by_size.items()):
        points += [(q, kv) for kv in sorted({kvs[0], kvs[len(kvs) // 2], kvs[-1]})]
    return points


class TickTable:
    """Measured ms a tick at sampled (tokens, cached length) points, linear in cached length between
    them within one chunk size (constant beyond the ends)."""

    def __init__(self, points: dict[tuple[int, int], float]):
        self.by_size: dict[int, list[tuple[int, float]]] = {}
        for (q, kv), ms in sorted(points.items()):
            self.by_size.setdefault(q, []).append((kv, ms))

    def ms(self, q: int, kv: int) -> float | None:
        pts = self.by_size.get(q)
        if not pts:
            return None
        kvs = [p[0] for p in pts]
        i = bisect.bisect_left(kvs, kv)
        if i == 0:
            return pts[0][1]
        if i == len(pts):
            return pts[-1][1]
        (k0, m0), (k1, m1) = pts[i - 1], pts[i]
        return m0 + (m1 - m0) * (kv - k0) / (k1 - k0)


def served(label: str, trace_path: str, table: TickTable, whole: tuple[int, float]) -> dict:
    """One iteration trace -> the long prefill's window and its iterations against the table; a trace
    whose long prompt ran in one iteration (fcfs_nonchunked) -> that iteration over the whole
    prompt's tick (whole: its tokens, ms), the machine's speed then against now."""
    lines = [json.loads(x) for x in open(trace_path, encoding="utf-8") if x.strip()]
    longs = [i for i, x in enumerate(lines) if any(p[0].startswith("long") for p in x["prefills"])]
    if not longs:
        return dict(trace=label, long_iterations=0)
    a, b = longs[0], longs[-1]
    window = lines[b]["end"] - (lines[a]["end"] - lines[a]["measured"])
    ratios: dict[str, list[float]] = {"decodes only": [], "with other prefills": []}
    covered_measured = covered_alone = 0.0
    decodes = []
    for i in longs:
        x = lines[i]
        (_, kv, q), = [p for p in x["prefills"] if p[0].startswith("long")]
        decodes.append(x["decodes"])
        alone = table.ms(q, kv)
        if alone is None:
            continue
        kind = "decodes only" if len(x["prefills"]) == 1 else "with other prefills"
        ratios[kind].append(1e3 * x["measured"] / alone)
        covered_measured += x["measured"]
        covered_alone += alone / 1e3
    if len(longs) == 1 and lines[a]["prefills"][0][2] == whole[0]:
        return dict(trace=label, long_iterations=1, whole_served_s=lines[a]["measured"],
                    whole_served_over_tick=1e3 * lines[a]["measured"] / whole[1])
    in_window = sum(lines[i]["measured"] for i in range(a, b + 1))
    with_long = sum(lines[i]["measured"] for i in longs)

    def pct(v, p):
        return sorted(v)[min(len(v) - 1, int(p * len(v)))] if v else None
    return dict(
        trace=label, window_s=window, long_iterations=len(longs),
        iterations_in_window=b - a + 1, measured_in_window_s=in_window, with_long_chunk_s=with_long,
        without_long_chunk_s=in_window - with_long, mean_decodes_beside=statistics.fmean(decodes),
        covered=sum(len(v) for v in ratios.values()), covered_measured_s=covered_measured,
        covered_ticks_alone_s=covered_alone,
        ratio={k: dict(n=len(v), p50=pct(v, 0.5), p10=pct(v, 0.1), p90=pct(v, 0.9)) for k, v in ratios.items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", type=Path, help="a convoy results JSON (benchmarks/results/convoy*.json)")
    ap.add_argument("--traces", default="", help="comma-separated iteration traces of runs with the same long prompt "
                    "and t_target, each PATH or LABEL=PATH (the label names its row; default: the file's name)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default="convoy_chunk_cost_cpu")
    args = ap.parse_args(argv)
    report = json.loads(args.results.read_text())
    if report.get("settings", {}).get("smoke"):
        ap.error(f"{args.results}: a --smoke run's engine is not the demo model's")
    load_before = os.getloadavg()
    plan = chunk_plan(report)
    L, page = report["choice"]["long_len"], report["settings"]["page_size"]
    points = sample_points(plan)
    print(f"long prompt {L} tokens, t_target {report['choice']['t_target']} s: {len(plan)} chunks; timing "
          f"{len(points)} of them and the whole prompt", flush=True)

    from medha_jax.demo_model import DEMO_CONFIG
    from pallas_kernels.reference import paged_attention_xla

    mesh, params = per_layer_params(DEMO_CONFIG)
    programs = {"tick": (params, paged_attention_xla, True)}

    def tick_ms(q, kv, reps):
        spec = f"p{q}@{kv}" if kv else f"p{q}"
        ms = time_ticks(programs, spec, DEMO_CONFIG, mesh, args.rounds, reps, page)["tick"]["ms"]
        print(f"  {spec}: {statistics.median(ms):.1f} ms", flush=True)
        return statistics.median(ms)
    measured = {(q, kv): tick_ms(q, kv, 2) for q, kv in points}
    whole_ms = tick_ms(L, 0, 1)
    table = TickTable(measured)
    plan_ms = sum(table.ms(q, kv) for q, kv in plan)
    runs = []
    for item in filter(None, args.traces.split(",")):
        label, _, path = item.rpartition("=")
        runs.append(served(label or os.path.basename(path), path, table, (L, whole_ms)))

    sizes = Counter(q for q, _ in plan)
    res = dict(run_info("convoy_chunk_cost.py", argv, load_before), source=str(args.results), long_len=L,
               t_target=report["choice"]["t_target"], page_size=page, chunks=len(plan),
               chunk_sizes={str(q): n for q, n in sorted(sizes.items())},
               ticks_ms={f"p{q}@{kv}": ms for (q, kv), ms in measured.items()}, whole_ms=whole_ms,
               plan_ms=plan_ms, served=runs)
    lines = [f"# The convoy's long prompt: budgeted chunks vs the whole prompt ({L} tokens)", "",
             f"{provenance(res)} Source: `{args.results}` (t_target {res['t_target']} s, pages of {page}). Engine tick "
             f"program of the demo model on one device, median of {args.rounds} rounds a point.", "",
             "| quantity | value |", "|---|---|",
             f"| the budgeted plan | {len(plan)} chunks: " + ", ".join(f"{n} x {q}" for q, n in sizes.most_common()) + " |",
             f"| the whole prompt in one tick | {whole_ms / 1e3:.2f} s |",
             f"| the plan's ticks (interpolated over cached length from {len(points)} timed points) | "
             f"{plan_ms / 1e3:.2f} s = **{plan_ms / whole_ms:.2f}x** the whole prompt |", ""]
    if runs:
        lines += ["Served iterations holding a long chunk, measured over the same chunk's tick alone "
                  "(P10 / P50 / P90; chunk sizes the plan has; the others are not counted), and the long "
                  "prefill's window. The served runs and these ticks ran at different times on a shared VM "
                  "whose speed drifts by ~10%: a fcfs_nonchunked trace's one whole-prompt iteration over "
                  "the whole prompt's tick here tells how far:", "",
                  "| trace | iterations with a long chunk | decodes beside (mean) | decodes only beside | "
                  "with other prefills | window | those iterations / their ticks alone | iterations without "
                  "a long chunk |", "|---|---|---|---|---|---|---|---|"]
        for r in runs:
            if not r["long_iterations"]:
                lines.append(f"| {r['trace']} | 0 | | | | | | |")
                continue
            if "whole_served_s" in r:
                lines.append(f"| {r['trace']} | 1: the whole prompt, {r['whole_served_s']:.2f} s served = "
                             f"**{r['whole_served_over_tick']:.2f}x** its tick here (the machine then vs now) "
                             f"| | | | | | |")
                continue
            cell = lambda d: (f"{d['p10']:.2f} / **{d['p50']:.2f}** / {d['p90']:.2f} (n {d['n']})"  # noqa: E731
                              if d["n"] else "-")
            lines.append(
                f"| {r['trace']} | {r['long_iterations']} ({r['covered']} counted) | {r['mean_decodes_beside']:.1f} | "
                f"{cell(r['ratio']['decodes only'])} | {cell(r['ratio']['with other prefills'])} | "
                f"{r['window_s']:.2f} s | {r['covered_measured_s']:.2f} / {r['covered_ticks_alone_s']:.2f} s | "
                f"{r['without_long_chunk_s']:.2f} s |")
    write_results(args.out, args.name, res, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
