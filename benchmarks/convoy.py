"""The convoy effect, measured end to end on the real engine (Medha Fig. 1): one command.

    JAX_PLATFORMS=cpu python benchmarks/convoy.py     (6-10 min on the shared 2-core dev VM; +2 min the
                                                      first time, to fill the persistent XLA cache)
    python benchmarks/convoy.py --smoke --out /tmp/x   (tiny settings, under a minute: the code path only)

  1. calibrate: start `python -m medha_jax.serve` (demo model, fcfs_nonchunked) and time whole-prompt
     prefills (server-side TTFT of max_tokens=1 probes) and a decode -> t(n) = a + b*n + c*n^2
  2. the runtime profile edf/lars use: `python -m medha_jax.profile` (the full grid, ~30 s; measured
     once, reused by every configuration; the quick third-of-the-grid profile predicted these
     shapes 12% off, the full one 8.5%)
  3. choose, from that speed and that profile (all printed, all overridable):
       L         the long prompt: the largest 2^m - 64 whose whole-prompt prefill is predicted to take
                 at most --long-prefill-target seconds (the convoy's length under non-chunked FCFS)
       t_target  the iteration budget of edf/lars: 1.2 x the runtime profile's time of one whole
                 wide attention tile (mid_tile_q query tokens, the narrowest wide tile: 128) at the
                 long prompt's end, so its chunks can stay whole wide tiles to the last one (the 0.2
                 margin: the profile's ~8% held-out error and the decodes beside the tile). A budget
                 below that makes every budget-keeping policy run the long prompt in small tiles,
                 which cost 1.37x more per token on a CPU; the rule before (1.5 x the calibration fit's time of a 32-token chunk, a fit with no
                 tiles in it) swung 0.05-0.18 s between runs of the same engine with the VM's minute,
                 and the long request's slowdown with it (results/convoy_load0.2_*.md). With the GPU
                 default, 50 ms, a min-size chunk of the long prompt overruns the budget once its KV
                 is long: measured: results/convoy_t_target_0.05.md, long prompt 2.6x later.
       deadline_min  max(0.5 s, 4 x t_target): the engine's 0.5 s floor unless an SLO that tight is
                 under ~4 iterations (the least a chunked scheduler needs to reach a first token)
       QPS       Poisson short requests: --short-load / mean whole-prompt prefill time of a short
                 prompt. The default 0.1 keeps the engine about a third busy with short traffic alone
                 (decode iterations included; the JSON records the measured busy fraction), so the
                 long prompt's prefill saturates it
     TTFT deadlines = the engine's derived ones, max(1.5 * T_prefill(P), deadline_min) from the
     profile's prefill-time cache, sent as SLO hints to every configuration
  4. one seeded workload (short requests from t=0, the long one(s) arriving while they flow), run
     through gRPC against a fresh server per configuration: fcfs_nonchunked (convoy baseline), lars,
     fcfs (Sarathi, fixed token budget), edf; the server's /metrics is polled for its busy time
  5. results -> <out>/convoy.json (machine info, load averages, choices, per-request records,
     engine busy fractions, summaries), convoy.md (table), convoy_ttft_over_time.png (Medha Fig. 1b),
     convoy_ttft_cdf.png (Fig. 1a); the table is printed

Other engineers share the 2 cores: the load average and a CPU probe are recorded before and after
each configuration. The baseline's long prefill is one iteration of 15-30 s, so VM load swings its
duration (seen: 16-29 s for the same prompt); for that reason the default policy runs right beside
fcfs_nonchunked, and with --rounds every configuration, the baseline included, runs once per round:
the long request's slowdown is the median of the rounds' own ratios (a baseline timed once, at the
start, was compared with rounds run 20-30% slower).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import glob
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (str(ROOT), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

from convoy_client import MetricsPoller, RequestSpec, ServerProcess, cpu_probe, generate_once, run_workload  # noqa: E402
from convoy_report import (gap_reading, markdown_table, paired_percentile_diff, plot_ttft_cdf,  # noqa: E402
                           plot_ttft_over_time, short_ttfts, summarize, text_table)

from medha_jax.scheduler.config import TIME_BUDGET_POLICIES, SchedulerConfig  # noqa: E402
from medha_jax.scheduler.iteration_trace import trace_stats  # noqa: E402
from medha_jax.scheduler.predictor import PROFILE_VERSION, RuntimePredictor  # noqa: E402

DEFAULT_POLICY = SchedulerConfig().policy
TABLE_ORDER = ("fcfs_nonchunked", "fcfs", "srpt", "edf", "lrs", "lars", "slo")
DEFAULT_CONFIGS = ("fcfs_nonchunked", DEFAULT_POLICY, "edf", "fcfs")  # run order: the compared runs back to back


def log(msg: str) -> None:
    print(f"[convoy {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- settings --------------------------------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--out", default=str(HERE / "results"), help="where convoy.json / .md / *.png go")
    ap.add_argument("--name", default="convoy", help="file name prefix of the results")
    ap.add_argument("--workdir", default=None, help="server logs, profile, caches (default: a new temp dir)")
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                    help="policies in run order (fcfs_nonchunked first: it calibrates)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every configuration this many times, interleaved (order reversed every other round; "
                         "the baseline too, so each round has its own and the long request's slowdown is a "
                         "per-round ratio); the table pools their requests, one line per round follows")
    ap.add_argument("--smoke", action="store_true", help="tiny model limits and workload: exercise the code path")
    g = ap.add_argument_group("engine (same for every configuration)")
    g.add_argument("--max-model-len", type=int, default=32768)
    g.add_argument("--page-size", type=int, default=64)
    g.add_argument("--num-pages", type=int, default=1024, help="KV pages (the engine default); the step cost grows with it")
    g.add_argument("--max-num-seqs", type=int, default=16)
    g.add_argument("--max-num-batched-tokens", type=int, default=512,
                   help="fcfs / srpt: the Sarathi chunk budget; fcfs_nonchunked: cap on extra whole prompts")
    g.add_argument("--time-budget-token-cap", type=int, default=None,
                   help="edf / lrs / lars / slo: the hard token cap beside t_target (default: the engine's, "
                        "max_chunk + max_num_seqs, so the time budget alone sizes an iteration)")
    g.add_argument("--min-token-bucket", type=int, default=32)
    g.add_argument("--profile-dir", default=None,
                   help="runtime profile dir (default: <workdir>/profiles, measured fresh); reuse one to skip profiling")
    g.add_argument("--extra-server-flags", default="", help="appended to every server command line")
    g.add_argument("--iteration-trace", action="store_true",
                   help="every server started per configuration writes an iteration trace (serve "
                        "--iteration-trace) in the workdir; the results give each round's slow spells")
    g = ap.add_argument_group("workload (auto: chosen from the calibration)")
    g.add_argument("--long-len", type=int, default=None, help="long prompt tokens (auto)")
    g.add_argument("--long-prefill-target", type=float, default=40.0,
                   help="auto long-len: whole-prompt prefill at most this many seconds")
    g.add_argument("--num-long", type=int, default=1)
    g.add_argument("--long-arrival", type=float, default=15.0, help="seconds after the start of short traffic")
    g.add_argument("--long-output", type=int, default=16)
    g.add_argument("--short-prompt", default="128,1024", help="min,max prompt tokens (uniform)")
    g.add_argument("--short-output", default="8,32", help="min,max output tokens (uniform)")
    g.add_argument("--qps", type=float, default=None, help="short request rate (auto: from --short-load)")
    g.add_argument("--short-load", type=float, default=0.1,
                   help="auto qps: qps * mean short prefill time (whole prompt, alone); 0.1 keeps the engine "
                        "about a third busy with short traffic alone (decode iterations included)")
    g.add_argument("--duration", type=float, default=None,
                   help="seconds of short arrivals (auto: long arrival + 2 x its whole prefill + 15 s)")
    g.add_argument("--t-target", type=float, default=None, help="edf/lars iteration budget (auto)")
    g.add_argument("--deadline-min", type=float, default=None, help="TTFT deadline floor (auto)")
    ap.add_argument("--from-json", default=None, metavar="PATH",
                    help="no runs: rebuild the table, busy fractions, .md and plots from a results JSON")
    g.add_argument("--drain-limit", type=float, default=900.0,
                   help="seconds after the last arrival before unfinished requests are cancelled")
    ns = ap.parse_args(argv)
    if ns.smoke:
        for k, v in dict(max_model_len=128, page_size=16, num_pages=64, max_num_seqs=8, max_num_batched_tokens=64,
                         time_budget_token_cap=64,
                         long_prefill_target=1.0, long_arrival=1.0, long_output=4, short_prompt="16,48",
                         short_output="2,4", duration=4.0, qps=2.0, drain_limit=120.0).items():
            if getattr(ns, k) == ap.get_default(k):
                setattr(ns, k, v)
        if ns.configs == ap.get_default("configs"):
            ns.configs = f"fcfs_nonchunked,{DEFAULT_POLICY}"
    ns.configs = [c.strip() for c in ns.configs.split(",") if c.strip()]
    ns.short_prompt = tuple(int(x) for x in ns.short_prompt.split(","))
    ns.short_output = tuple(int(x) for x in ns.short_output.split(","))
    return ns


def engine_shapes(settings: dict) -> dict:
    """The engine shapes every configuration shares, as engine keyword arguments (the serve flags
    are the same names with dashes), from the run's settings: one sequence bucket and one
    page-table bucket, so warm-up compiles only the token ladder (the persistent XLA cache makes
    later starts cheap). `convoy_token_cap.py` builds its in-process engines from the same."""
    pages_per_seq = -(-settings["max_model_len"] // settings["page_size"])
    return dict(page_size=settings["page_size"], num_pages=settings["num_pages"],
                max_model_len=settings["max_model_len"], max_num_seqs=settings["max_num_seqs"],
                min_seq_bucket=settings["max_num_seqs"], min_page_bucket=min(pages_per_seq, settings["num_pages"]),
                min_token_bucket=settings["min_token_bucket"])


def engine_flags(ns, profile_dir: str, prefill_cache_dir: str) -> list[str]:
    """Flags every configuration shares (`engine_shapes`, the model, no background compiles, where
    the profile and prefill-time caches live)."""
    shapes = [a for k, v in engine_shapes(vars(ns)).items() for a in (f"--{k.replace('_', '-')}", str(v))]
    return [
        "--model", "demo", "--num-devices", "1", *shapes,
        "--no-background-compile",  # every bucket before the clock starts: compiles would compete with the workload
        "--profile-dir", profile_dir, "--prefill-cache-dir", prefill_cache_dir,
    ]


def cap_line(settings: dict) -> str:
    """The token caps a run used (runs before the time-budget cap had its own setting used one for all)."""
    n = settings.get("max_num_batched_tokens")
    if "time_budget_token_cap" not in settings:
        return f"Token cap {n} for every policy."
    t = settings["time_budget_token_cap"]
    return (f"Token cap {n} for fcfs / fcfs_nonchunked, "
            f"{'the engine default (max_chunk + max_num_seqs)' if t is None else t} for the time-budget policies.")


def policy_flags(policy: str, choice: dict, ns) -> list[str]:
    """The policy and its own settings. The token cap differs by kind: a token-budget policy's
    chunk budget is its whole sizing rule (512, Sarathi's), while a time-budget policy sizes each
    iteration by t_target and keeps the engine's cap, which never binds first. With 512 for every
    policy, the convoy's 32K prompt got what the shorts' prefills left of 512 tokens (a 96-token
    chunk in narrow tiles beside a 384-token short) although the time budget had room for its tile:
    in-process, interleaved rounds of the --short-load 0.2 workload (`benchmarks/convoy_token_cap.py`),
    the long request took (medians of 3) slo 23.4 s / edf 21.7 s with 512 (fcfs_nonchunked 16.1 s), and
    in a second run slo 21.0 / edf 21.1 s with 2048 and slo 20.1 / edf 19.1 s with the default
    (fcfs_nonchunked 16.6 s)."""
    flags = ["--policy", policy, "--deadline-min", repr(choice["deadline_min"])]
    if policy in TIME_BUDGET_POLICIES:
        flags += ["--t-target", repr(choice["t_target"])]
        if ns.time_budget_token_cap is not None:
            flags += ["--max-num-batched-tokens", str(ns.time_budget_token_cap)]
    else:
        flags += ["--max-num-batched-tokens", str(ns.max_num_batched_tokens)]
    return flags


# ---- machine ---------------------------------------------------------------------------------------
def machine_info() -> dict:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "hostname": platform.node()}
    try:
        import importlib.metadata as md

        info["jax"] = md.version("jax")
        info["jaxlib"] = md.version("jaxlib")
        info["grpcio"] = md.version("grpcio")
    except Exception:  # noqa: BLE001
        pass
    try:
        with open("/proc/meminfo") as f:
            info["mem_total_gb"] = round(int(f.readline().split()[1]) / 1e6, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        info["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], check=False, cwd=ROOT, capture_output=True, text=True,
                                            timeout=10).stdout.strip()
        info["git_dirty"] = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], check=False, cwd=ROOT,
                                                capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def load_snapshot() -> dict:
    return {"loadavg": list(os.getloadavg()), "cpu_probe_s": round(cpu_probe(), 4), "time": time.time()}


# ---- calibration -----------------------------------------------------------------------------------
def fit_prefill(samples: list[tuple[int, float]]) -> dict:
    """t(n) = a + b*n + c*n^2 (non-negative, relative-error weighted) from (tokens, seconds)."""
    from medha_jax.scheduler.nnls import nnls

    rows = [[1.0, float(n), float(n) * n] for n, _ in samples]
    y = [t for _, t in samples]
    a, b, c = nnls(rows, y, weights=[1.0 / t for t in y])
    fit = {"a": a, "b": b, "c": c}
    fit["mape"] = sum(abs(prefill_time(fit, n) - t) / t for n, t in samples) / len(samples)
    return fit


def prefill_time(fit: dict, n: int) -> float:
    return fit["a"] + fit["b"] * n + fit["c"] * n * n


def calibrate(address: str, ns) -> dict:
    """Whole-prompt prefill times (best of two probes per size) -> t(n) = a + b*n + c*n^2. The
    probes reach half the context: with 4,096 tokens the largest, the fit's n^2 term, extrapolated
    8x to the 32K long prompt, put its time at 13.6-32.6 s on one day while it measured 25-30 s,
    and the long prompt's length and the short QPS follow from the fit."""
    sizes = [n for n in ((16, 32, 64) if ns.smoke else (512, 1024, 2048, 4096, 8192, 16384))
             if 2 * n <= ns.max_model_len]
    generate_once(address, 64, 2, seed=1)  # first request: any lazy set-up off the clock
    samples = []
    for i, n in enumerate(sizes):
        best = min(generate_once(address, n, 1, seed=100 + 10 * i + k).server_ttft_s for k in range(2))
        samples.append((n, best))
        log(f"calibration: whole-prompt prefill of {n} tokens: {best:.3f} s")
    fit = fit_prefill(samples)
    dec = generate_once(address, 128 if not ns.smoke else 16, 17, seed=7)
    fit["decode_s"] = dec.server_tpot_s
    fit["samples"] = samples
    log(f"calibration: t(n) = {fit['a']:.4f} + {fit['b']:.3e} n + {fit['c']:.3e} n^2 s (MAPE {100 * fit['mape']:.1f}%); "
        f"one decode iteration {fit['decode_s'] * 1e3:.1f} ms")
    return fit


def choose(ns, fit: dict, pred) -> dict:
    """fit: the calibration (whole-prompt prefill times); pred: the runtime profile's predictor."""
    why = {}
    long_out = ns.long_output
    if ns.long_len is not None:
        L = ns.long_len
        why["long_len"] = "given"
    else:
        cands = [(1 << m) - 64 for m in range(7, 31) if (1 << m) - 64 + long_out <= ns.max_model_len and (1 << m) > 64]
        fitting = [n for n in cands if prefill_time(fit, n) <= ns.long_prefill_target]
        L = max(fitting) if fitting else min(cands)
        why["long_len"] = (f"largest 2^m - 64 (no bucket padding under fcfs_nonchunked) with a predicted whole-prompt "
                           f"prefill <= {ns.long_prefill_target:g} s")
    t_nc = prefill_time(fit, L)
    if ns.t_target is not None:
        t_target = ns.t_target
        why["t_target"] = "given"
    else:
        tile = min(pred.tiling.mid_tile_q, L)
        t_tile = pred.chunk_time(tile, L - tile)
        t_target = max(0.05, math.ceil(1.2 * t_tile * 100) / 100)
        why["t_target"] = (f"1.2 x the profile's time of a whole {tile}-token attention tile at the long prompt's end "
                           f"({t_tile:.3f} s at KV {L - tile}), at least the default 0.05 s")
    if ns.deadline_min is not None:
        dmin = ns.deadline_min
        why["deadline_min"] = "given"
    else:
        dmin = max(0.5, round(4 * t_target, 3))
        why["deadline_min"] = "max(engine default 0.5 s, 4 x t_target)"
    lo, hi = ns.short_prompt
    mean_prefill = sum(prefill_time(fit, n) for n in range(lo, hi + 1)) / (hi - lo + 1)
    if ns.qps is not None:
        qps = ns.qps
        why["qps"] = "given"
    else:
        qps = round(ns.short_load / mean_prefill, 2)
        why["qps"] = f"short_load {ns.short_load:g} / mean short whole-prompt prefill {mean_prefill:.3f} s"
    if ns.duration is not None:
        duration = ns.duration
        why["duration"] = "given"
    else:
        duration = round(min(max(ns.long_arrival + 2 * t_nc + 15, 60.0), 300.0), 1)
        why["duration"] = "long arrival + 2 x its whole-prompt prefill + 15 s, in [60, 300]"
    mean_out = sum(ns.short_output) / 2
    c = {
        "long_len": L, "num_long": ns.num_long, "long_output": long_out, "long_arrival_s": ns.long_arrival,
        "predicted_long_prefill_nonchunked_s": t_nc, "t_target": t_target, "deadline_min": dmin, "qps": qps,
        "duration_s": duration, "short_prompt": list(ns.short_prompt), "short_output": list(ns.short_output),
        "mean_short_prefill_s": mean_prefill,
        "short_prefill_load": qps * mean_prefill,
        "short_decode_load_unbatched": qps * mean_out * (fit.get("decode_s") or 0.0),
        "why": why,
    }
    return c


# ---- deadlines and workload ------------------------------------------------------------------------
def find_profile(profile_dir: str) -> str | None:
    files = sorted(glob.glob(os.path.join(profile_dir, "*.json")))
    return files[0] if files else None


def ensure_profile(ns, flags: list[str], profile_dir: str, workdir: str) -> tuple[str, float]:
    path = find_profile(profile_dir)
    if path is not None:
        log(f"runtime profile: reusing {path}")
        return path, 0.0
    log("runtime profile: measuring one (python -m medha_jax.profile), used by every edf/lars server")
    t0 = time.monotonic()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""))
    env.setdefault("JAX_PLATFORMS", "cpu")
    with open(os.path.join(workdir, "profile.log"), "w") as logf:
        r = subprocess.run([sys.executable, "-m", "medha_jax.profile", "--repeats", "3", *flags],
                           check=False, cwd=ROOT, env=env, stdout=logf, stderr=subprocess.STDOUT, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"profiling failed (exit {r.returncode}); see {workdir}/profile.log")
    path = find_profile(profile_dir)
    if path is None:
        raise RuntimeError(f"profiling wrote no profile into {profile_dir}")
    return path, time.monotonic() - t0


def deadline_fn(pred, choice: dict, ns):
    """The engine's derived TTFT deadline, D = max(deadline_k * T_prefill(P), deadline_min), with
    T_prefill from the same profile (pred), t_target and chunk settings as the edf/lars servers
    use; also returns T_prefill itself."""
    cfg, cache = prefill_time_cache(pred, choice, ns.max_num_seqs, ns.time_budget_token_cap)
    return (lambda n: max(cfg.deadline_k * cache.total_time(n), cfg.deadline_min)), cache.total_time


def prefill_time_cache(pred, choice: dict, max_num_seqs: int, token_cap: int | None, cache_dir: str | None = None):
    """(SchedulerConfig, PrefillTimeCache) as the run's time-budget servers build them: the profile
    pred, the run's t_target and deadline_min, its sequence and token caps; cache_dir None: the
    config's default ("": in memory). `convoy_chunk_cost.py` takes its chunk plan from the same."""
    from medha_jax.scheduler import PrefillTimeCache

    cfg = SchedulerConfig(policy="lars", t_target=choice["t_target"], deadline_min=choice["deadline_min"],
                          max_num_seqs=max_num_seqs, max_num_batched_tokens=token_cap)
    return cfg, PrefillTimeCache(pred, cfg, cache_dir=cache_dir)


def make_workload(ns, choice: dict, deadline) -> list[RequestSpec]:
    rng = random.Random(ns.seed)
    specs: list[RequestSpec] = []
    t, i = 0.0, 0
    lo, hi = ns.short_prompt
    olo, ohi = ns.short_output
    while True:
        t += rng.expovariate(choice["qps"])
        if t > choice["duration_s"]:
            break
        n = rng.randint(lo, hi)
        specs.append(RequestSpec(f"short-{i:04d}", "short", round(t, 4), n, rng.randint(olo, ohi), deadline(n),
                                 seed=rng.getrandbits(31)))
        i += 1
    L = choice["long_len"]
    gap = choice["predicted_long_prefill_nonchunked_s"] * 1.5
    for j in range(choice["num_long"]):
        specs.append(RequestSpec(f"long-{j}", "long", choice["long_arrival_s"] + j * gap, L, choice["long_output"],
                                 deadline(L), seed=rng.getrandbits(31)))
    specs.sort(key=lambda s: s.arrival_s)
    return specs


# ---- one configuration -----------------------------------------------------------------------------
def run_config(policy: str, flags: list[str], specs: list[RequestSpec], ns, workdir: str, *, server=None):
    """Start a server (unless given), run the workload, stop it; (results, record)."""
    rec = {"policy": policy}
    own = server is None
    trace = None
    if own and ns.iteration_trace:
        trace = os.path.join(workdir, f"trace_{policy}_{len(glob.glob(os.path.join(workdir, 'trace_*')))}.jsonl")
        flags = flags + ["--iteration-trace", trace]
    if own:
        log(f"{policy}: starting the server")
        server = ServerProcess(flags, os.path.join(workdir, f"server_{policy}.log"))
        rec["startup_s"] = round(server.startup_s, 1)
    rec["server_command"] = server.cmd
    rec["server_log"] = str(server.log_path)
    try:
        generate_once(server.address, 64, 2, seed=3)  # warm: first-request set-up off the clock
        rec["load_before"] = load_snapshot()
        m0 = server.metrics()
        n_done = [0]
        t0 = time.monotonic()

        def done(r):
            n_done[0] += 1
            if r.kind == "long" or n_done[0] % 50 == 0:
                log(f"{policy}: {n_done[0]}/{len(specs)} done ({time.monotonic() - t0:.0f} s)"
                    + (f"; {r.request_id} ttft {r.ttft if r.ttft is None else round(r.ttft, 2)} s, "
                       f"e2e {r.e2e if r.e2e is None else round(r.e2e, 2)} s" if r.kind == "long" else ""))

        log(f"{policy}: running {len(specs)} requests over {max(s.arrival_s for s in specs):.0f} s")
        with MetricsPoller(server) as poller:
            results, w0 = run_workload(server.address, specs, timeout=ns.drain_limit, on_done=done, with_start=True)
        rec["wall_s"] = round(time.monotonic() - t0, 1)
        rec["busy_timeline"] = [(round(t - w0, 3), int(n), round(b, 4)) for t, n, b in poller.samples]
        rec["busy_windows"] = busy_windows(rec["busy_timeline"], results)
        rec["load_after"] = load_snapshot()
        rec["engine"] = engine_stats(m0, server.metrics(), rec["wall_s"])
    finally:
        rec["exit_code"] = server.stop()
    if trace is not None and os.path.exists(trace):
        with open(trace) as f:
            rec["iteration_trace"] = {"path": trace, **trace_stats(json.loads(x) for x in f if x.strip())}
    return results, rec


def busy_windows(timeline, results) -> dict:
    """Engine busy fraction (iteration seconds / wall seconds) before the first long request
    arrives, while long prefills are pending (arrival to last first token), and after."""
    longs = [r for r in results if r.kind == "long" and r.send_s is not None]
    if not longs or len(timeline) < 2:
        return {}
    a = min(r.send_s for r in longs)
    f = max((r.first_token_s if r.first_token_s is not None else r.send_s) for r in longs)
    end = max((r.finish_s for r in results if r.finish_s is not None), default=timeline[-1][0])

    def frac(t0, t1):
        # an iteration's seconds are counted when it ends: both bounds are the first sample at or
        # after the boundary, so an iteration that ends at a boundary falls in the window it ends
        lo = min((p for p in timeline if p[0] >= t0), default=timeline[-1], key=lambda p: p[0])
        hi = min((p for p in timeline if p[0] >= t1), default=timeline[-1], key=lambda p: p[0])
        if hi[0] - lo[0] <= 0:
            return None
        return round((hi[2] - lo[2]) / (hi[0] - lo[0]), 3), hi[1] - lo[1]

    out = {}
    for name, (t0, t1) in {"before_long": (0.0, a), "during_long_prefill": (a, f), "after": (f, end)}.items():
        v = frac(t0, t1)
        if v is not None:
            out[name] = {"from_s": round(t0, 2), "to_s": round(t1, 2), "busy_fraction": v[0], "iterations": v[1]}
    return out


def engine_stats(before: dict, after: dict, wall_s: float) -> dict:
    """Iterations and busy time during the run, from the server's /metrics before and after."""
    if not before or not after:
        return {}
    d = lambda k: after.get(k, 0.0) - before.get(k, 0.0)  # noqa: E731
    n, busy = d("medha_engine_iterations_total") or d("medha_engine_iterations"), d("medha_iteration_seconds_sum")
    hist = {k.split('le="')[1].rstrip('"}'): d(k) for k in after if k.startswith("medha_iteration_seconds_bucket")}
    return {"iterations": int(n), "busy_s": round(busy, 2), "busy_fraction": round(busy / wall_s, 3) if wall_s else None,
            "mean_iteration_s": busy / n if n else None, "iteration_seconds_cumulative_buckets": hist,
            "recompilations": after.get("medha_recompilations_total", after.get("medha_recompilations"))}


# ---- main ------------------------------------------------------------------------------------------
def rerender(ns) -> int:
    """Table, busy fractions, .md and plots again from a results JSON (same name, beside it unless --out).
    As in the run: the summaries pool every round's requests; the busy fractions (the first round's
    timeline) and the plots take the first round's."""
    from convoy_client import RequestResult

    with open(ns.from_json) as f:
        report = json.load(f)
    runs = {}
    for p, rec in report["configs"].items():
        pooled = [RequestResult(**{k: v for k, v in q.items() if k not in ("ttft_s", "tpot_s", "e2e_s")})
                  for q in rec["requests"]]
        rec["summary"] = summarize(pooled)
        rec["requests"] = [r.to_json() for r in pooled]
        _median_long_completion(rec)
        runs[p] = pooled[:len(pooled) // max(1, len(rec.get("rounds") or ()))]  # rounds one after the other
        if rec.get("busy_timeline"):
            rec["busy_windows"] = busy_windows(rec["busy_timeline"], runs[p])
    summaries = {p: report["configs"][p]["summary"] for p in sorted(runs, key=_order)}
    report["criteria"] = report_criteria(report, summaries)
    if ns.out == parse_args([]).out:
        ns.out = os.path.dirname(os.path.abspath(ns.from_json))
    if ns.name == "convoy":
        ns.name = os.path.splitext(os.path.basename(ns.from_json))[0]
    write_results(ns, report, runs, summaries, report["choice"])
    print(text_table(summaries))
    for line in criteria_lines(report["criteria"]):
        print(line)
    return 0


def main(argv=None) -> int:
    ns = parse_args(argv)
    if ns.from_json:
        return rerender(ns)
    t_start = time.monotonic()
    workdir = ns.workdir or tempfile.mkdtemp(prefix="convoy-")
    os.makedirs(workdir, exist_ok=True)
    profile_dir = os.path.abspath(ns.profile_dir or os.path.join(workdir, "profiles"))
    flags = engine_flags(ns, profile_dir, os.path.join(workdir, "prefill_times"))
    extra = ns.extra_server_flags.split()
    if ns.configs[0] != "fcfs_nonchunked":
        raise SystemExit("--configs must start with fcfs_nonchunked (its server runs the calibration)")
    log(f"workdir {workdir}; load average {os.getloadavg()}")
    info = machine_info()
    report: dict = {"benchmark": "convoy", "started": datetime.datetime.now().isoformat(timespec="seconds"),
                    "command": " ".join([os.path.relpath(sys.argv[0], ROOT) if sys.argv[0] else "convoy.py", *(argv if argv is not None else sys.argv[1:])]),
                    "machine": info, "settings": {k: v for k, v in vars(ns).items()}, "configs": {}}
    runs: dict[str, list] = {}

    # 1-2: calibrate on the baseline's server, then choose the workload
    base_flags = flags + policy_flags("fcfs_nonchunked", {"deadline_min": 0.5}, ns) + extra
    log("fcfs_nonchunked: starting the server (also used for calibration)")
    server = ServerProcess(base_flags, os.path.join(workdir, "server_fcfs_nonchunked.log"))
    try:
        log(f"server up in {server.startup_s:.0f} s at {server.address}")
        report["calibration"] = fit = calibrate(server.address, ns)
        report["calibration"]["load"] = load_snapshot()
        # 2: the runtime profile (t_target derives from its attention tiles)
        prof_path, prof_s = ensure_profile(ns, flags, profile_dir, workdir)
        pred = RuntimePredictor.load(prof_path)
        report["profile"] = {"path": prof_path, "version": PROFILE_VERSION, "measured_s": round(prof_s, 1),
                             "coefficients": pred.coefficients,
                             "tiling": dataclasses.asdict(pred.tiling), "fit": pred.fit_info, "load": load_snapshot()}
        choice = choose(ns, fit, pred)
        report["choice"] = choice
        log(f"chose: long prompt {choice['long_len']} tokens x{choice['num_long']} at t={choice['long_arrival_s']:g} s "
            f"(predicted whole-prompt prefill {choice['predicted_long_prefill_nonchunked_s']:.1f} s); "
            f"short: {choice['qps']:g} QPS for {choice['duration_s']:g} s, prompts {ns.short_prompt}, outputs "
            f"{ns.short_output} (prefill load {choice['short_prefill_load']:.2f}); "
            f"t_target {choice['t_target']:g} s; deadline_min {choice['deadline_min']:g} s")
        for k, v in choice["why"].items():
            log(f"  {k}: {v}")
        # 3: the deadlines
        deadline, t_prefill = deadline_fn(pred, choice, ns)
        # what the budget alone costs the long prompt: its prefill with every chunk's iteration
        # within t_target and nothing else running, against the whole prompt at once
        choice["predicted_long_prefill_budgeted_s"] = t_prefill(choice["long_len"])
        # ... and all at once by the same profile (the floor line compares like with like)
        choice["profile_long_prefill_whole_s"] = pred.chunk_time(choice["long_len"], 0)
        specs = make_workload(ns, choice, deadline)
        n_short = sum(s.kind == "short" for s in specs)
        long_d = [s.ttft_deadline_s for s in specs if s.kind == "long"]
        short_d = sorted(s.ttft_deadline_s for s in specs if s.kind == "short")
        log(f"workload: {n_short} short + {len(specs) - n_short} long requests; TTFT deadlines: short "
            f"{short_d[0]:.2f}-{short_d[-1]:.2f} s, long {long_d[0]:.1f} s" if short_d else "workload: no short requests")
        report["workload"] = [{"request_id": s.request_id, "kind": s.kind, "arrival_s": s.arrival_s,
                               "prompt_len": s.prompt_len, "max_tokens": s.max_tokens,
                               "ttft_deadline_s": s.ttft_deadline_s} for s in specs]
        # 4: the baseline on the server already up, then one fresh server per configuration; with
        # rounds, the baseline runs in every round (order reversed every other round), so a drift in
        # the VM's speed over the run shows in both sides of each round's long-request ratio
        first, rec = run_config("fcfs_nonchunked", base_flags, specs, ns, workdir, server=server)
        rec["startup_s"] = round(server.startup_s, 1)
    finally:
        server.stop()
    rounds: dict[str, list] = {p: [] for p in ns.configs}
    rounds["fcfs_nonchunked"].append((first, rec))
    for r in range(ns.rounds):
        for policy in ns.configs if r % 2 == 0 else ns.configs[::-1]:
            if r == 0 and policy == "fcfs_nonchunked":
                continue  # ran above, on the calibration server
            if ns.rounds > 1:
                log(f"round {r + 1}/{ns.rounds}: {policy}")
            pflags = base_flags if policy == "fcfs_nonchunked" else flags + policy_flags(policy, choice, ns) + extra
            rounds[policy].append(run_config(policy, pflags, specs, ns, workdir))
    for policy, done in rounds.items():
        runs[policy] = done[0][0]  # the plots show the first round
        report["configs"][policy] = rec = done[0][1]
        pooled = [x for results, _ in done for x in results]
        _finish_config(report, policy, pooled)
        if ns.rounds > 1:
            rec["rounds"] = [{"summary": summarize(results), "load_before": rr["load_before"],
                              "load_after": rr["load_after"], "engine": rr.get("engine"),
                              "iteration_trace": rr.get("iteration_trace")} for results, rr in done]
            _median_long_completion(rec)

    # 5: results
    report["total_wall_s"] = round(time.monotonic() - t_start, 1)
    summaries = {p: report["configs"][p]["summary"] for p in sorted(runs, key=_order)}
    report["criteria"] = report_criteria(report, summaries)
    write_results(ns, report, runs, summaries, choice)
    print()
    print(text_table(summaries))
    print()
    for line in criteria_lines(report["criteria"]):
        print(line)
    log(f"done in {report['total_wall_s'] / 60:.1f} min; results in {ns.out}/{ns.name}.json (logs in {workdir})")
    return 0


def _order(p: str) -> int:
    return TABLE_ORDER.index(p) if p in TABLE_ORDER else len(TABLE_ORDER)


def _finish_config(report: dict, policy: str, results) -> None:
    rec = report["configs"][policy]
    rec["summary"] = s = summarize(results)
    rec["requests"] = [r.to_json() for r in results]
    e = rec.get("engine") or {}
    bw = rec.get("busy_windows") or {}
    if bw:
        log(f"{policy}: engine busy fraction " + ", ".join(f"{k} {v['busy_fraction']:.2f} ({v['iterations']} it)"
                                                       for k, v in bw.items()))
    log(f"{policy}: short TTFT P50 {_r(s['short']['ttft_p50_s'])} P99 {_r(s['short']['ttft_p99_s'])} s; long completion "
        f"{_r(s['long_completion_s'])} s; {e.get('iterations')} iterations, busy {e.get('busy_s')} s "
        f"(mean {_r(e.get('mean_iteration_s'), 3)} s); load before/after {rec['load_before']['loadavg'][0]:.1f}/"
        f"{rec['load_after']['loadavg'][0]:.1f}")


def _r(x, n=2):
    return None if x is None else round(x, n)


def round_long_completions(report: dict) -> dict[str, list]:
    """Per configuration with rounds: the long request's completion in each round, in run order."""
    return {p: [rr["summary"]["long_completion_s"] for rr in rec["rounds"]]
            for p, rec in report["configs"].items() if rec.get("rounds")}


def report_criteria(report: dict, summaries: dict[str, dict]) -> dict:
    """`criteria` with what a results report holds: each configuration's rounds and pooled requests."""
    return criteria(summaries, round_long_completions(report),
                    {p: rec["requests"] for p, rec in report["configs"].items()})


def criteria(summaries: dict[str, dict], round_longs: dict[str, list] | None = None,
             requests: dict[str, list] | None = None) -> dict:
    """The default policy against fcfs_nonchunked (convoy: >= 10x lower short P99 TTFT, long request
    within 1.3x) and against edf (short P99 TTFT and misses no worse). With rounds on both sides
    (`round_longs`), the long request's ratio is the median of each round's own ratio: the VM's
    speed drifts by 20-30% over a run, and a baseline measured once, at the start, would be
    compared with rounds run at another speed. With the pooled requests (`requests`: results JSON
    entries per configuration), the short P99 gap to edf also gets a 95% paired-bootstrap interval
    (`convoy_report.paired_percentile_diff`); the verdict stays the strict comparison."""
    base, dflt, edf = summaries.get("fcfs_nonchunked"), summaries.get(DEFAULT_POLICY), summaries.get("edf")
    if not dflt:
        return {}
    out = {"policy": DEFAULT_POLICY}
    d99, dl = dflt["short"]["ttft_p99_s"], dflt.get("long_completion_s")
    if base:
        b99, bl = base["short"]["ttft_p99_s"], base.get("long_completion_s")
        out.update(short_p99_ttft_fcfs_nonchunked_s=b99, short_p99_ttft_default_s=d99,
                   long_completion_fcfs_nonchunked_s=bl, long_completion_default_s=dl)
        if b99 and d99:
            out["short_p99_ttft_ratio"] = b99 / d99
            out["short_p99_ttft_at_least_10x_lower"] = b99 / d99 >= 10
        rb, rd = (round_longs or {}).get("fcfs_nonchunked"), (round_longs or {}).get(DEFAULT_POLICY)
        if rb and rd and len(rb) == len(rd) and None not in rb + rd:
            out["long_completion_round_ratios"] = [d / b for b, d in zip(rb, rd)]
            out["long_completion_ratio"] = statistics.median(out["long_completion_round_ratios"])
        elif bl and dl:
            out["long_completion_ratio"] = dl / bl
        if "long_completion_ratio" in out:
            out["long_completion_within_1_3x"] = out["long_completion_ratio"] <= 1.3
    if edf and edf is not dflt:
        e99, em, dm = edf["short"]["ttft_p99_s"], edf["short"]["deadline_misses"], dflt["short"]["deadline_misses"]
        out.update(short_p99_ttft_default_s=d99, short_p99_ttft_edf_s=e99, short_misses_edf=em, short_misses_default=dm,
                   no_worse_than_edf=bool(d99 is not None and e99 is not None and d99 <= e99 and dm <= em))
        if requests and requests.get(DEFAULT_POLICY) and requests.get("edf"):
            gap = paired_percentile_diff(short_ttfts(requests[DEFAULT_POLICY]), short_ttfts(requests["edf"]))
            if gap is not None:
                out["short_p99_ttft_minus_edf_s"], *out["short_p99_ttft_minus_edf_ci95_s"] = gap
    return out


def criteria_lines(c: dict) -> list[str]:
    if not c:
        return []
    lines, p = [], c.get("policy", "lars")
    if "short_p99_ttft_ratio" in c:
        lines.append(f"short P99 TTFT: fcfs_nonchunked {c['short_p99_ttft_fcfs_nonchunked_s']:.2f} s / {p} "
                     f"{c['short_p99_ttft_default_s']:.2f} s = {c['short_p99_ttft_ratio']:.1f}x lower under {p} "
                     f"(target >= 10x: {'met' if c['short_p99_ttft_at_least_10x_lower'] else 'NOT met'})")
    if "long_completion_round_ratios" in c:
        each = ", ".join(f"{x:.2f}x" for x in c["long_completion_round_ratios"])
        lines.append(f"long request completion: {p} vs fcfs_nonchunked in the same round: {each}; median "
                     f"{c['long_completion_ratio']:.2f}x (target <= 1.3x: "
                     f"{'met' if c['long_completion_within_1_3x'] else 'NOT met'}); median rounds "
                     f"{c['long_completion_default_s']:.1f} s vs {c['long_completion_fcfs_nonchunked_s']:.1f} s")
    elif "long_completion_ratio" in c:
        lines.append(f"long request completion: {p} {c['long_completion_default_s']:.1f} s vs fcfs_nonchunked "
                     f"{c['long_completion_fcfs_nonchunked_s']:.1f} s = {c['long_completion_ratio']:.2f}x "
                     f"(target <= 1.3x: {'met' if c['long_completion_within_1_3x'] else 'NOT met'})")
    if "no_worse_than_edf" in c:
        lines.append(f"vs edf: short P99 TTFT {c['short_p99_ttft_default_s']:.3f} s vs {c['short_p99_ttft_edf_s']:.3f} s, "
                     f"short misses {c['short_misses_default']} vs {c['short_misses_edf']} "
                     f"(target: no worse: {'met' if c['no_worse_than_edf'] else 'NOT met'})")
    if "short_p99_ttft_minus_edf_ci95_s" in c:
        lo, hi = c["short_p99_ttft_minus_edf_ci95_s"]
        lines.append(f"  {p} - edf short P99 TTFT: {1e3 * c['short_p99_ttft_minus_edf_s']:+.1f} ms, 95% paired-bootstrap "
                     f"interval [{1e3 * lo:+.1f}, {1e3 * hi:+.1f}] ms over the short requests both served: "
                     f"{gap_reading(lo, hi, p)}")
    return lines


def budget_floor_lines(choice: dict) -> list[str]:
    """The long prompt's prefill alone in chunks whose iterations fit t_target (the runtime
    profile's prediction, what its deadline derives from) vs all at once, by the same profile: a
    floor on its completion for any schedule that keeps iterations within t_target while shorts
    decode. With the shorts' prefills beside it (a fraction `short_prefill_load` of the engine's
    time) it stretches to budgeted / (1 - load), whatever the policy. Results before stop 64 divide
    by the calibration's whole-prompt time instead, measured on the day of the run while the profile
    may come from another: on the convoy's VM that read 1.23-1.33x for chunks that cost 1.08x on the
    tick program (`convoy_chunk_cost.py`). Older results lack it."""
    budgeted = choice.get("predicted_long_prefill_budgeted_s")
    whole = choice.get("profile_long_prefill_whole_s")
    source = "the same profile's"
    if whole is None:
        whole, source = choice.get("predicted_long_prefill_nonchunked_s"), "the calibration's"
    if not budgeted or not whole:
        return []
    load = choice.get("short_prefill_load", 0.0)
    shared = budgeted / (1.0 - load) if load < 1.0 else float("inf")
    return [f"The long prompt alone, in chunks whose iterations fit t_target: {budgeted:.1f} s predicted, "
            f"{budgeted / whole:.2f}x {source} whole-prompt prefill ({whole:.1f} s): the least any policy that "
            f"keeps to the budget takes, before the shorts' share of the engine; with the shorts' prefills "
            f"beside it (load {load:.2f}), {shared:.1f} s = {shared / whole:.2f}x.", ""]


def _median_long_completion(rec: dict) -> None:
    """Pooled rounds: the long request's completion is the median round's, not the slowest."""
    comp = [rr["summary"]["long_completion_s"] for rr in rec.get("rounds", [])]
    if comp:
        rec["summary"]["long_completion_s"] = statistics.median(comp) if None not in comp else None


def round_lines(report: dict) -> list[str]:
    """With --rounds > 1: what each round measured (the table above pools the rounds' requests;
    long completion there is the median round)."""
    rows = [(p, i, rr) for p, rec in report["configs"].items() for i, rr in enumerate(rec.get("rounds", []))]
    if not rows:
        return []
    out = ["Every round (same workload, configurations interleaved; the table above pools the requests of "
           "all rounds, its long completion is the median round):", "",
           "| config | round | short TTFT P50 | short TTFT P99 | misses short | long done after | load before->after |",
           "|---|---|---|---|---|---|---|"]
    for p, i, rr in sorted(rows, key=lambda x: (_order(x[0]), x[1])):
        s = rr["summary"]
        out.append(f"| {p} | {i + 1} | {_r(s['short']['ttft_p50_s'])} s | {_r(s['short']['ttft_p99_s'])} s | "
                   f"{s['short']['deadline_misses']}/{s['short']['count']} | {_r(s['long_completion_s'], 1)} s | "
                   f"{rr['load_before']['loadavg'][0]:.1f}->{rr['load_after']['loadavg'][0]:.1f} |")
    traced = [(p, i, rr["iteration_trace"]) for p, i, rr in sorted(rows, key=lambda x: (_order(x[0]), x[1]))
              if rr.get("iteration_trace") and rr["iteration_trace"]["iterations"]]
    if traced:
        out += ["", "Iteration traces (`--iteration-trace`; measured / predicted per iteration, slow spells: two or "
                "more iterations in a row above 1.3x):", "",
                "| config | round | iterations | measured / predicted s | ratio P50 / P90 / P99 | slow spells | in spells |",
                "|---|---|---|---|---|---|---|"]
        for p, i, t in traced:
            out.append(f"| {p} | {i + 1} | {t['iterations']} | {t['measured_s']:.1f} / {t['predicted_s']:.1f} | "
                       f"{t['ratio_p50']:.2f} / {t['ratio_p90']:.2f} / {t['ratio_p99']:.2f} | {t['slow_spells']} | "
                       f"{t['slow_spell_s']:.1f} s |")
    return out + [""]


def write_results(ns, report: dict, runs: dict, summaries: dict, choice: dict) -> None:
    os.makedirs(ns.out, exist_ok=True)
    base = os.path.join(ns.out, ns.name)
    with open(base + ".json.tmp", "w") as f:
        json.dump(report, f, separators=(",", ":"), default=str)  # compact: per-message times of every request
    os.replace(base + ".json.tmp", base + ".json")
    ordered = {p: runs[p] for p in sorted(runs, key=_order)}
    title = (f"demo model on {report['machine'].get('cpu', '?')} ({report['machine'].get('cores')} cores): "
             f"{choice['qps']:g} QPS short + {choice['num_long']} x {choice['long_len']}-token prompt")
    plot_ttft_over_time(ordered, base + "_ttft_over_time.png", title)
    plot_ttft_cdf(ordered, base + "_ttft_cdf.png", title)
    loads = ", ".join(f"{p} {report['configs'][p]['load_before']['loadavg'][0]:.1f}->"
                      f"{report['configs'][p]['load_after']['loadavg'][0]:.1f}" for p in ordered)
    md = [f"# Convoy benchmark ({report['started']})", "",
          f"`{report['command']}`", "",
          (f"Machine: {report['machine'].get('cpu')} x {report['machine'].get('cores')} cores, jax "
           f"{report['machine'].get('jax')}, commit {report['machine'].get('git_commit', '?')[:10]}"
           f"{' (dirty tree)' if report['machine'].get('git_dirty') else ''}. 1-min load average before->after "
           f"each run: {loads}."), "",
          (f"Workload: {choice['qps']:g} QPS short requests (prompts {choice['short_prompt']}, outputs "
           f"{choice['short_output']}) for {choice['duration_s']:g} s, {choice['num_long']} long request(s) of "
           f"{choice['long_len']} tokens at t={choice['long_arrival_s']:g} s. t_target {choice['t_target']:g} s, "
           f"deadline_min {choice['deadline_min']:g} s. {cap_line(report['settings'])}"), "",
          *budget_floor_lines(choice),
          markdown_table(summaries), ""] + criteria_lines(report["criteria"]) + [""] + round_lines(report)
    busy = [f"- {p}: " + ", ".join(f"{k.replace('_', ' ')} {v['busy_fraction']:.2f}"
                                   for k, v in report["configs"][p].get("busy_windows", {}).items())
            for p in ordered if report["configs"][p].get("busy_windows")]
    if busy:
        md += ["Engine busy fraction (iteration time / wall time) before the long request, while its prefill "
               "is pending, and after:", ""] + busy + [""]
    with open(base + ".md", "w") as f:
        f.write("\n".join(md))


if __name__ == "__main__":
    sys.exit(main())
