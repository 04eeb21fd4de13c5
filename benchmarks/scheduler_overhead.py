"""Scheduler overhead: wall time of one `schedule()` with ~1,000 waiting and ~256 running requests.

  steady state per iteration (after --warmup untimed iterations): schedule(now) [timed] -> on_batch_done [timed separately]
      -> update_from_output: sampled requests get a token; decodes beyond `--running` finish (oldest first);
         the waiting queue is topped up to `--waiting` with fresh arrivals
  -> p50 / p99 / max per policy, printed and written to benchmarks/results/scheduler_overhead_<host>.json

Requests: 95% short prompts (64-4096 tokens), 5% long (128K-1M); decodes start at 256-8192
tokens of context. Device model: a linear RuntimePredictor with plausible single-GPU coefficients
(the numbers only shape the batches; nothing runs on a device). Pure Python.

  PYTHONPATH=. python benchmarks/scheduler_overhead.py [--iterations 2000] [--warmup 100] [--policies lars,fcfs] [--gc engine,on] [--repeat 3] [--phases]

Before every timed call (untimed) a `SpeedProbe` pass says how fast the VM runs Python right then:
each row also gives the probe's spread and the p50 / p99 over the calls with a full-speed probe
beside them (`full_speed`), next to the plain p50 / p99 over every call, which stay the measure.

--phases times the three parts of every `schedule()` call too (thread CPU: the decode pass, the
prefill packing, and inside the packing the call building the policy's candidate order) and
reports them for the 40 iterations around the median and for the slowest 1%: whether the p99 is
the same work running slower or work the median iteration does not do. The timers add ~5%.

Setup places the first `--running` requests straight into the running set as decodes (untimed),
telling the policy they left its queue as the scheduler would; before 2026-11-26 it did not, so
the deadline policies kept 256 running decodes in their queue state and ranked them as
prefill candidates every iteration (rows measured before then are of that state).

The first iterations are not steady state: the deadline policies meet the whole 1,000-request queue
at once (slo gives up ~950 hopeless requests in its first scan, 2 ms), and the first ~30 iterations
held half of slo's 20 slowest of 2,000. Since 2026-11-26 `--warmup` iterations (default 100) run
untimed first; `--warmup 0` gives the earlier measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import os
import platform
import random
import socket
import statistics
import sys
import time

from medha_jax.gc_pauses import HostWork, collect_due
from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.request import Request, RequestStatus
from medha_jax.sampling_params import SamplingParams
from medha_jax.scheduler import RuntimePredictor, SchedulerConfig, make_scheduler
from results_io import cpu_model

COEFS = {"const": 4e-3, "tokens": 6e-5, "chunk_kv": 2e-10, "chunk_sq": 1e-10, "decodes": 2e-5, "decode_kv": 1e-8}


class Workload:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.n = 0

    def request(self, now: float, prompt_len: int | None = None, max_tokens: int = 1 << 20) -> Request:
        rng = self.rng
        if prompt_len is None:
            prompt_len = rng.randint(131_072, 1_048_576) if rng.random() < 0.05 else rng.randint(64, 4096)
        self.n += 1
        return Request(f"q{self.n}", [1] * prompt_len, SamplingParams(max_tokens=max_tokens),
                       arrival_time=now + rng.uniform(-1.0, 0.0))


class _Item:
    __slots__ = ("a", "b", "c", "key")

    def __init__(self, i: int):
        self.a, self.b, self.c, self.key = [i] * 8, i, i & 1, f"k{i}"


class SpeedProbe:
    """The VM's speed at Python work of the scheduler's kind: the time of a fixed pass over 256
    slotted objects (4 attribute reads, a `len`, a dict lookup, two list appends each: the decode
    pass's diet), ~27 us when this VM runs at full speed. This VM switches within seconds between
    that and ~1.8x slower spells (the same pass, the same process, either CPU), and one day ran the
    same scheduler code 2-2.5x slower than another: a probe next to every timed call says which
    calls ran in a slow spell."""

    def __init__(self):
        self.items = [_Item(i) for i in range(256)]
        self.table = {it.key: it.b for it in self.items}

    def sample(self) -> float:
        """One pass, thread CPU microseconds."""
        t0 = time.thread_time_ns()
        xs, ys = [], []
        table = self.table
        for it in self.items:
            if len(it.a) + it.b - it.c > table[it.key]:
                xs.append(it)
                ys.append(it.b)
        return (time.thread_time_ns() - t0) / 1e3


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


class PhaseTimer:
    """Thread CPU seconds of named methods of a scheduler, per `schedule()` call (`--phases`):
    wraps the instance's decode pass, its packer's `pack_prefills` and its policy's `candidates`."""

    PHASES = ("decodes", "packing", "candidates")

    def __init__(self, sched):
        self.now: dict[str, float] = {}
        self.per_call: list[dict[str, float]] = []
        owners = zip(self.PHASES, (sched, sched.packer, sched.policy), ("_schedule_decodes", "pack_prefills", "candidates"))
        for label, owner, name in owners:
            setattr(owner, name, self._timed(label, getattr(owner, name)))

    def _timed(self, label, fn):
        def timed(*args, **kw):
            c0 = time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                self.now[label] = self.now.get(label, 0.0) + time.thread_time() - c0
        return timed

    def end_call(self, keep: bool) -> None:
        if keep:
            self.per_call.append(self.now)
        self.now = {}

    def summary(self, cpu_ms: list[float]) -> dict:
        """Mean ms per phase over the 40 calls around the median and over the slowest 1%."""
        order = sorted(range(len(cpu_ms)), key=cpu_ms.__getitem__)
        mid, k = len(order) // 2, max(1, len(order) // 100)
        groups = {"median_40": order[max(0, mid - 20): mid + 20], "slowest_1pct": order[-k:]}
        out = {}
        for name, idx in groups.items():
            row = {label: statistics.fmean(self.per_call[i].get(label, 0.0) * 1e3 for i in idx)
                   for label in self.PHASES}
            row["total"] = statistics.fmean(cpu_ms[i] for i in idx)
            out[name] = row
        return out


class SteadyState:
    """The workload at its steady state, one iteration per `step()`: `n_running` decodes (put in by
    hand, untimed), `n_waiting` waiting, both topped up after every iteration. `run` drives it;
    so does `scheduler_overhead_ab.py`, one process per tree, in lockstep."""

    def __init__(self, policy: str, n_waiting: int, n_running: int, seed: int, gc_mode: str = "on",
                 phases: bool = False):
        cfg = SchedulerConfig(policy=policy, max_num_seqs=2 * n_running)
        kv = KVCacheManager(num_pages_per_group=1 << 20, page_size=16)
        self.sched = sched = make_scheduler(cfg, kv, RuntimePredictor(COEFS))
        self.timer = PhaseTimer(sched) if phases else None
        self.wl = wl = Workload(seed)
        self.n_waiting, self.n_running, self.gc_mode = n_waiting, n_running, gc_mode
        self.now = 0.0
        for _ in range(n_running):
            add_decoding(sched, wl.request(self.now, prompt_len=wl.rng.randint(256, 8192)), 0)
        for _ in range(n_waiting):
            sched.add_request(wl.request(self.now))
        gc.enable()
        gc.collect()
        if gc_mode in ("freeze", "engine"):
            gc.freeze()
        elif gc_mode == "off":
            gc.disable()
        self.host_work = HostWork if gc_mode == "engine" else contextlib.nullcontext
        self.probe = SpeedProbe()

    def step(self, timed: bool = True) -> tuple[float, float, float, float, float, tuple[int, int]]:
        """One iteration: (schedule thread CPU s, schedule wall s, on_batch_done wall s,
        update_from_output wall s, the speed probe's us just before, (batch sequences, batch tokens))."""
        sched = self.sched
        if self.gc_mode == "engine":
            collect_due()  # where the engine runs it: before it blocks on the device (untimed here)
        speed = self.probe.sample()  # untimed: how fast the VM runs Python right now
        c0 = time.thread_time()
        t0 = time.perf_counter()
        with self.host_work():
            batch = sched.schedule(self.now)
        t1 = time.perf_counter()
        cpu = time.thread_time() - c0
        if self.timer is not None:
            self.timer.end_call(timed)
        self.now += batch.predicted_time or 0.01
        now = self.now
        sched.on_batch_done(batch, now, measured_time=batch.predicted_time)
        t2 = time.perf_counter()
        sched.update_from_output(batch, 0, now)
        t3 = time.perf_counter()
        # keep the steady state: n_running decodes (oldest finish first), n_waiting waiting
        decodes = [r for r in sched.running if not r.is_prefill]
        for r in decodes[: max(0, len(decodes) - self.n_running)]:
            sched.finish(r, RequestStatus.FINISHED_LENGTH, now)
        while sched.num_waiting < self.n_waiting:
            sched.add_request(self.wl.request(now))
        return cpu, t1 - t0, t2 - t1, t3 - t2, speed, (batch.num_seqs, batch.num_tokens)

    def close(self) -> None:
        gc.enable()
        gc.unfreeze()


def add_decoding(sched, request: Request, token: int) -> None:
    """`Scheduler.add_decoding`; by hand for a tree from before it (an A/B against an older revision)."""
    if hasattr(sched, "add_decoding"):
        sched.add_decoding(request, token)
        return
    sched.add_request(request)
    del sched.waiting[request]
    sched.policy.on_leave_waiting(request)
    sched.running[request] = None
    sched.kv.allocate(request, request.prompt_len)
    request.num_computed_tokens = request.prompt_len
    request.output_token_ids.append(token)
    request.status = RequestStatus.RUNNING


def run(policy: str, iterations: int, n_waiting: int, n_running: int, seed: int, gc_mode: str = "on",
        warmup: int = 0, phases: bool = False) -> dict:
    state = SteadyState(policy, n_waiting, n_running, seed, gc_mode, phases)
    timer = state.timer
    sched_times, cpu_times, done_times, sizes, speeds = [], [], [], [], []
    for it in range(warmup + iterations):
        cpu, wall, done, _, speed, size = state.step(timed=it >= warmup)
        if it >= warmup:
            cpu_times.append(cpu)
            speeds.append(speed)
            sched_times.append(wall)
            done_times.append(done)
            sizes.append(size)
    state.close()
    ms = [t * 1e3 for t in sched_times]
    cpu_ms = [t * 1e3 for t in cpu_times]
    # the calls with a full-speed probe beside them: within 20% of the run's fastest tenth
    fast = percentile(speeds, 10) * 1.2
    cpu_fast = [c for c, sp in zip(cpu_ms, speeds) if sp <= fast]
    done_ms = [t * 1e3 for t in done_times]
    return {
        "policy": policy,
        "gc": gc_mode,
        "phases_ms": timer.summary(cpu_ms) if timer is not None else None,
        "iterations": iterations,
        "warmup": warmup,
        "waiting": n_waiting,
        "running": n_running,
        "schedule_ms": {"p50": percentile(ms, 50), "p99": percentile(ms, 99), "max": max(ms),
                        "mean": statistics.fmean(ms)},
        "schedule_cpu_ms": {"p50": percentile(cpu_ms, 50), "p99": percentile(cpu_ms, 99), "max": max(cpu_ms)},
        "probe_us": {"p10": percentile(speeds, 10), "p50": percentile(speeds, 50), "p90": percentile(speeds, 90)},
        "full_speed": {"calls": len(cpu_fast), "cpu_p50_ms": percentile(cpu_fast, 50),
                       "cpu_p99_ms": percentile(cpu_fast, 99)},
        "iterations_over_0.5ms_wall": sum(1 for t in ms if t > 0.5),
        "on_batch_done_ms": {"p50": percentile(done_ms, 50), "p99": percentile(done_ms, 99)},
        "mean_batch_seqs": statistics.fmean(s for s, _ in sizes),
        "mean_batch_tokens": statistics.fmean(t for _, t in sizes),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100, help="untimed iterations first (the queue's first scans)")
    ap.add_argument("--waiting", type=int, default=1000)
    ap.add_argument("--running", type=int, default=256)
    ap.add_argument("--policies", default="slo,lars,edf,lrs,fcfs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every (policy, gc) cell this many times, the cells interleaved; the p99 of one run "
                         "moves by ~1.5x between runs on a shared VM, so the summary gives each run's and the median")
    ap.add_argument("--gc", default="engine,on",
                    help="Python's cyclic GC during the timed loop, comma-separated modes, each a row: engine "
                         "(what Engine.step does: gc.freeze() after setup, no automatic collection inside "
                         "schedule(), the generations due collected before the device wait, untimed), on "
                         "(CPython's automatic collection), freeze (gc.freeze() after setup, then automatic), off")
    ap.add_argument("--phases", action="store_true",
                    help="also time the decode pass, the prefill packing and the candidate order of every call")
    ap.add_argument("--out", default=None, help="output JSON (default benchmarks/results/scheduler_overhead_<host>.json)")
    args = ap.parse_args(argv)
    results = []
    cells = list(itertools.product(args.policies.split(","), args.gc.split(",")))
    for _, gc_mode in cells:
        if gc_mode not in ("engine", "on", "freeze", "off"):
            ap.error(f"--gc: unknown mode {gc_mode!r} (engine, on, freeze, off)")
    for rep in range(args.repeat):
        for policy, gc_mode in cells:
            res = run(policy, args.iterations, args.waiting, args.running, args.seed, gc_mode, args.warmup, args.phases)
            res["repetition"] = rep
            s = res["schedule_ms"]
            c = res["schedule_cpu_ms"]
            print(f"{policy:>8} gc={gc_mode:<6}: schedule wall p50 {s['p50']:.3f} ms  p99 {s['p99']:.3f} ms  max {s['max']:.3f} ms | "
                  f"thread CPU p50 {c['p50']:.3f} p99 {c['p99']:.3f} ms  "
                  f"(on_batch_done p50 {res['on_batch_done_ms']['p50']:.3f} ms; "
                  f"{res['mean_batch_seqs']:.0f} seqs / {res['mean_batch_tokens']:.0f} tokens per batch)", flush=True)
            pr, fs = res["probe_us"], res["full_speed"]
            print(f"{'':>8} VM speed probe p10/p50/p90 {pr['p10']:.0f}/{pr['p50']:.0f}/{pr['p90']:.0f} us; the {fs['calls']} "
                  f"calls at full speed: thread CPU p50 {fs['cpu_p50_ms']:.3f} p99 {fs['cpu_p99_ms']:.3f} ms", flush=True)
            for group, row in (res["phases_ms"] or {}).items():
                print(f"{'':>8} {group:<12}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in row.items()), flush=True)
            results.append(res)
    summary = []
    for policy, gc_mode in cells:
        mine = [r["schedule_cpu_ms"] for r in results if r["policy"] == policy and r["gc"] == gc_mode]
        row = {"policy": policy, "gc": gc_mode, "runs": len(mine),
               "cpu_p50_ms": [m["p50"] for m in mine], "cpu_p99_ms": [m["p99"] for m in mine],
               "median_cpu_p99_ms": statistics.median(m["p99"] for m in mine)}
        summary.append(row)
        if args.repeat > 1:
            print(f"{policy:>8} gc={gc_mode:<6}: thread CPU p99 per run {', '.join(f'{x:.3f}' for x in row['cpu_p99_ms'])} ms, "
                  f"median {row['median_cpu_p99_ms']:.3f} ms (goal 0.5)")
    host = socket.gethostname()
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"scheduler_overhead_{host}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    machine = {"load_average_at_end": load, "host": host, "cpu": cpu_model(), "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
               "implementation": platform.python_implementation(), "platform": platform.platform()}
    with open(out, "w") as f:
        json.dump({"benchmark": "scheduler_overhead", "goal_p99_ms": 0.5, "machine": machine, "argv": sys.argv[1:],
                   "summary": summary, "results": results},
                  f, indent=1)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
