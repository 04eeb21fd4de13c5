"""Offline batch throughput of each scheduling policy on the same engine shapes, side by side.

    python benchmarks/offline_batch.py                       # default policy vs fcfs, 16 x (512 + 64)
    python benchmarks/offline_batch.py --policies slo,lars,edf,fcfs --repeats 5
    python benchmarks/offline_batch.py --small               # seconds: a code-path check
    python benchmarks/offline_batch.py --max-num-batched-tokens 8448 --name offline_batch_cap8448
                                                             # a token cap that holds the whole batch

Data flow: a random-weight Llama (benchmarks/dummy_models.LLAMA_31M: 8 layers, hidden 512, GQA
8:2, head_dim 64, vocab 8192, float32) served through `LLM(load_format="dummy")` once per policy,
every engine with the same shapes (token cap, sequences, pages, buckets) and the LLM defaults
(batch_mode on) -> one untimed pass of the job per engine (compiles its buckets; a time-budget
policy also measures its runtime profile on first start, under --workdir) -> `repeats` rounds,
each timing every policy once in turn (interleaved, so drifts in machine load hit all alike)
-> median wall time per policy, output tokens/s, the ratio to fcfs, identical greedy outputs
checked, and whether each engine's iterations computed what fcfs's did (the scheduler's iteration
records: a gap between policies with the same batches is the machine's, not the scheduling's)
-> results/offline_batch[_small].json and .md with the machine and its load average.
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
    from medha_jax.scheduler import SchedulerConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policies", default=f"{SchedulerConfig().policy},fcfs",
                    help="comma-separated; the first is reported against fcfs (default: the default policy)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="tiny model and job: a code-path check")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/medha_offline_batch"),
                    help="model dir and runtime profiles (reused between runs)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default=None, help="results file name (default offline_batch[_small])")
    args = ap.parse_args(argv)
    if args.small:
        args.prompts, args.prompt_len, args.new_tokens, args.max_num_batched_tokens = 4, 48, 8, 64
    policies = args.policies.split(",")
    cfg = TINY if args.small else LLAMA_31M
    model_dir = write_model_dir(args.workdir, "tiny" if args.small else "llama-31m", cfg)
    shapes = dict(load_format="dummy", dtype="float32", mesh="tp=1", num_devices=1,
                  max_model_len=args.prompt_len + args.new_tokens + 64, num_pages=args.prompts * 40 + 64,
                  page_size=16, max_num_seqs=args.prompts, max_num_batched_tokens=args.max_num_batched_tokens,
                  min_token_bucket=16, min_seq_bucket=4, min_page_bucket=8, warmup=False,
                  profile_dir=str(args.workdir / "profiles"))
    V = cfg["vocab_size"]
    job = lambda r: batch_prompts(args.prompts, args.prompt_len, V, r)  # noqa: E731 - new prompts every pass
    sp = SamplingParams(max_tokens=args.new_tokens, temperature=0.0, ignore_eos=True)
    log = lambda m: print(f"[offline {time.strftime('%H:%M:%S')}] {m}", flush=True)  # noqa: E731
    load_before = os.getloadavg()
    llms, start_s, outputs = {}, {}, {}
    for p in policies:
        t0 = time.perf_counter()
        llms[p] = LLM(model=str(model_dir), scheduler=p, **shapes)
        llms[p].generate(job(0), sp)  # compiles this engine's buckets
        start_s[p] = time.perf_counter() - t0
        log(f"{p}: engine up and one untimed pass in {start_s[p]:.1f} s")
    walls: dict[str, list[float]] = {p: [] for p in policies}
    for rep in range(args.repeats):
        for p in policies:
            t0 = time.perf_counter()
            outs = llms[p].generate(job(rep + 1), sp)
            walls[p].append(time.perf_counter() - t0)
            outputs[p] = [o.token_ids for o in outs]
        log(f"round {rep + 1}: " + ", ".join(f"{p} {walls[p][-1]:.2f} s" for p in policies))
    gen = args.prompts * args.new_tokens
    rows, schedules = [], {}
    for p in policies:
        med = statistics.median(walls[p])
        eng = llms[p].engine
        # what each iteration computed, sequences in a canonical order (request ids differ between engines)
        schedules[p] = [sorted(r.composition.seqs) for r in eng.scheduler.records]
        rows.append(dict(policy=p, median_s=med, walls_s=walls[p], output_tokens_per_s=gen / med,
                         total_tokens_per_s=(gen + args.prompts * args.prompt_len) / med,
                         iterations=len(eng.scheduler.records), start_and_first_pass_s=start_s[p],
                         same_tokens_as_first=outputs[p] == outputs[policies[0]]))
    fcfs = next((r for r in rows if r["policy"] == "fcfs"), None)
    for r in rows:
        r["throughput_vs_fcfs"] = fcfs["median_s"] / r["median_s"] if fcfs else None
        # the same iterations as fcfs: then a gap between the two is the machine's, not the scheduling's
        r["same_batches_as_fcfs"] = schedules[r["policy"]] == schedules["fcfs"] if fcfs else None
    report = dict(run_info("offline_batch.py", argv, load_before),
                  job=dict(prompts=args.prompts, prompt_len=args.prompt_len, new_tokens=args.new_tokens,
                           model=cfg, shapes=shapes), repeats=args.repeats, rows=rows)
    name = args.name or ("offline_batch_small" if args.small else "offline_batch")
    lines = [f"# Offline batch: {args.prompts} prompts x ({args.prompt_len} in, {args.new_tokens} out)", "",
             f"{provenance(report)} Model: random Llama, "
             f"{cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, vocab {cfg['vocab_size']}, float32. "
             f"Same shapes for every policy (max_num_batched_tokens {args.max_num_batched_tokens}, "
             f"max_num_seqs {args.prompts}); `LLM` defaults otherwise (batch_mode on). Median of "
             f"{args.repeats} interleaved rounds.", "",
             "| policy | median s | out tok/s | total tok/s | x fcfs | iterations (all passes) | same tokens | "
             "same batches as fcfs |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        x = f"{r['throughput_vs_fcfs']:.2f}" if r["throughput_vs_fcfs"] else "-"
        same = "-" if r["same_batches_as_fcfs"] is None else ("yes" if r["same_batches_as_fcfs"] else "no")
        lines.append(f"| {r['policy']} | {r['median_s']:.2f} | {r['output_tokens_per_s']:.0f} | "
                     f"{r['total_tokens_per_s']:.0f} | {x} | {r['iterations']} | "
                     f"{'yes' if r['same_tokens_as_first'] else 'NO'} | {same} |")
    write_results(args.out, name, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
