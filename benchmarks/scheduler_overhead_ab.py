"""Scheduler overhead, two trees paired call by call: each `schedule()` of one beside the same call of the other.

  controller --git archive REV--> a copy of the earlier tree's medha_jax (or any directory holding one)
             --spawns--> worker A (PYTHONPATH: the earlier tree), worker B (this tree): each runs
                         `scheduler_overhead.SteadyState` (this tree's workload) on its own scheduler
             --in lockstep, --block iterations at a time--> one worker runs its next block, then
                         the other (who goes first alternates); one process runs at a time
  -> per policy: p50 / p99 thread CPU of each tree's calls, and the paired ratio (B / A) of the
     same iteration's two calls: median, p10 / p90, and the share of iterations B was faster;
     beside it the wall time of the rest of the scheduler's step (`on_batch_done` and
     `update_from_output`), its p50 per tree and its paired median ratio

This VM runs the same Python ~1.8x slower for seconds at a time and ~2x slower on some days
(`SpeedProbe`): two runs minutes apart differ by more than most changes. Here an iteration's two
calls run a block apart (~10 ms at 20 iterations), so the paired ratio compares the trees at
the same speed. A worker that sleeps between single iterations wakes slow (its probe read ~2.5x
the single-process run's): blocks keep each warm, as the single-process benchmark is. The workers form the same batches when the trees schedule alike (a change that only
makes the scheduler faster); where they do not, their batches differ and so does their work.

  PYTHONPATH=. python benchmarks/scheduler_overhead_ab.py --before REV [--after DIR] [--policies slo,edf]
      [--iterations 2000] [--warmup 100] [--block 20] [--out benchmarks/results/X.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import socket
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def worker(policy: str, waiting: int, running: int, seed: int, gc_mode: str) -> int:
    """Runs in a worker process: one `SteadyState.step()` per "step" line on stdin (t: timed),
    its thread CPU and probe on stdout."""
    sys.path.insert(0, HERE)
    from scheduler_overhead import SteadyState

    import medha_jax

    state = SteadyState(policy, waiting, running, seed, gc_mode)
    print("ready", medha_jax.__file__, flush=True)
    for line in sys.stdin:
        if line.strip() == "stop":
            break
        mode, n = line.split()
        out = []
        for _ in range(int(n)):
            cpu, _, done, update, speed, size = state.step(timed=mode == "t")
            out.append([cpu, done + update, speed, size])
        print(json.dumps(out), flush=True)
    state.close()
    return 0


def tree_of(rev: str) -> str:
    """A temporary directory holding `rev`'s medha_jax (`git archive`)."""
    out = tempfile.mkdtemp(prefix="medha_ab_")
    blob = subprocess.run(["git", "-C", ROOT, "archive", rev, "medha_jax"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(out, filter="data")
    return out


def spawn(tree: str, policy: str, args) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=tree)
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--policy", policy,
                          "--waiting", str(args.waiting), "--running", str(args.running), "--seed", str(args.seed),
                          "--gc", args.gc], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    hello = p.stdout.readline().split()
    if not hello or hello[0] != "ready":
        raise RuntimeError(f"the worker for {tree} did not start")
    if not os.path.abspath(hello[1]).startswith(os.path.abspath(tree) + os.sep):
        raise RuntimeError(f"the worker for {tree} imported medha_jax from {hello[1]}")
    return p


def ask(p: subprocess.Popen, timed: bool, n: int) -> list:
    """The worker's next `n` iterations: [schedule cpu s, on_batch_done + update_from_output wall s,
    probe us, (seqs, tokens)] each."""
    p.stdin.write(f"{'t' if timed else 'w'} {n}\n")
    p.stdin.flush()
    return json.loads(p.stdout.readline())


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100.0 * (len(xs) - 1))))]


def compare(policy: str, trees: dict[str, str], args) -> dict:
    procs = {name: spawn(tree, policy, args) for name, tree in trees.items()}
    names = list(procs)
    cpu = {n: [] for n in names}
    after_step = {n: [] for n in names}  # on_batch_done + update_from_output, wall ms
    probe = {n: [] for n in names}
    same_batches = True
    try:
        for n in names:
            ask(procs[n], False, args.warmup)
        for b in range(-(-args.iterations // args.block)):
            k = min(args.block, args.iterations - b * args.block)
            order = names if b % 2 == 0 else names[::-1]
            got = {n: ask(procs[n], True, k) for n in order}
            same_batches &= [x[3] for x in got[names[0]]] == [x[3] for x in got[names[1]]]
            for n in names:
                cpu[n].extend(x[0] * 1e3 for x in got[n])
                after_step[n].extend(x[1] * 1e3 for x in got[n])
                probe[n].extend(x[2] for x in got[n])
    finally:
        for p in procs.values():
            try:
                p.stdin.write("stop\n")
                p.stdin.flush()
            except BrokenPipeError:
                pass
            p.wait(timeout=30)
    a, b = names
    ratio = [y / x for x, y in zip(cpu[a], cpu[b]) if x > 0]
    row = {"policy": policy, "iterations": args.iterations, "warmup": args.warmup, "block": args.block,
           "same_batch_sizes": same_batches}
    for n in names:
        row[n] = {"cpu_p50_ms": pct(cpu[n], 50), "cpu_p99_ms": pct(cpu[n], 99), "cpu_max_ms": max(cpu[n]),
                  "probe_p50_us": pct(probe[n], 50),
                  "done_and_update_wall_p50_ms": pct(after_step[n], 50)}
    done_ratio = [y / x for x, y in zip(after_step[a], after_step[b]) if x > 0]
    row["done_and_update_ratio_median"] = pct(done_ratio, 50)
    row["ratio_after_over_before"] = {"p10": pct(ratio, 10), "median": pct(ratio, 50), "p90": pct(ratio, 90),
                                      "after_faster_share": sum(r < 1 for r in ratio) / len(ratio)}
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", help="git revision (or a directory holding medha_jax) of the earlier tree")
    ap.add_argument("--after", default=ROOT, help="directory holding the later tree's medha_jax (default: this checkout)")
    ap.add_argument("--policies", default="slo,edf,fcfs")
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--block", type=int, default=20, help="iterations a worker runs before the other runs the same ones")
    ap.add_argument("--waiting", type=int, default=1000)
    ap.add_argument("--running", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gc", default="engine")
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--policy", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.policy, args.waiting, args.running, args.seed, args.gc)
    if not args.before:
        ap.error("--before is required")
    before = args.before if os.path.isdir(args.before) else tree_of(args.before)
    trees = {"before": before, "after": args.after}
    rows = []
    for policy in args.policies.split(","):
        row = compare(policy, trees, args)
        rows.append(row)
        r = row["ratio_after_over_before"]
        print(f"{policy:>5}: before p50 {row['before']['cpu_p50_ms']:.3f} p99 {row['before']['cpu_p99_ms']:.3f} ms | "
              f"after p50 {row['after']['cpu_p50_ms']:.3f} p99 {row['after']['cpu_p99_ms']:.3f} ms | after/before per "
              f"iteration: median {r['median']:.3f} (p10 {r['p10']:.3f}, p90 {r['p90']:.3f}), after faster in "
              f"{100 * r['after_faster_share']:.0f}% | on_batch_done + update_from_output p50 "
              f"{row['before']['done_and_update_wall_p50_ms']:.3f} -> {row['after']['done_and_update_wall_p50_ms']:.3f} ms "
              f"(paired median {row['done_and_update_ratio_median']:.3f}) | VM probe p50 {row['after']['probe_p50_us']:.0f} us"
              + ("" if row["same_batch_sizes"] else " | the trees formed different batches"), flush=True)
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    sys.path.insert(0, HERE)
    from results_io import cpu_model
    machine = {"host": socket.gethostname(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
               "python": sys.version.split()[0], "platform": platform.platform(), "load_average_at_end": load}
    out = args.out or os.path.join(HERE, "results", "scheduler_overhead_ab.json")
    with open(out, "w") as f:
        json.dump({"benchmark": "scheduler_overhead_ab", "argv": sys.argv[1:], "before": args.before,
                   "after": args.after, "machine": machine, "rows": rows}, f, indent=1)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
