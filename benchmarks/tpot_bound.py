"""Can any schedule meet a cell's long deadlines while keeping every request's mean TPOT? A bound.

    python benchmarks/tpot_bound.py [--cells 0:0.01:0.25,0:0.01:0.75] [--study DIR]
        -> results/tpot_bound.{json,md}

Data flow: per cell (seed, long fraction, QPS) of the quick policy study (A100 spp2 model unless
--device, 900 s of arrivals, the study's TTFT deadlines) -> `medha_jax.sim.tpot_bound`: over the
windows from a long request's arrival to a long request's deadline, the one that the least device
time the long prompts due in it and the short requests' decodes (each within the TPOT target)
need fills the most, and k, the most short requests that could miss their TTFT deadline with the
window still infeasible (-1: not shown infeasible) -> one row per cell, beside each policy's short and long misses in
the study's results (--study), split by whether the policy kept every request within the TPOT
target. A TPOT-keeping policy that meets every long deadline of the window must miss more than k
short ones there; if k is at least a TPOT-keeping policy's short misses, no TPOT-keeping policy
can match both that policy's short misses and the zero long misses of one that breaks the target.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from medha_jax.sim.experiment import Experiment  # noqa: E402
from medha_jax.sim.metrics import LONG_PROMPT  # noqa: E402
from medha_jax.sim.profiles import load_profile  # noqa: E402
from medha_jax.sim.tpot_bound import Request, tightest_window  # noqa: E402
from medha_jax.sim.workload import WorkloadSpec, generate  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DEVICE = "llama3-8b-a100x16-tp8-spp2"
DURATION = 900.0


def parse_cells(cells: str) -> list[tuple[int, float, float]]:
    """"seed:long_fraction:qps,..." -> [(seed, long fraction, QPS), ...], naming a malformed cell."""
    out = []
    for c in cells.split(","):
        parts = c.split(":")
        try:
            seed, mix, qps = int(parts[0]), float(parts[1]), float(parts[2])
        except (IndexError, ValueError):
            raise ValueError(f"--cells entry {c!r}: expected SEED:LONG_FRACTION:QPS, e.g. 0:0.01:0.75") from None
        if len(parts) != 3:
            raise ValueError(f"--cells entry {c!r}: expected SEED:LONG_FRACTION:QPS, e.g. 0:0.01:0.75")
        out.append((seed, mix, qps))
    return out


def study_rows(study: Path | None, mix: float, qps: float) -> list[dict]:
    """Each policy's short / long misses and share over the TPOT target in the study's cell."""
    if study is None or not (study / "results.json").is_file():
        return []
    runs = json.loads((study / "results.json").read_text())["runs"]
    rows = []
    for run in runs:
        if run["long_fraction"] != mix or run["qps"] != qps:
            continue
        s = run["summary"]
        over = s["all"]["tpot_over_target"]
        rows.append(dict(policy=run["policy"], short_missed=round(s["short"]["deadline_miss_rate"] * s["short"]["requests"]),
                         shorts=s["short"]["requests"], long_missed=round(s["long"]["deadline_miss_rate"] * s["long"]["requests"]),
                         longs=s["long"]["requests"], over_tpot=over))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", default="0:0.01:0.25,0:0.01:0.75", help="comma-separated seed:long_fraction:qps")
    ap.add_argument("--device", default=DEVICE)
    ap.add_argument("--study", type=Path, default=RESULTS / "policy_study_quick_stop64",
                    help="a quick policy study's results directory, for the policies' misses beside the bound")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default="tpot_bound")
    args = ap.parse_args(argv)
    cells = parse_cells(args.cells)
    load_before = os.getloadavg()
    profile = load_profile(args.device)
    if profile.perf is None:
        raise SystemExit(f"--device {args.device}: the bound needs an analytic device model")
    rows = []
    for seed, mix, qps in cells:
        exp = Experiment(profile, seed=seed)
        specs = exp.assign_deadlines(generate(WorkloadSpec(qps=qps, duration=DURATION, long_fraction=mix, seed=seed)))
        specs = sorted(specs, key=lambda s: s.arrival)
        reqs = [Request(s.arrival, s.prompt_tokens, s.output_tokens, s.ttft_deadline) for s in specs]
        is_long = [s.prompt_tokens >= LONG_PROMPT for s in specs]
        w = tightest_window(reqs, is_long, profile.perf, exp.t_target)
        policies = study_rows(args.study, mix, qps)
        row = dict(seed=seed, long_fraction=mix, qps=qps, t_target=exp.t_target, policies=policies)
        if w is not None:
            row.update(window=[w.start, w.end], span_s=w.span, need_s=w.need, decode_ticks=w.ticks,
                       longs=[dict(index=i, arrival=reqs[i].arrival, prompt_tokens=reqs[i].prompt_tokens,
                                   deadline_s=reqs[i].deadline) for i in w.longs],
                       max_short_misses=w.max_short_misses)
        rows.append(row)
        print(f"seed {seed} {mix:.0%} long {qps} QPS: " + (
            f"window {w.start:.1f}-{w.end:.1f} s ({w.span:.1f} s), {len(w.longs)} long, need {w.need:.1f} s, "
            f"infeasible with up to {w.max_short_misses} short misses" if w else "no long request"), flush=True)
    report = dict(run_info("tpot_bound.py", argv, load_before), device=args.device, study=str(args.study), rows=rows)
    lines = ["# Long deadlines against the TPOT target: a bound no schedule beats", "", provenance(report), "",
             f"Device model {args.device}; 900 s of arrivals as in the quick policy study; TPOT target "
             f"{rows[0]['t_target'] * 1e3:.0f} ms. `need` is a lower bound on the device time that meeting every "
             "long deadline in the window takes while every request's mean TPOT stays within the target "
             "(`medha_jax/sim/tpot_bound.py` says why); `k`: the most short requests that may miss their TTFT "
             "deadline with the window still infeasible (-1: the bound does not show it infeasible).", "",
             "| seed | long | QPS | window (s) | long prompts in it (tokens, arrival) | need / window (s) | "
             "decode ticks counted | k | policies: short / long missed, over the TPOT target |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pol = "; ".join(f"{p['policy']} {p['short_missed']}/{p['shorts']} / {p['long_missed']}/{p['longs']}, "
                        f"{p['over_tpot']:.1%}" for p in r["policies"]) or "-"
        if "window" not in r:
            lines.append(f"| {r['seed']} | {r['long_fraction']:.0%} | {r['qps']} | - | - | - | - | - | {pol} |")
            continue
        longs = ", ".join(f"{x['prompt_tokens']:,} at {x['arrival']:.0f}" for x in r["longs"])
        lines.append(f"| {r['seed']} | {r['long_fraction']:.0%} | {r['qps']} | {r['window'][0]:.1f}-{r['window'][1]:.1f} | "
                     f"{longs} | {r['need_s']:.1f} / {r['span_s']:.1f} ({r['need_s'] / r['span_s']:.1%}) | {r['decode_ticks']:,} | "
                     f"{r['max_short_misses']} | {pol} |")
    write_results(args.out, args.name, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
