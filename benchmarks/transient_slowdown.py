"""Short-request deadline misses when the device runs slow for bursts of iterations (simulator).

    python benchmarks/transient_slowdown.py [--device D] [--qps 1.75,2.5] [--every 500 --burst 60 --factor 4] [--phases 0,100]
    python benchmarks/transient_slowdown.py --seconds [--every 10 --burst 3 --phases 0,0.5,1]   (time-based spells)

Why: on the 2-core VM the engine sometimes runs a few iterations 2-3x slower than predicted (the
machine, not the work); in the convoy runs slo's misses came in such rounds. This asks whether
slo copes worse than EDF with them: its feasibility scan may set shorts aside during a slow spell
(`policies.Slo`), where EDF keeps serving deadline order.

Data flow: WorkloadSpec (shorts only, Poisson, seed fixed) -> Experiment(profile) -> for each
policy, the plain device and the same device with every `--every`-th run of `--burst` iterations
taking `--factor` times as long (`Slowed`: by iteration count, so both policies meet the same
spells per iteration; with `--seconds`, `SlowedFor`: the iterations that start within `--burst`
of every `--every` seconds of device time, so a policy that runs more, shorter iterations does
not meet more spells), one run per spell offset `--phases` -> short misses (summed over the
offsets and per offset), how late the missed ones were
-> printed and written to results/transient_slowdown.md with the command. Deterministic.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from medha_jax.sim.experiment import Experiment  # noqa: E402
from medha_jax.sim.profiles import load_profile  # noqa: E402
from medha_jax.sim.workload import WorkloadSpec, generate  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


class Slowed:
    """A simulated device whose iterations i (from 0) with (i + phase) % every < burst take `factor`
    times as long."""

    def __init__(self, device, every: int, burst: int, factor: float, phase: int = 0):
        self.device, self.every, self.burst, self.factor, self.n = device, every, burst, factor, phase
        self.depth = device.depth

    def run(self, seqs, groups=None):
        i, self.n = self.n, self.n + 1  # this iteration's index, from 0
        t = self.device.run(seqs) if groups is None else self.device.run(seqs, groups)
        return (t[0] * self.factor, *t[1:]) if i % self.every < self.burst else t

    def __getattr__(self, name):
        return getattr(self.device, name)


class SlowedFor(Slowed):
    """A simulated device whose iterations starting at device time c (the sum of the iterations so
    far, slowdowns included) with (c + phase) % every < burst take `factor` times as long."""

    def __init__(self, device, every: float, burst: float, factor: float, phase: float = 0.0):
        super().__init__(device, 1, 0, factor)
        self.every_s, self.burst_s, self.clock = every, burst, phase

    def run(self, seqs, groups=None):
        t = self.device.run(seqs) if groups is None else self.device.run(seqs, groups)
        if self.clock % self.every_s < self.burst_s:
            t = (t[0] * self.factor, *t[1:])
        self.clock += t[0]
        return t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="llama3-8b-a100x16-tp8-spp2")
    ap.add_argument("--qps", default="1.75,2.5")
    ap.add_argument("--policies", default="slo,edf")
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--seconds", action="store_true",
                    help="spells in seconds of device time (--every, --burst, --phases in seconds)")
    ap.add_argument("--every", type=float, default=None, help="iterations (500), or seconds with --seconds (10)")
    ap.add_argument("--burst", type=float, default=None, help="iterations (60), or seconds with --seconds (3)")
    ap.add_argument("--factor", type=float, default=4.0)
    ap.add_argument("--phases", default="0,100,200,300,400",
                    help="offsets of the spells (iterations), a run each: where a spell falls decides who misses "
                         "in one run, so the table sums over several")
    ap.add_argument("--out", default=str(RESULTS / "transient_slowdown.md"))
    args = ap.parse_args(argv)
    if args.every is None:
        args.every = 10.0 if args.seconds else 500
    if args.burst is None:
        args.burst = 3.0 if args.seconds else 60
    unit = "s of device time" if args.seconds else "iterations"
    make_slowed = ((lambda dev, p: SlowedFor(dev, args.every, args.burst, args.factor, float(p))) if args.seconds else
              (lambda dev, p: Slowed(dev, int(args.every), int(args.burst), args.factor, int(p))))
    profile = load_profile(args.device)
    plain = profile.device_for
    lines = ["# Short deadline misses under transient device slowdowns (simulator)", "",
             f"`python benchmarks/transient_slowdown.py {' '.join(argv if argv is not None else sys.argv[1:])}`; "
             f"device {args.device}; shorts only, {args.duration:g} s, seed 0; slowdowns: every {args.every:g} "
             f"{unit}, {args.burst:g} {unit} at {args.factor:g}x, one run per spell offset ({args.phases}).", "",
             "| QPS | policy | misses, plain device | misses with slowdowns, all offsets | per offset | "
             "missed ones late by (median / max) |", "|---|---|---|---|---|---|"]
    for qps in (float(q) for q in args.qps.split(",")):
        specs = generate(WorkloadSpec(qps=qps, duration=args.duration, long_fraction=0.0, seed=0))
        for pol in args.policies.split(","):
            cells = []
            for phase in [None, *args.phases.split(",")]:
                profile.device_for = plain if phase is None else lambda kind, p=phase: make_slowed(plain(kind), p)
                run = Experiment(profile, seed=0).run(pol, specs)
                shorts = [o for o in run.outcomes if not o.is_long and o.missed is not None]
                cells.append((sorted(o.ttft - o.deadline for o in shorts if o.missed), len(shorts)))
            profile.device_for = plain
            (late0, n0), slowed = cells[0], cells[1:]
            late = sorted(x for lt, _ in slowed for x in lt)
            lateness = f"{late[len(late) // 2]:.2f} / {late[-1]:.2f} s" if late else "-"
            lines.append(f"| {qps:g} | {pol} | {len(late0)} / {n0} | **{len(late)}** / {sum(n for _, n in slowed)} | "
                         f"{', '.join(str(len(lt)) for lt, _ in slowed)} | {lateness} |")
            print(lines[-1], flush=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
