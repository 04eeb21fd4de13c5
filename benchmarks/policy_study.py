"""Policy study: every compared policy at 0.25-1.75 QPS with 0%, 1% and 5% long requests, plus each
policy's capacity, on the modelled Llama-3 8B / 16 x A100 TP8-SPP2 deployment of Medha 6.2 / 6.4,
plus the multi-turn long-document row.

  python benchmarks/policy_study.py            (30-45 min on 2 cores; --quick: ~5 min)
  python benchmarks/policy_study.py --seed 1 --device llama3-8b-h100x8-tp8 --out DIR   (other draws)
  python benchmarks/policy_study.py --quick --qps 0.75,1.25 --out DIR                  (other loads)
  python benchmarks/policy_study.py --conversations-only --workers 1   (the conversation row alone,
                                    -> benchmarks/results/policy_study_conversations/; ~25 min)
  python benchmarks/policy_study.py --capacity-only [--per-class]   (each policy's capacity alone,
                                    1800 s traces, -> benchmarks/results/policy_study_capacity[_per_class]/)

  (mix, qps, policy) grid --2 worker processes, each its own Experiment-->
      medha_jax.sim: generated workload (seed fixed) -> real Scheduler on a simulated clock
  conversation row: ShareGPT4-like shorts + conversations over 64K-512K-token documents
      (CONVERSATIONS), every policy with the prefix cache on, and the default policy with it off
  --> benchmarks/results/policy_study/: report.md (tables, capacity, paper-vs-ours ratios, simulator
      speed), results.json, ttft_cdf_*.png (Medha Fig. 9), ttft_over_time_*.png (Fig. 1b),
      miss_rate_vs_qps_*.png, tpot_vs_qps.png, capacity.png

Deterministic: the same command gives the same numbers (wall-clock times aside).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from medha_jax.sim.capacity import capacity  # noqa: E402
from medha_jax.sim.experiment import Experiment  # noqa: E402
from medha_jax.sim.policies import POLICIES  # noqa: E402
from medha_jax.sim.profiles import load_profile  # noqa: E402
from medha_jax.sim.report import (markdown_table, plot_lines, plot_ttft_cdfs, plot_ttft_over_time,  # noqa: E402
                                  reuse_table, to_json)
from medha_jax.sim.workload import WorkloadSpec, generate  # noqa: E402
from medha_jax.scheduler.config import SchedulerConfig  # noqa: E402

DEFAULT = SchedulerConfig().policy  # the engine's default policy, by the same name in the simulator

DEVICE = "llama3-8b-a100x16-tp8-spp2"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "policy_study")
MIXES = (0.0, 0.01, 0.05)
QPS = (0.25, 0.75, 1.25, 1.75)
CDF_POINTS = {(0.05, 0.25), (0.05, 0.75), (0.05, 1.75), (0.01, 0.75), (0.0, 1.75)}
OVER_TIME = (0.05, 0.75)
SEED = 0
CAP_LO, CAP_HI = 0.05, 2.5  # the capacity search's QPS range
CONVERSATIONS = dict(qps=0.75, long_fraction=0.0, conversation_rate=0.02, documents=40, turns=4.0, think=60.0)
"""The conversation row: 0.75 QPS of shorts, a conversation every 50 s on average over one of 40
documents of 64K-512K tokens (more than the 8.8M-token KV pool holds, so documents get evicted),
4 turns on average, a minute of thinking between an answer and the next question."""

_EXP: Experiment | None = None


def _init(device: str, seed: int) -> None:
    """Worker (and parent) setup: which deployment and which workload draw."""
    global DEVICE, SEED, _EXP
    DEVICE, SEED, _EXP = device, seed, None


def _exp() -> Experiment:
    global _EXP
    if _EXP is None:
        _EXP = Experiment(load_profile(DEVICE), seed=SEED)
    return _EXP


class _Light:
    """What the parent needs from a run for the plots (picklable, small)."""

    def __init__(self, run):
        self.outcomes = run.outcomes


def _one(task):
    mix, qps, policy, duration, keep = task
    exp = _exp()
    t0 = time.perf_counter()
    run = exp.run(policy, generate(WorkloadSpec(qps=qps, duration=duration, long_fraction=mix, seed=SEED)),
                  horizon=duration, settle=True)
    wall = time.perf_counter() - t0
    return (mix, qps, policy, run.summary, wall, run.result.iterations, _Light(run) if keep else None)


def _conversation(task):
    policy, caching, duration = task
    specs = generate(WorkloadSpec(duration=duration, seed=SEED, **CONVERSATIONS))
    t0 = time.perf_counter()
    run = _exp().run(policy, specs, horizon=duration, prefix_caching=caching, settle=True)
    return policy, caching, run.summary, time.perf_counter() - t0


def conversation_rows(pool, policies, duration) -> dict:
    """{row name: summary}: every policy with the prefix cache on, the default policy also off."""
    tasks = [(p, True, duration) for p in policies] + [(DEFAULT, False, duration)]
    out = {}
    for pol, caching, summary, wall in pool.map(_conversation, tasks):
        out[pol if caching else f"{pol} (prefix cache off)"] = summary
        print(f"  conversations {pol} prefix cache {'on' if caching else 'off'}: {wall:.1f} s wall", flush=True)
    return out


def conversation_losses(rows: dict) -> str:
    """Every (baseline, class) where a baseline with the prefix cache on misses fewer deadlines
    than the default policy with it on."""
    mine, lines = rows[DEFAULT], []
    for name, s in rows.items():
        if name == DEFAULT or name.endswith("(prefix cache off)"):
            continue
        for cls, label in (("short", "short"), ("long", "first turn"), ("follow_up", "later turn")):
            a, b = mine.get(cls, {}).get("deadline_miss_rate"), s.get(cls, {}).get("deadline_miss_rate")
            if a is not None and b is not None and b < a - 1e-12:
                lines.append(f"| {name} | {label} | {100 * b:.1f}% | {100 * a:.1f}% |")
    if not lines:
        return f"None: no policy misses fewer short, first-turn or later-turn deadlines than {DEFAULT}."
    return "\n".join([f"| baseline | class | baseline misses | {DEFAULT} misses |", "|---|---|---|---|"] + lines)


def conversation_section(rows: dict, duration: float) -> list[str]:
    specs = generate(WorkloadSpec(duration=duration, seed=SEED, **CONVERSATIONS))
    exp = _exp()
    turns = [s for s in specs if s.segments is not None]
    later = [s for s in turns if s.follows is not None]
    w = CONVERSATIONS
    return [
        "## Multi-turn long-document conversations (prefix reuse)", "",
        f"Workload: {w['qps']} QPS of ShareGPT4-like short requests, plus a conversation every "
        f"{1 / w['conversation_rate']:.0f} s on average (Poisson) over one of {w['documents']} documents of "
        f"64K-512K tokens (uniform); {w['turns']:.0f} turns on average (geometric); each turn resends the document "
        f"and the history and asks a new ShareGPT4-like question; the next turn arrives an exponential "
        f"{w['think']:.0f} s (mean) after the answer's last token. Seed {SEED}, {duration:.0f} s of arrivals: "
        f"{len(specs) - len(turns)} short requests, {len(turns) - len(later)} conversations, {len(later)} later turns "
        f"generated (a later turn whose previous turn has not finished at the horizon never arrives). TTFT "
        f"deadline of a later turn: max(1.5 x the prefill time of its tokens after the previous turn's prompt, "
        f"0.5 s); of the others as above. Offered prefill load without any cache: "
        f"{_fmt(exp.offered_load(specs, duration)['all'])}. KV pool: the device's "
        f"{exp.profile.kv_tokens_per_group / 1e6:.1f}M tokens, shared by running requests and the prefix cache "
        f"(LRU eviction). 'long' below = first turns.", "",
        f"### Where the default policy ({DEFAULT}) loses (prefix cache on for all)", "", conversation_losses(rows), "",
        markdown_table(rows), "", reuse_table(rows)]


def _capacity(task):
    mix, policy, duration, per_class = task
    return mix, policy, capacity(_exp(), policy, WorkloadSpec(duration=duration, long_fraction=mix, seed=SEED),
                                 lo=CAP_LO, hi=CAP_HI, rel_tol=0.1, per_class=per_class)


def capacities(pool, policies, duration: float, per_class: bool = False) -> dict:
    """(mix, policy) -> `capacity` result, for every long mix and policy (the long mixes, the slow
    searches, first)."""
    tasks = sorted(((mix, pol, duration, per_class) for mix in MIXES for pol in policies), key=lambda t: -t[0])
    caps = {}
    for mix, pol, c in pool.map(_capacity, tasks):
        caps[(mix, pol)] = c
        print(f"  capacity long {mix:.0%} {pol}: {c['qps']:.3f} QPS", flush=True)
    return caps


def capacity_json(caps: dict) -> list[dict]:
    return [{"long_fraction": m, "policy": p, **c} for (m, p), c in sorted(caps.items())]


def _fmt(x, d=2):
    return "-" if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))) else f"{x:.{d}f}"


def _ratio(a, b):
    return a / b if a and b and not (math.isnan(a) or math.isnan(b)) else float("nan")


def paper_comparison(res) -> str:
    """The paper's headline ratios next to ours (computed from this run's results)."""
    def g(mix, qps, pol, cls, m):
        return res.get((mix, qps, pol), {}).get(cls, {}).get(m, float("nan"))

    rows = [
        ("Medha Fig. 1a / 6.2: LoongServe / Medha, P50 TTFT (all requests), 5% long, 0.75 QPS", "30x",
         _ratio(g(0.05, 0.75, "loongserve", "all", "ttft_p50"), g(0.05, 0.75, "medha", "all", "ttft_p50"))),
        ("Medha Fig. 1a: LoongServe / Medha, P90 TTFT (all), 5% long, 0.75 QPS", "174x",
         _ratio(g(0.05, 0.75, "loongserve", "all", "ttft_p90"), g(0.05, 0.75, "medha", "all", "ttft_p90"))),
        ("Medha 6.4: LoongServe / Medha, P50 TTFT (all), 1% long, 0.75 QPS", "8x",
         _ratio(g(0.01, 0.75, "loongserve", "all", "ttft_p50"), g(0.01, 0.75, "medha", "all", "ttft_p50"))),
        ("Medha 6.4: LoongServe / Medha, P90 TTFT (all), 1% long, 0.75 QPS", "8x",
         _ratio(g(0.01, 0.75, "loongserve", "all", "ttft_p90"), g(0.01, 0.75, "medha", "all", "ttft_p90"))),
        ("Medha 6.4 / Fig. 13: LARS (one prefill per batch) / Medha, P50 TTFT (all), 5% long, 1.75 QPS", "up to 1.8x",
         _ratio(g(0.05, 1.75, "lars", "all", "ttft_p50"), g(0.05, 1.75, "medha", "all", "ttft_p50"))),
        ("Medha 6.4 / Fig. 13: LARS (one prefill per batch) / Medha, P50 TTFT (all), 5% long, 0.25 QPS", "up to 1.8x",
         _ratio(g(0.05, 0.25, "lars", "all", "ttft_p50"), g(0.05, 0.25, "medha", "all", "ttft_p50"))),
        ("Medha Fig. 13: EDF / FCFS (Sarathi-512), P50 TTFT (all), 5% long, 1.75 QPS ('EDF resembles FCFS')", "~1x",
         _ratio(g(0.05, 1.75, "edf", "all", "ttft_p50"), g(0.05, 1.75, "sarathi-512", "all", "ttft_p50"))),
        ("Medha 6.4 / Fig. 1a: Medha P90 TTFT (all), 5% long, 0.75 QPS", "< 10 s",
         g(0.05, 0.75, "medha", "all", "ttft_p90")),
        ("Medha Fig. 10: Sarathi-2048 P99 TPOT, 5% long, 1.75 QPS", "up to ~1 s",
         g(0.05, 1.75, "sarathi-2048", "all", "tpot_p99")),
    ]
    lines = ["| claim | paper | ours |", "|---|---|---|"]
    for claim, paper, ours in rows:
        lines.append(f"| {claim} | {paper} | {_fmt(ours)} |")
    return "\n".join(lines)


def capacity_section(caps, policies, cap_duration, per_class: bool = False) -> list[str]:
    """The capacity table: per policy and long mix, the highest QPS under 1% misses (per_class: in
    every class on its own)."""
    def cell(c):
        txt = (">= " if c.get("bounded_above") else "") + _fmt(c["qps"])
        at = c.get("at_capacity") or {}
        lm = at.get("long")
        return txt + (f" [{100 * lm:.0f}%]" if lm is not None and lm == lm else "")

    what = ("in every class on its own (short and long requests each under 1%)" if per_class
            else "over all requests")
    lines = [f"## Capacity: highest QPS with < 1% TTFT deadline misses {what} "
             f"({cap_duration:.0f} s traces, bisection to 10%, searched in [{CAP_LO}, {CAP_HI}])", "",
             "In brackets: the miss rate of long requests at that QPS (a policy can pass the 1% bar by "
             "starving a class that is 1% of the traffic)." + ("" if per_class else
             " `--capacity-only --per-class` asks every class to stay under 1% instead."), "",
             "| policy | " + " | ".join(f"{m:.0%} long" for m in MIXES) + " |", "|---|" + "---|" * len(MIXES)]
    for p in policies:
        lines.append(f"| {p} | " + " | ".join(cell(caps[(m, p)]) for m in MIXES) + " |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="15-minute traces, two QPS points, no capacity search")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--seed", type=int, default=SEED, help="workload and predictor-fit seed")
    ap.add_argument("--device", default=DEVICE, help="deployment preset (see python -m medha_jax.sim --help)")
    ap.add_argument("--conversations-only", action="store_true",
                    help="run only the multi-turn long-document row (default --out: results/policy_study_conversations)")
    ap.add_argument("--capacity-only", action="store_true",
                    help="run only the capacity search (default --out: results/policy_study_capacity)")
    ap.add_argument("--per-class", action="store_true",
                    help="with --capacity-only: every class under 1%% misses, not only all requests together "
                         "(default --out: results/policy_study_capacity_per_class)")
    ap.add_argument("--no-conversations", action="store_true",
                    help="leave out the multi-turn conversation row (on a deployment with a small KV pool "
                         "the simulator's prefix matching makes it slow)")
    ap.add_argument("--tpot-losses", metavar="DIR", default=None,
                    help="print the TPOT table of a finished study (its DIR/results.json) and exit")
    ap.add_argument("--qps", default=None,
                    help="comma-separated QPS points (default: 0.25,0.75,1.25,1.75; with --quick 0.25,1.75)")
    args = ap.parse_args(argv)
    if args.tpot_losses:
        print(tpot_losses_from(args.tpot_losses))
        return 0
    _init(args.device, args.seed)
    duration = 900.0 if args.quick else 3600.0
    qps_list = (0.25, 1.75) if args.quick else QPS
    if args.qps:
        try:
            qps_list = tuple(float(q) for q in args.qps.split(","))
        except ValueError:
            qps_list = ()
        if not qps_list or any(not q > 0 for q in qps_list):
            raise SystemExit(f"--qps needs comma-separated positive request rates, got {args.qps!r}")
    cap_duration = 1800.0
    policies = list(POLICIES)
    if args.conversations_only:
        out = OUT + "_conversations" if args.out == OUT else args.out
        os.makedirs(out, exist_ok=True)
        t0 = time.perf_counter()
        with ProcessPoolExecutor(args.workers, initializer=_init, initargs=(args.device, args.seed)) as pool:
            rows = conversation_rows(pool, policies, duration)
        total = time.perf_counter() - t0
        exp = _exp()
        lines = ["# Policy study, conversation row (generated by `python benchmarks/policy_study.py "
                 "--conversations-only`; do not edit by hand)", "", f"Code: {_code_version()}.", "",
                 f"Device: modelled {exp.profile.name}. Scheduler predictor: {exp.predictor_info}. Time budget "
                 f"t_target = 50 ms. Whole run: {total:.0f} s wall with {args.workers} worker process(es).", ""]
        with open(os.path.join(out, "report.md"), "w") as f:
            f.write("\n".join(lines + conversation_section(rows, duration)) + "\n")
        to_json(os.path.join(out, "results.json"), {
            "device": exp.profile.describe(), "predictor": exp.predictor_info, "duration_s": duration,
            "workload": {**CONVERSATIONS, "seed": SEED}, "rows": rows})
        print(f"wrote {out} in {total:.0f} s")
        return 0
    if args.capacity_only:
        out = (OUT + ("_capacity_per_class" if args.per_class else "_capacity")) if args.out == OUT else args.out
        os.makedirs(out, exist_ok=True)
        t0 = time.perf_counter()
        with ProcessPoolExecutor(args.workers, initializer=_init, initargs=(args.device, args.seed)) as pool:
            caps = capacities(pool, policies, cap_duration, args.per_class)
        total = time.perf_counter() - t0
        exp = _exp()
        flag = "--capacity-only" + (" --per-class" if args.per_class else "")
        lines = [f"# Policy study, capacity (generated by `python benchmarks/policy_study.py {flag}`; "
                 "do not edit by hand)", "", f"Code: {_code_version()}.", "",
                 f"Device: modelled {exp.profile.name}, seed {args.seed}. Scheduler predictor: {exp.predictor_info}. "
                 f"Time budget t_target = 50 ms. Whole run: {total:.0f} s wall with {args.workers} worker "
                 f"process(es).", ""] + capacity_section(caps, policies, cap_duration, args.per_class)
        with open(os.path.join(out, "report.md"), "w") as f:
            f.write("\n".join(lines) + "\n")
        to_json(os.path.join(out, "results.json"), {
            "device": exp.profile.describe(), "predictor": exp.predictor_info, "seed": args.seed,
            "per_class": args.per_class, "capacity": capacity_json(caps)})
        print(f"wrote {out} in {total:.0f} s")
        return 0
    os.makedirs(args.out, exist_ok=True)
    tasks = [(mix, qps, pol, duration, (mix, qps) in CDF_POINTS or (mix, qps) == OVER_TIME)
             for mix in MIXES for qps in qps_list for pol in policies]
    tasks.sort(key=lambda t: -t[1])  # the slow, high-load runs first
    t0 = time.perf_counter()
    res, walls, iters, light = {}, {}, {}, {}
    with ProcessPoolExecutor(args.workers, initializer=_init, initargs=(args.device, args.seed)) as pool:
        for mix, qps, pol, summary, wall, n_iter, lt in pool.map(_one, tasks):
            res[(mix, qps, pol)], walls[(mix, qps, pol)], iters[(mix, qps, pol)] = summary, wall, n_iter
            if lt is not None:
                light[(mix, qps, pol)] = lt
            print(f"  long {mix:.0%} qps {qps} {pol}: {wall:.1f} s wall", flush=True)
        conversations = {} if args.no_conversations else conversation_rows(pool, policies, duration)
        caps = {} if args.quick else capacities(pool, policies, cap_duration)
    total = time.perf_counter() - t0

    exp = _exp()
    loads = {(mix, qps): exp.offered_load(generate(WorkloadSpec(qps=qps, duration=duration, long_fraction=mix,
                                                                seed=SEED)), duration)
             for mix in MIXES for qps in qps_list}
    _plots(args.out, res, light, caps, qps_list, policies)
    _report(args.out, res, walls, iters, caps, loads, qps_list, policies, duration, cap_duration, total, args,
            conversations)
    to_json(os.path.join(args.out, "results.json"), {
        "device": exp.profile.describe(), "predictor": exp.predictor_info, "duration_s": duration,
        "runs": [{"long_fraction": m, "qps": q, "policy": p, "summary": s, "wall_s": walls[(m, q, p)],
                  "iterations": iters[(m, q, p)]} for (m, q, p), s in sorted(res.items())],
        "capacity": capacity_json(caps),
        "offered_prefill_load": [{"long_fraction": m, "qps": q, **v} for (m, q), v in sorted(loads.items())],
        "conversations": {"workload": {**CONVERSATIONS, "seed": SEED}, "rows": conversations},
    })
    print(f"wrote {args.out} in {total:.0f} s")
    return 0


def _plots(out, res, light, caps, qps_list, policies):
    for (mix, qps) in sorted(CDF_POINTS):
        runs = {p: light[(mix, qps, p)] for p in policies if (mix, qps, p) in light}
        if runs:
            plot_ttft_cdfs(runs, os.path.join(out, f"ttft_cdf_long{mix:.0%}_qps{qps}.png".replace("%", "pct")),
                           f"TTFT CDF, {mix:.0%} long, {qps} QPS (Llama-3 8B, 16 x A100, TP8-SPP2, modelled)")
    mix, qps = OVER_TIME
    runs = {p: light[(mix, qps, p)] for p in ("loongserve", "sarathi-512", "edf", "medha", "pecsched")
            if (mix, qps, p) in light}
    if runs:
        plot_ttft_over_time(runs, os.path.join(out, f"ttft_over_time_long{mix:.0%}_qps{qps}.png".replace("%", "pct")),
                            f"TTFT over time, {mix:.0%} long, {qps} QPS")
    for mix in MIXES:
        tag = f"{mix:.0%}".replace("%", "pct")
        series = {p: [res[(mix, q, p)]["all"]["deadline_miss_rate"] * 100 for q in qps_list] for p in policies}
        plot_lines(list(qps_list), series, os.path.join(out, f"miss_rate_vs_qps_long{tag}.png"), "QPS",
                   "TTFT deadline misses (%)", f"deadline misses, {mix:.0%} long")
        series = {p: [max(res[(mix, q, p)]["short"]["ttft_p50"], 1e-3) for q in qps_list] for p in policies}
        plot_lines(list(qps_list), series, os.path.join(out, f"short_ttft_p50_vs_qps_long{tag}.png"), "QPS",
                   "short-request P50 TTFT (s)", f"short requests, {mix:.0%} long", logy=True)
    series = {p: [res[(0.05, q, p)]["all"]["tpot_p50"] * 1e3 for q in qps_list] for p in policies}
    plot_lines(list(qps_list), series, os.path.join(out, "tpot_vs_qps.png"), "QPS", "P50 TPOT (ms)",
               "TPOT, 5% long", logy=True)
    if caps:
        series = {p: [caps[(m, p)]["qps"] for m in MIXES] for p in policies}
        plot_lines([m * 100 for m in MIXES], series, os.path.join(out, "capacity.png"), "long requests (%)",
                   "capacity: highest QPS with < 1% misses", "capacity")


def _code_version() -> str:
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "medha_jax/scheduler", "medha_jax/sim",
                                "medha_jax/hardware", "medha_jax/kv_cache_manager.py", "medha_jax/request.py"],
                               cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" with uncommitted changes to the simulated code" if dirty else "")


def losses(res, qps_list, policies) -> str:
    """Every (workload, baseline, class) where a baseline misses fewer TTFT deadlines than the
    default policy, with both rates; or a line saying there is none."""
    rows = []
    for mix in MIXES:
        for q in qps_list:
            mine = res.get((mix, q, DEFAULT))
            if mine is None:
                continue
            for p in policies:
                if p == DEFAULT:
                    continue
                for cls in ("short", "long"):
                    a, b = mine[cls].get("deadline_miss_rate"), res[(mix, q, p)][cls].get("deadline_miss_rate")
                    if a is not None and b is not None and b < a - 1e-12:
                        rows.append(f"| {mix:.0%} long, {q} QPS | {p} | {cls} | {100 * b:.1f}% | {100 * a:.1f}% |")
    if not rows:
        return (f"None: at every load and mix above, no policy misses fewer short or fewer long deadlines "
                f"than {DEFAULT}.")
    return "\n".join([f"| workload | baseline | class | baseline misses | {DEFAULT} misses |", "|---|---|---|---|---|"]
                     + rows)


def tpot_losses(cells: dict) -> str:
    """Every workload where some policy keeps more requests within the TPOT target than the
    default policy (with its deadline rescue on, slo trades that for first tokens): those policies, their
    share over the target, and the default's share and TPOT P99. `cells`: workload label ->
    {policy: summary}."""
    rows = []
    for label, pols in cells.items():
        mine = pols[DEFAULT]["all"]
        a = mine.get("tpot_over_target")
        if a is None or a != a:
            continue
        better = sorted((v["all"]["tpot_over_target"], p) for p, v in pols.items()
                        if p != DEFAULT and v["all"].get("tpot_over_target", a) < a - 1e-12)
        if better:
            names = ", ".join(f"{p} {100 * b:.1f}%" for b, p in better)
            rows.append(f"| {label} | {names} | {100 * a:.1f}%, P99 {1e3 * mine['tpot_p99']:.0f} ms |")
    if not rows:
        return f"None: no policy keeps more requests within the TPOT target than {DEFAULT}."
    return "\n".join([f"| workload | policies with fewer requests over the TPOT target (share over) "
                      f"| {DEFAULT}: share over, TPOT P99 |", "|---|---|---|"] + rows)


def tpot_cells(res: dict, qps_list, policies, conversations: dict | None = None) -> dict:
    cells = {f"{mix:.0%} long, {q} QPS": {p: res[(mix, q, p)] for p in policies if (mix, q, p) in res}
             for mix in MIXES for q in qps_list if (mix, q, DEFAULT) in res}
    if conversations:
        cells["conversations (prefix cache on)"] = {p: s for p, s in conversations.items()
                                                    if not p.endswith("(prefix cache off)")}
    return cells


def tpot_losses_from(directory: str) -> str:
    """The TPOT table of a finished study, from its results.json."""
    with open(os.path.join(directory, "results.json")) as f:
        data = json.load(f)
    res = {(r["long_fraction"], r["qps"], r["policy"]): r["summary"] for r in data["runs"]}
    qps_list = sorted({r["qps"] for r in data["runs"]})
    policies = list(dict.fromkeys(r["policy"] for r in data["runs"]))
    conv = (data.get("conversations") or {}).get("rows")
    return tpot_losses(tpot_cells(res, qps_list, policies, conv))


def _report(out, res, walls, iters, caps, loads, qps_list, policies, duration, cap_duration, total, args,
            conversations):
    exp = _exp()
    lines = [
        "# Policy study (generated by `python benchmarks/policy_study.py`; do not edit by hand)",
        "",
        f"Code: {_code_version()}.",
        "",
        f"Device: modelled {exp.profile.name} (analytic roofline model, medha_jax/hardware; docs/simulator.md). "
        f"Scheduler predictor: {exp.predictor_info}. Workload: ShareGPT4-like shorts + long requests uniform in "
        f"128K-1M tokens, Poisson arrivals, seed {SEED}, {duration:.0f} s of arrivals; no batch starts after "
        f"{duration:.0f} s except to settle deadlines: admitting nothing new, the run goes on until every request "
        f"that arrived has its first token or has passed its deadline, so every policy is judged on the same "
        f"requests (completions and throughput count what finished by {duration:.0f} s). TTFT deadline "
        f"D = max(1.5 x prefill alone, 0.5 s), the same for every policy. Time budget t_target = 50 ms.",
        "",
        "Columns: TTFT over requests that got a first token; 'first token' = how many did; deadline misses over "
        "every request that arrived (settled past the horizon); TPOT over all requests with >= 2 tokens.",
        "",
        "## Offered prefill load (prefill work alone per second of device time; > 1 cannot be served)",
        "",
        "| long % | " + " | ".join(f"{q} QPS" for q in qps_list) + " |",
        "|---|" + "---|" * len(qps_list),
    ]
    for mix in MIXES:
        lines.append(f"| {mix:.0%} | " + " | ".join(_fmt(loads[(mix, q)]["all"]) for q in qps_list) + " |")
    lines += ["", f"## Where the default policy ({DEFAULT}) loses", "", losses(res, qps_list, policies), "",
              "On TPOT (share of requests whose time per output token exceeds the 50 ms target; with "
              "`rescue_stretch` > 1 slo trades it for first tokens, docs/simulator.md):", "",
              tpot_losses(tpot_cells(res, qps_list, policies, conversations))]
    for mix in MIXES:
        for q in qps_list:
            lines += ["", f"## {mix:.0%} long, {q} QPS", "",
                      markdown_table({p: res[(mix, q, p)] for p in policies})]
    if caps:
        lines += [""] + capacity_section(caps, policies, cap_duration)
    if conversations:
        lines += [""] + conversation_section(conversations, duration)
    lines += ["", "## The paper's ratios next to ours", "", paper_comparison(res), "",
              "Why they differ: docs/simulator.md, section 'Policy study: where we differ from the paper'.", "",
              "## Simulator speed", "",
              f"Whole study: {total:.0f} s wall with {args.workers} worker processes on this machine. One hour of "
              f"trace at 1.75 QPS, 5% long:"]
    for p in policies:
        k = (0.05, 1.75, p)
        if k in walls:
            lines.append(f"- {p}: {walls[k]:.1f} s wall, {iters[k]} iterations")
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
