"""`python -m medha_jax.sim`: run policies over a workload on a device profile, print and save a report.

  flags --> workload (--trace CSV, or generator: --qps --duration --long-fraction --arrival --seed,
                     plus multi-turn long-document conversations: --conversation-rate --doc-min
                     --doc-max --documents --turns --think)
        --> Profile (--device preset | mesh spec | measured .json | linear:s_per_token)
        --> Experiment (runtime predictor fitted to the device, --t-target, deadlines)
        --> for each --policies: simulate (--prefix-caching: the KV manager's prefix cache on)
            --> table (stdout), summary.json, table.md (+ the prefix-reuse table when caching is
            on or the workload has conversations), PNGs in --out
        --> optional --capacity: highest QPS with < 1% deadline misses per policy

Prints the simulator's own speed (simulated seconds per wall second). Pure Python.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from medha_jax.sim.capacity import capacity
from medha_jax.sim.experiment import Experiment
from medha_jax.sim.policies import POLICIES
from medha_jax.sim.profiles import PRESETS, load_profile
from medha_jax.sim.report import markdown_table, plot_ttft_cdfs, plot_ttft_over_time, reuse_table, to_json
from medha_jax.sim.workload import WorkloadSpec, generate, read_trace


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m medha_jax.sim", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    w = p.add_argument_group("workload")
    w.add_argument("--trace", help="CSV trace: arrival_s,prompt_tokens,output_tokens[,ttft_deadline_s]")
    w.add_argument("--qps", type=float, default=1.0, help="generated workload: mean requests per second")
    w.add_argument("--duration", type=float, default=3600.0, help="generated workload: seconds of arrivals")
    w.add_argument("--long-fraction", type=float, default=0.05, help="fraction of long (128K-1M) requests")
    w.add_argument("--long-min", type=int, default=131072, help="shortest long prompt (tokens)")
    w.add_argument("--long-max", type=int, default=1048576, help="longest long prompt (tokens)")
    w.add_argument("--arrival", choices=("poisson", "gamma"), default="poisson", help="arrival process")
    w.add_argument("--cv", type=float, default=1.0, help="gamma arrivals: coefficient of variation of the gaps")
    w.add_argument("--seed", type=int, default=0, help="workload and predictor-fit seed")
    w.add_argument("--conversation-rate", type=float, default=0.0,
                   help="multi-turn conversations over a long document started per second (0: none); each "
                        "turn resends the document and the history, so the prefix cache can reuse them")
    w.add_argument("--doc-min", type=int, default=65536, help="conversations: shortest document (tokens)")
    w.add_argument("--doc-max", type=int, default=524288, help="conversations: longest document (tokens)")
    w.add_argument("--documents", type=int, default=0,
                   help="conversations: distinct documents they draw from (0: each its own; fewer: users share documents)")
    w.add_argument("--turns", type=float, default=4.0, help="conversations: mean turns (geometric, >= 1)")
    w.add_argument("--think", type=float, default=60.0,
                   help="conversations: mean seconds from an answer to the next question (exponential)")
    d = p.add_argument_group("device")
    d.add_argument("--device", default="llama3-8b-a100x16-tp8-spp2",
                   help=f"preset ({', '.join(PRESETS)}), a mesh spec model=..,device=a100|h100,tp=..,spp=..,kvp=..,"
                        f"kvp_tokens=.., a measured profile .json, or linear:<seconds per token>")
    d.add_argument("--kv-tokens", type=int, help="KV tokens per kvp group (default: from the device's memory)")
    d.add_argument("--prefix-caching", action="store_true",
                   help="the KV manager's prefix cache on (the engine's default): a request reuses the KV of "
                        "the longest cached prefix of its prompt; without it every prompt is computed whole")
    s = p.add_argument_group("scheduling")
    s.add_argument("--policies", default=",".join(POLICIES), help=f"comma-separated, from: {', '.join(POLICIES)}")
    s.add_argument("--t-target", type=float, default=0.05, help="iteration time budget (s) of the time-budget policies")
    s.add_argument("--deadline-k", type=float, default=1.5, help="derived TTFT deadline = max(k * prefill alone, min)")
    s.add_argument("--deadline-min", type=float, default=0.5, help="smallest derived TTFT deadline (s)")
    o = p.add_argument_group("run and output")
    o.add_argument("--horizon", type=float, help="stop at this simulated time (default: --duration for generated "
                                                 "workloads, run to completion for traces)")
    o.add_argument("--out", help="directory for summary.json, table.md and plots")
    o.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    o.add_argument("--capacity", action="store_true", help="also search each policy's capacity (< 1%% misses)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ValueError(f"unknown policies {unknown}; valid: {', '.join(POLICIES)}")
    workload = None
    if args.trace:
        specs = read_trace(args.trace)
        horizon = args.horizon
    else:
        workload = WorkloadSpec(qps=args.qps, duration=args.duration, long_fraction=args.long_fraction,
                                long_min=args.long_min, long_max=args.long_max, arrival=args.arrival, cv=args.cv,
                                seed=args.seed, conversation_rate=args.conversation_rate, doc_min=args.doc_min,
                                doc_max=args.doc_max, documents=args.documents, turns=args.turns, think=args.think)
        specs = generate(workload)
        horizon = args.horizon if args.horizon is not None else args.duration
    if not specs:
        raise ValueError("the workload has no requests (raise --qps or --duration)")
    profile = load_profile(args.device, args.kv_tokens)
    exp = Experiment(profile, t_target=args.t_target, deadline_k=args.deadline_k,
                     deadline_min=args.deadline_min, seed=args.seed, prefix_caching=args.prefix_caching)
    print(f"device: {profile.name}; predictor: {exp.predictor_info}")
    print(f"workload: {len(specs)} requests ({sum(s.prompt_tokens >= 32768 for s in specs)} long, "
          f"{sum(s.follows is not None for s in specs)} follow-up turns); "
          f"offered prefill load {exp.offered_load(specs, horizon or max(s.arrival for s in specs) or 1.0)}")
    runs, summaries, speed = {}, {}, {}
    for name in policies:
        t0 = time.perf_counter()
        run = exp.run(name, specs, horizon=horizon)
        wall = time.perf_counter() - t0
        runs[name], summaries[name] = run, run.summary
        r = run.result
        speed[name] = {"wall_s": wall, "simulated_s": r.end_time, "iterations": r.iterations}
        print(f"  {name}: {r.iterations} iterations, {r.end_time:.0f} simulated s in {wall:.1f} s wall "
              f"({r.end_time / max(wall, 1e-9):.0f}x real time)")
    table = markdown_table(summaries)
    if args.prefix_caching or any("follow_up" in s for s in summaries.values()):
        table += "\n\n" + reuse_table(summaries)
    print(table)
    caps = {}
    if args.capacity:
        if workload is None:
            raise ValueError("--capacity needs a generated workload (it varies --qps)")
        for name in policies:
            caps[name] = capacity(exp, name, workload)
            print(f"  capacity {name}: {caps[name]['qps']:.3f} QPS")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        to_json(os.path.join(args.out, "summary.json"), {
            "profile": profile.describe(), "predictor": exp.predictor_info, "policies": summaries,
            "speed": speed, "capacity": caps,
            "workload": vars(args) if workload is None else {**workload.__dict__} if hasattr(workload, "__dict__")
            else {f: getattr(workload, f) for f in workload.__slots__}})
        with open(os.path.join(args.out, "table.md"), "w") as f:
            f.write(table + "\n")
        if not args.no_plots:
            plot_ttft_cdfs(runs, os.path.join(args.out, "ttft_cdf.png"), profile.name)
            plot_ttft_over_time(runs, os.path.join(args.out, "ttft_over_time.png"), profile.name)
        print(f"wrote {args.out}")
    return 0
