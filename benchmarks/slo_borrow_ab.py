"""slo with and without late requests borrowing the admitted schedule's slack, in the simulator.

    python benchmarks/slo_borrow_ab.py [--seed 0] [--device llama3-8b-a100x16-tp8-spp2] [--out FILE]

Data flow: for 1% and 5% long at 0.25-1.75 QPS, one generated 15-minute workload (the policy
study's quick traces) -> slo run twice on it, `SLOPolicy.BORROW_FRACTION` = 0 (set-aside requests
strictly after the admitted ones) and its default (they may take part of the admitted schedule's
least slack) -> short / long deadline misses and P99 TTFT per run -> a markdown table on stdout
(and --out). Pure Python, ~4 minutes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from medha_jax.scheduler.policies import SLOPolicy  # noqa: E402
from medha_jax.sim.experiment import Experiment  # noqa: E402
from medha_jax.sim.profiles import load_profile  # noqa: E402
from medha_jax.sim.workload import WorkloadSpec, generate  # noqa: E402
from results_io import commit  # noqa: E402


def cell(summary: dict) -> str:
    sh, lo = summary["short"], summary["long"]
    return (f"{100 * sh['deadline_miss_rate']:.1f}% / {100 * (lo['deadline_miss_rate'] or 0.0):.1f}% | "
            f"{sh['ttft_p99']:.2f} / {lo['ttft_p99']:.0f} s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="llama3-8b-a100x16-tp8-spp2")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    default = SLOPolicy.BORROW_FRACTION
    exp = Experiment(load_profile(args.device), seed=args.seed)
    lines = [f"slo without / with slack borrowing (BORROW_FRACTION 0 / {default}), seed {args.seed}, {args.device}, "
             f"15-minute traces; `python benchmarks/slo_borrow_ab.py {' '.join(argv if argv is not None else sys.argv[1:])}` "
             f"at {commit()} (simulated time: the machine does not change the numbers)", "",
             "| workload | misses short / long, without | P99 TTFT short / long, without | misses, with | P99 TTFT, with |",
             "|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    try:
        for lf in (0.01, 0.05):
            for qps in (0.25, 0.75, 1.25, 1.75):
                specs = generate(WorkloadSpec(qps=qps, duration=900, long_fraction=lf, seed=args.seed))
                row = []
                for frac in (0.0, default):
                    SLOPolicy.BORROW_FRACTION = frac
                    row.append(cell(exp.run("slo", specs, horizon=900).summary))
                lines.append(f"| {int(lf * 100)}% long, {qps} QPS | {row[0]} | {row[1]} |")
                print(lines[-1], flush=True)
    finally:
        SLOPolicy.BORROW_FRACTION = default
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
