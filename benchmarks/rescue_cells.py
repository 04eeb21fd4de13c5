"""slo's deadline rescue, cell by cell: what each stretch of the budget saved and what it cost.

    python benchmarks/rescue_cells.py [--cells 0:0.01:0.25,0:0.01:0.75,2:0.01:0.75] [--stretch 3]
        -> results/rescue_cells.{json,md}

Data flow: per cell (seed, long fraction, QPS) of the quick policy study (A100 spp2 model unless
--device, 900 s of arrivals, deadlines settled as the study does) -> slo with the rescue off
(`rescue_stretch` 1, the default) and on -> per run: short and long deadline misses, requests whose
mean TPOT is over the target, and the seconds of simulated time during which the budget was
stretched (iterations whose scan chose a stretch > 1, grouped into spells) -> one table row each.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from medha_jax.scheduler.policies import SLOPolicy  # noqa: E402
from medha_jax.sim.experiment import Experiment  # noqa: E402
from medha_jax.sim.profiles import load_profile  # noqa: E402
from medha_jax.sim.workload import WorkloadSpec, generate  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DEVICE = "llama3-8b-a100x16-tp8-spp2"
DURATION = 900.0


def stretched_times(run_policy) -> list[float]:
    """Runs `run_policy()` and returns the simulated times at which slo's scan chose a stretch > 1."""
    times = []
    orig = SLOPolicy.candidates

    def candidates(self, partials, now):
        order = orig(self, partials, now)
        if self.rescue > 1.0:
            times.append(now)
        return order

    SLOPolicy.candidates = candidates
    try:
        return run_policy(), times
    finally:
        SLOPolicy.candidates = orig


def spells(times: list[float], gap: float = 1.0) -> list[tuple[float, float]]:
    out = []
    for t in times:
        if out and t - out[-1][1] <= gap:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


def parse_cells(cells: str) -> list[tuple[int, float, float]]:
    """"seed:long_fraction:qps,..." -> [(seed, long fraction, QPS), ...]."""
    return [(int(seed), float(mix), float(qps)) for seed, mix, qps in (c.split(":") for c in cells.split(","))]


def miss_counts(outcomes, tpot_target: float) -> dict:
    """Short and long deadline misses and requests whose mean TPOT is over `tpot_target`, of one run."""
    shorts, longs = [o for o in outcomes if not o.is_long], [o for o in outcomes if o.is_long]
    return dict(short_missed=sum(bool(o.missed) for o in shorts), shorts=len(shorts),
                long_missed=sum(bool(o.missed) for o in longs), longs=len(longs),
                over_tpot=sum(1 for o in outcomes if o.tpot is not None and o.tpot > tpot_target),
                requests=len(outcomes))


def one(exp: Experiment, specs, stretch: float) -> dict:
    exp.config["rescue_stretch"] = stretch
    run, times = stretched_times(lambda: exp.run("slo", specs, horizon=DURATION, settle=True))
    sp = spells(times)
    return dict(stretch=stretch, **miss_counts(run.outcomes, exp.t_target), stretched_s=sum(b - a for a, b in sp),
                spells=sp)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", default="0:0.01:0.25,0:0.01:0.75,2:0.01:0.75,2:0.01:1.25,2:0.05:1.25",
                    help="comma-separated seed:long_fraction:qps")
    ap.add_argument("--stretch", type=float, default=3.0, help="rescue_stretch of the 'on' runs")
    ap.add_argument("--device", default=DEVICE)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default="rescue_cells")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    rows = []
    exps: dict[int, Experiment] = {}
    for seed, mix, qps in parse_cells(args.cells):
        exp = exps.setdefault(seed, Experiment(load_profile(args.device), seed=seed))
        specs = generate(WorkloadSpec(qps=qps, duration=DURATION, long_fraction=mix, seed=seed))
        for stretch in (1.0, args.stretch):
            t0 = time.perf_counter()
            r = dict(seed=seed, long_fraction=mix, qps=qps, **one(exp, specs, stretch))
            print(f"seed {seed} {mix:.0%} long {qps} QPS, stretch {stretch}: short {r['short_missed']}/{r['shorts']}, "
                  f"long {r['long_missed']}/{r['longs']}, over TPOT {r['over_tpot']}/{r['requests']}, "
                  f"stretched {r['stretched_s']:.0f} s ({time.perf_counter() - t0:.0f} s wall)", flush=True)
            rows.append(r)
    report = dict(run_info("rescue_cells.py", argv, load_before), device=args.device, rows=rows)
    lines = [f"# slo's deadline rescue, cell by cell ({time.strftime('%Y-%m-%d')})", "", provenance(report), "",
             f"Device model {args.device}; 900 s of arrivals, deadlines settled; TPOT target "
             f"{exps[rows[0]['seed']].t_target * 1e3:.0f} ms (a request is over it when its mean time per output "
             "token is).", "",
             "| seed | long | QPS | rescue_stretch | shorts missed | longs missed | requests over the TPOT target "
             "| seconds stretched (spells) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sp = ", ".join(f"{a:.0f}-{b:.0f}" for a, b in r["spells"][:6]) + (" ..." if len(r["spells"]) > 6 else "")
        lines.append(f"| {r['seed']} | {r['long_fraction']:.0%} | {r['qps']} | {r['stretch']:g} | "
                     f"{r['short_missed']}/{r['shorts']} | {r['long_missed']}/{r['longs']} | "
                     f"{r['over_tpot']}/{r['requests']} ({r['over_tpot'] / max(r['requests'], 1):.1%}) | "
                     f"{r['stretched_s']:.0f}{f' ({sp})' if sp else ''} |")
    write_results(args.out, args.name, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
