"""What chunking costs a long prefill: one prompt, fixed chunk sizes vs the whole prompt at once.

    python benchmarks/chunked_prefill.py                # 32,704 tokens, chunks 512/256/128/96/64, demo model
    python benchmarks/chunked_prefill.py --small        # seconds: a code-path check

Why: under a time budget the packer shrinks a long prompt's chunks as its KV grows (the convoy
benchmark's 32K prompt ends in 64-96-token chunks at t_target 0.1 s on this CPU), and every chunk
reads the whole KV so far. This measures the price of that alone, with no other traffic, so the
convoy's "long request within 1.3x of non-chunked FCFS" can be split into what chunking costs and
what serving the shorts beside it costs.

Data flow: the demo model (`LLM(model="demo")`, the convoy benchmark's model) with the convoy
benchmark's engine shapes (pages of 64, 1024 pages, 32K max length, page-table bucket 512) -> one
engine per configuration: `fcfs_nonchunked` (the whole prompt in one iteration) and `fcfs` with
`max_num_batched_tokens` = each chunk size -> per round a new random prompt of `--tokens` tokens
(prefix caching off), max_tokens=1 -> seconds to the first token and the iteration count ->
rounds interleaved across configurations (after one untimed round each) -> medians and the ratio
to the whole prompt -> results/chunked_prefill_cpu[_small].json and .md with the machine and load.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _engine(chunk: int, max_len: int, num_pages: int):
    from medha_jax.llm import LLM

    shapes = dict(page_size=64, num_pages=num_pages, max_model_len=max_len, max_num_seqs=16, min_seq_bucket=16,
                  min_page_bucket=-(-max_len // 64), min_token_bucket=32, enable_prefix_caching=False,
                  background_compile=False)
    if chunk == 0:
        return LLM("demo", policy="fcfs_nonchunked", max_num_batched_tokens=512, **shapes)
    return LLM("demo", policy="fcfs", max_num_batched_tokens=chunk, **shapes)


def _prefill(llm, prompt) -> tuple[float, int]:
    """Seconds to the first token of `prompt` alone, and the iterations it took."""
    from medha_jax.sampling_params import SamplingParams

    llm.engine.scheduler.records.clear()
    t0 = time.perf_counter()
    llm.generate([prompt], SamplingParams(max_tokens=1, temperature=0.0))
    wall = time.perf_counter() - t0
    return wall, len(llm.engine.scheduler.records)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=32704)
    ap.add_argument("--chunks", default="512,256,128,96,64", help="chunk sizes (tokens); the whole prompt is always run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="a 2K-token prompt, chunks 256/64, 2 rounds")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    if args.small:
        args.tokens, args.chunks, args.rounds = 2000, "256,64", 2
    chunks = [0] + [int(c) for c in args.chunks.split(",")]
    max_len = 1 << (args.tokens + 64 - 1).bit_length()
    load_before = os.getloadavg()
    rng = random.Random(0)
    engines = {c: _engine(c, max_len, 2 * max_len // 64) for c in chunks}
    times: dict[int, list[float]] = {c: [] for c in chunks}
    iters: dict[int, int] = {}
    for r in range(args.rounds + 1):  # round 0: untimed (first-call costs)
        order = chunks if r % 2 == 0 else chunks[::-1]
        for c in order:
            prompt = [rng.randrange(5, 500) for _ in range(args.tokens)]
            wall, n = _prefill(engines[c], prompt)
            if r > 0:
                times[c].append(wall)
                iters[c] = n
            print(f"round {r} chunk {c or 'whole'}: {wall:.2f} s, {n} iterations", flush=True)
    for llm in engines.values():
        llm.close()
    med = {c: statistics.median(v) for c, v in times.items()}
    report = {"tokens": args.tokens, "chunks": chunks, "rounds": args.rounds,
              "runs": [{"chunk": c, "seconds": times[c], "median_s": med[c], "iterations": iters[c]} for c in chunks],
              **run_info("chunked_prefill.py", argv, load_before)}
    lines = [f"# Chunked prefill of one {args.tokens:,}-token prompt: chunk size vs the whole prompt", "",
             provenance(report), "",
             "Demo model (4 layers, 8 heads, 2 KV heads, head_dim 16, float32), the convoy benchmark's engine shapes, "
             "XLA attention path; one prompt alone, max_tokens=1, prefix caching off; "
             f"median of {args.rounds} interleaved rounds after an untimed one.", "",
             "| chunk (tokens) | iterations | time to first token | vs whole prompt | every round |",
             "|---|---|---|---|---|"]
    for c in chunks:
        lines.append(f"| {c or 'whole prompt'} | {iters[c]} | {med[c]:.2f} s | {med[c] / med[0]:.2f}x | "
                     + ", ".join(f"{t:.2f}" for t in times[c]) + " |")
    write_results(Path(args.out), "chunked_prefill_cpu_small" if args.small else "chunked_prefill_cpu", report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
