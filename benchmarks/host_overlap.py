"""Device-idle time between iterations, with and without asynchronous scheduling, side by side.

    python benchmarks/host_overlap.py                 # offline batch and a decode-heavy chat job
    python benchmarks/host_overlap.py --small         # seconds: a code-path check

Data flow: a random-weight Llama (benchmarks/dummy_models.LLAMA_31M, float32) served through
`LLM(load_format="dummy")` twice, the same shapes and default policy, once with
`async_scheduling=False` (each step waits for the previous step's tokens) and once with the
default (step n+1 is scheduled, packed and launched while step n runs) -> an untimed pass per
engine and job -> `repeats` interleaved rounds per job, each engine's executor recording every
tick's launch and finish (`executor.device_timeline.DeviceTimeline`) -> per engine and job: median
wall time, output tokens/s, iterations, and the device-idle fraction (time the device waited for
the host between ticks over the span of the job), greedy outputs compared
-> results/host_overlap[_small].json and .md with the machine and load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dummy_models import LLAMA_31M, TINY, batch_prompts, write_model_dir  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv=None) -> int:
    from medha_jax import LLM, SamplingParams
    from medha_jax.executor.device_timeline import DeviceTimeline
    from medha_jax.executor.executor import compile_events

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="tiny model and jobs: a code-path check")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/medha_host_overlap"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default=None)
    args = ap.parse_args(argv)
    # The timeline's watcher thread stamps a tick's finish once it holds the GIL; while the engine
    # thread runs Python that can take up to the switch interval (5 ms by default), which would
    # hide idle time. 0.1 ms bounds that error in both modes alike.
    sys.setswitchinterval(1e-4)
    cfg = TINY if args.small else LLAMA_31M
    model_dir = write_model_dir(args.workdir, "tiny" if args.small else "llama-31m", cfg)
    V = cfg["vocab_size"]
    # (name, prompts, prompt tokens, new tokens)
    jobs = [("offline 16 x (512 + 64)", 16, 512, 64), ("chat 32 x (32 + 128)", 32, 32, 128)]
    if args.small:
        jobs = [("offline 4 x (48 + 8)", 4, 48, 8), ("chat 8 x (8 + 16)", 8, 8, 16)]
    shapes = dict(load_format="dummy", dtype="float32", mesh="tp=1", num_devices=1, max_model_len=1024,
                  num_pages=32 * 12 + 16 * 40 + 64, page_size=16, max_num_seqs=32, max_num_batched_tokens=512,
                  background_compile=False, warmup=False, profile_dir=str(args.workdir / "profiles"))
    # warmup=False: each job's untimed pass compiles the buckets it needs. Every bucket of both
    # engines (92 each) held ~79,000 memory mappings, past the kernel's limit of 65,530, and the
    # second engine's compiles crashed the process (2026-11-28; now refused by map_budget)
    if args.small:  # a code-path check: a few small buckets
        shapes.update(max_model_len=128, num_pages=64, max_num_seqs=8, max_num_batched_tokens=64)
    log = lambda m: print(f"[overlap {time.strftime('%H:%M:%S')}] {m}", flush=True)  # noqa: E731
    load_before = os.getloadavg()
    modes = {"wait for each step": False, "async scheduling": True}
    llms, start_s = {}, {}
    for mode, on in modes.items():
        t0 = time.perf_counter()
        llms[mode] = LLM(model=str(model_dir), async_scheduling=on, **shapes)
        start_s[mode] = time.perf_counter() - t0
        llms[mode].engine.executor.timeline = DeviceTimeline()
        log(f"{mode}: up in {start_s[mode]:.1f} s")

    def job_inputs(n, plen, new, r):
        """Pass r's prompts (new every pass, the same for both engines) and sampling params."""
        return batch_prompts(n, plen, V, r), SamplingParams(max_tokens=new, temperature=0.0, ignore_eos=True)

    rows = []
    for job, n, plen, new in jobs:
        prompts, sp = job_inputs(n, plen, new, 0)
        for mode in modes:
            llms[mode].generate(prompts, sp)  # untimed: every bucket this job needs is warm
        stats = {m: dict(walls=[], idle=[], idle_s=[], iters=[], host=[], tokens=None) for m in modes}
        events = compile_events()
        for rep in range(args.repeats):
            prompts, sp = job_inputs(n, plen, new, rep + 1)
            for mode in (modes if rep % 2 == 0 else reversed(list(modes))):
                eng = llms[mode].engine
                eng.executor.timeline.reset()
                it0 = eng.num_iterations
                t0 = time.perf_counter()
                outs = llms[mode].generate(prompts, sp)
                wall = time.perf_counter() - t0
                frac, idle_s, _ = eng.executor.timeline.idle_fraction()
                st = stats[mode]
                st["walls"].append(wall)
                st["idle"].append(frac)
                st["idle_s"].append(idle_s)
                st["iters"].append(eng.num_iterations - it0)
                st["host"].append(eng.executor.timeline.host_summary())
                st["tokens"] = [o.token_ids for o in outs]
            log(f"{job} round {rep + 1}: " + ", ".join(
                f"{m} {stats[m]['walls'][-1]:.2f} s idle {100 * stats[m]['idle'][-1]:.1f}%" for m in modes))
        timed_compiles = compile_events() - events
        base = statistics.median(stats["wait for each step"]["walls"])
        for mode in modes:
            st = stats[mode]
            med = statistics.median(st["walls"])
            rows.append(dict(job=job, mode=mode, median_s=med, walls_s=st["walls"],
                             output_tokens_per_s=n * new / med, speedup=base / med,
                             device_idle_fraction=statistics.median(st["idle"]), idle_fractions=st["idle"],
                             device_idle_s=statistics.median(st["idle_s"]),
                             iterations=statistics.median(st["iters"]),
                             host_ms={k: statistics.median(h[k] for h in st["host"]) for k in st["host"][0]},
                             compiles_while_timed=timed_compiles,
                             same_tokens=st["tokens"] == stats["wait for each step"]["tokens"]))
    for llm in llms.values():
        llm.close()
    name = args.name or ("host_overlap_small" if args.small else "host_overlap")
    report = dict(run_info("host_overlap.py", argv, load_before), model=cfg, shapes=shapes, repeats=args.repeats,
                  rows=rows, start_s=start_s)
    lines = ["# Device idle between iterations: waiting for each step vs asynchronous scheduling", "",
             f"{provenance(report)} Model: random Llama, "
             f"{cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, vocab {V}, float32; default "
             f"policy, max_num_batched_tokens 512, max_num_seqs 32, each job's buckets compiled by an untimed pass of it "
             f"(compiles during the timed rounds: {sum({r['job']: r['compiles_while_timed'] for r in rows}.values())}). Median "
             f"of {args.repeats} rounds, the two engines alternating (order reversed every other round). "
             "Device idle: time the device waited for the host between ticks (each tick's launch and "
             "finish recorded by `DeviceTimeline`, GIL switch interval 0.1 ms so finishes are stamped "
             "within ~0.1 ms), as a share of the job's span. Host ms a step: the median over the steps of "
             "the host's own work per step (`HOST_PHASES` but the wait; recorded with asynchronous "
             "scheduling only).", "",
             "| job | engine | median s | out tok/s | x waiting | device idle | idle s | iterations | host ms a step "
             "| same tokens |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        host = f"{r['host_ms']['host']:.2f}" if r["host_ms"] else "n/a"  # recorded with async scheduling only
        lines.append(f"| {r['job']} | {r['mode']} | {r['median_s']:.2f} | {r['output_tokens_per_s']:.0f} | "
                     f"{r['speedup']:.2f} | {100 * r['device_idle_fraction']:.1f}% | {r['device_idle_s']:.2f} | "
                     f"{r['iterations']:.0f} | {host} | {'yes' if r['same_tokens'] else 'NO'} |")
    write_results(args.out, name, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
