"""What a long prompt's chunk schedule costs on the executor: largest chunk vs whole attention tiles.

    python benchmarks/chunk_schedule_cost.py [--profile benchmarks/results/convoy_load0.2_tile_budget.json]
        [--t-target 0.18] [--correction 0.8]

Data flow:
  the runtime profile (a convoy results JSON, which records the profile it ran with, or a profile
  file measured at the convoy's shapes) -> predictor x correction (the engine's
  online correction on this machine: it scales every prediction) + t_target
  -> the packer's two chunk rules walked over one L-token prompt alone: `chunking.largest_chunk`
     (the largest chunk that fits) and `chunking.budget_chunk` (cut back to whole 128-query tiles
     where that gives more tokens per predicted second) -> two lists of (chunk, cached keys)
  -> every distinct chunk timed alone on the convoy's engine shapes (demo model,
     `runtime_profiler.measure`: a warm-up pass, then shuffled rounds, medians), plus a per-token
     table of chunk sizes 128-512 at 0-30K cached keys
  -> the sum per schedule -> results/chunk_schedule_cost.json, .md (machine, commit, load).
Timing each chunk alone, shuffled with the other schedule's, leaves out the engine's per-iteration
host work and the VM's minute-to-minute drift that an in-engine A/B of two ~15 s prefills is
swamped by (four interleaved rounds each: medians 15.4 vs 15.6 s, spread 14.4-18.1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from convoy_replay import profile_predictor  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

ENGINE = dict(model="demo", dtype="float32", page_size=64, num_pages=1024, max_model_len=32768, max_num_seqs=16,
              min_seq_bucket=16, min_page_bucket=512, min_token_bucket=32, max_num_batched_tokens=512,
              background_compile=False, policy="fcfs", t_target=1.0)  # the convoy benchmark's shapes
CHUNK = dict(granularity=32, min_chunk=32, max_chunk=512, accept_within=0.0)


def schedule(rule, pred, correction: float, t_target: float, length: int, limit: int) -> list[tuple[int, int]]:
    """(chunk tokens, cached keys) of one prompt prefilled alone under `rule`."""
    kv, out = 0, []
    while kv < length:
        n, _ = rule(lambda q: pred.chunk_time(q, kv) * correction, length - kv, t_target, limit=limit,
                    period=pred.chunk_period, **CHUNK)
        n = n or min(CHUNK["min_chunk"], length - kv)  # nothing fits: the smallest chunk runs anyway
        out.append((n, kv))
        kv += n
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default=str(Path(__file__).resolve().parent / "results" / "convoy_load0.2_tile_budget.json"),
                    help="a convoy results JSON or a runtime profile measured at the convoy's shapes")
    ap.add_argument("--t-target", type=float, default=0.18, help="iteration budget, seconds")
    ap.add_argument("--correction", type=float, default=0.8,
                    help="the engine's online correction (measured / predicted) on this machine")
    ap.add_argument("--length", type=int, default=32704, help="prompt tokens")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args(argv)
    load_before = os.getloadavg()

    from medha_jax import LLM
    from medha_jax.runtime_profiler import measure
    from medha_jax.scheduler import Composition, RuntimePredictor
    from medha_jax.scheduler.chunking import budget_chunk, largest_chunk

    data = json.loads(Path(args.profile).read_text())
    pred = profile_predictor(data["profile"]) if data.get("benchmark") == "convoy" else RuntimePredictor.load(args.profile)
    limit = ENGINE["max_num_batched_tokens"]
    rules = {"largest chunk": largest_chunk, "whole tiles where they pay": budget_chunk}
    scheds = {name: schedule(rule, pred, args.correction, args.t_target, args.length, limit) for name, rule in rules.items()}
    grid = [(q, kv) for kv in (0, 8192, 16384, 24576, 30720) for q in (128, 160, 256, 384, 512)]
    llm = LLM(**ENGINE)  # fcfs: no profile needed
    comps = list(dict.fromkeys(Composition.of([c]) for c in [*grid, *(c for s in scheds.values() for c in s)]))
    timed = dict(measure(llm.engine.executor, comps, vocab_size=llm.engine.model_config.vocab_size,
                         repeats=args.repeats, progress=False))
    t = {c.seqs[0]: v for c, v in timed.items()}
    totals = {name: sum(t[c] for c in s) for name, s in scheds.items()}
    report = run_info("chunk_schedule_cost.py", argv if argv is not None else sys.argv[1:], load_before)
    report.update(settings=vars(args), per_chunk={f"{q}@{kv}": t[(q, kv)] for q, kv in grid},
                  schedules={name: {"chunks": len(s), "device_s": totals[name], "schedule": s} for name, s in scheds.items()})
    base = totals["largest chunk"]
    lines = ["# A long prompt's chunk schedule, timed chunk by chunk", "", provenance(report), "",
             f"{args.length}-token prompt alone, demo model at the convoy's engine shapes; chunks chosen by the "
             f"runtime profile x {args.correction} under a {args.t_target} s budget; each chunk timed alone "
             f"(median of {args.repeats} shuffled rounds).", "",
             "| chunk rule | chunks | device time | vs largest chunk |", "|---|---|---|---|"]
    for name, s in scheds.items():
        lines.append(f"| {name} | {len(s)} | {totals[name]:.2f} s | {totals[name] / base:.3f}x |")
    lines += ["", "Milliseconds per token of one chunk alone:", "",
              "| cached keys | " + " | ".join(f"{q} tokens" for q in (128, 160, 256, 384, 512)) + " |",
              "|---|" + "---|" * 5]
    for kv in (0, 8192, 16384, 24576, 30720):
        lines.append(f"| {kv} | " + " | ".join(f"{t[(q, kv)] / q * 1e3:.3f}" for q in (128, 160, 256, 384, 512)) + " |")
    write_results(Path(args.out), "chunk_schedule_cost", report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
