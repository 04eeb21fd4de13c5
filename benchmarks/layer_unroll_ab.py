"""The engine with its layer loop as a scan (layer_unroll=1, the default) and unrolled, side by
side: compile time and the 31M model's offline job, one process per configuration, alternating.

    python benchmarks/layer_unroll_ab.py --model-dir /tmp/medha_vs_hf/llama-31m-hf   # ~20 min on the VM

Why: unrolling lets a GPU's matmul library read each layer's weights in place instead of a copy the
scan's slice makes (benchmarks/decode_profile_gpu.py measures that on a GPU); on the CPU it costs
compile time, and this says how much and what it does to the step.

Data flow: for round r in 1..R, for each unroll value (order reversed every other round): a fresh
process (`--worker`) -> LLM(model_dir, float32, layer_unroll=U, its own persistent compilation cache
under --workdir, so round 1 compiles and later rounds load) -> start-up time, first job (16 x 512 +
64 greedy), until every bucket is compiled -> 2 timed jobs on new prompts -> one JSON line -> per
configuration: compile times of round 1, the timed jobs' median over every round, first tokens
(must be equal) -> <out>/layer_unroll_ab_cpu.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dummy_models import batch_prompts  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def worker(model_dir: str, unroll: int, cache: str, round_no: int) -> dict:
    from medha_jax import LLM, SamplingParams
    t0 = time.perf_counter()
    llm = LLM(model=model_dir, dtype="float32", layer_unroll=unroll, compilation_cache_dir=cache)
    start = time.perf_counter() - t0
    vocab = llm.engine.model_config.vocab_size
    sp = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
    t = time.perf_counter()
    llm.generate(batch_prompts(16, 512, vocab, 0), sp)
    first = time.perf_counter() - t
    llm.engine.executor.wait_compiled(3600)
    compiled = time.perf_counter() - t0
    runs, outs = [], None
    for k in range(2):
        t = time.perf_counter()
        outs = llm.generate(batch_prompts(16, 512, vocab, 10 * round_no + k + 1), sp)
        runs.append(time.perf_counter() - t)
    return dict(unroll=unroll, round=round_no, start_s=start, first_job_s=first, all_compiled_s=compiled, runs=runs,
                first_tokens=[o.token_ids[:8] for o in outs[:2]])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", required=True, help="an HF Llama directory (vs_hf.py makes the 31M one)")
    ap.add_argument("--unroll", default="1,8", help="layer_unroll values (8 = every layer of the 31M model)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/medha_layer_unroll"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(args.model_dir, args.worker, str(args.workdir / f"xla_u{args.worker}"), args.round)))
        return 0
    values = [int(v) for v in args.unroll.split(",")]
    load_before = os.getloadavg()
    rows = []
    for r in range(1, args.rounds + 1):
        for u in (values if r % 2 else values[::-1]):
            cmd = [sys.executable, __file__, "--model-dir", args.model_dir, "--worker", str(u), "--round", str(r),
                   "--workdir", str(args.workdir)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"[layer_unroll_ab] round {r} unroll {u}: " + json.dumps({k: rows[-1][k] for k in
                  ("start_s", "first_job_s", "all_compiled_s", "runs")}), flush=True)
    summary = []
    for u in values:
        mine = [x for x in rows if x["unroll"] == u]
        first = next(x for x in mine if x["round"] == 1)
        summary.append(dict(unroll=u, cold_all_compiled_s=first["all_compiled_s"], cold_first_job_s=first["first_job_s"],
                            warm_all_compiled_s=statistics.median(x["all_compiled_s"] for x in mine if x["round"] > 1)
                            if args.rounds > 1 else None,
                            job_median_s=statistics.median(t for x in mine for t in x["runs"]),
                            job_runs=[t for x in mine for t in x["runs"]], first_tokens=first["first_tokens"]))
    same = all(s["first_tokens"] == summary[0]["first_tokens"] for s in summary)
    report = dict(run_info("layer_unroll_ab.py", argv, load_before), rows=rows, summary=summary, same_tokens=same)
    lines = ["# The layer loop as a scan vs unrolled, on the CPU", "", f"{provenance(report)}", "",
             f"Model {args.model_dir}, float32, every other setting default; offline job 16 x 512 + 64 greedy; "
             f"{args.rounds} rounds, one process per configuration, alternating; round 1 compiles into an empty "
             f"cache, later rounds load it. Same first tokens: {same}.", "",
             "| layer_unroll | every bucket compiled, cold (s) | first job, cold (s) | warm restart, every bucket (s) "
             "| offline job median (s) | every job (s) |", "|---|---|---|---|---|---|"]
    for s in summary:
        warm = f"{s['warm_all_compiled_s']:.1f}" if s["warm_all_compiled_s"] is not None else "-"
        lines.append(f"| {s['unroll']} | {s['cold_all_compiled_s']:.1f} | {s['cold_first_job_s']:.1f} | {warm} | "
                     f"{s['job_median_s']:.2f} | {', '.join(f'{t:.2f}' for t in s['job_runs'])} |")
    write_results(args.out, "layer_unroll_ab_cpu", report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
