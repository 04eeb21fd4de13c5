"""Swap instead of recompute: a long prompt preempted under KV-memory pressure, host tier on vs off.

    python benchmarks/swap.py                 # an 8K-token document + 24 shorter prompts, 31M random Llama
    python benchmarks/swap.py --small         # seconds: a code-path check

Data flow: a random-weight Llama (benchmarks/dummy_models.LLAMA_31M, float32) served by two engines
that differ only in `swap_space_gb` (the default, 4 GB of host memory, vs 0: recompute) -> per
round new random prompts, the same for both: the `--tokens` document alone until half of it is
prefilled, then `--shorts` prompts of 300 tokens at once, 64 new tokens each, greedy, srpt with
64-token chunks (deterministic: the same schedule every round) on a page pool that holds the
document but not everything at once, so the shorter prompts' decodes preempt the document's
prefill and their pages evict its KV before it resumes -> per run: wall time, when the document
finished, preemptions, tokens computed (from the iteration records) beyond one pass over every
position (= recomputed), pages copied to and from host memory -> rounds interleaved (after an
untimed round) -> results/swap[_small].json and .md with the machine and load average.
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

from dummy_models import LLAMA_31M, TINY, write_model_dir  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CONFIGS = {"swap (default)": None, "recompute (swap_space_gb=0)": 0.0}


def _run(eng, doc, shorts, sp):
    """The document alone until half of it is prefilled, then the shorter prompts at once; every
    request's final output, the document's first."""
    req = eng.add_request(doc, sp)
    finals = {}
    while req.num_computed_tokens < len(doc) // 2:
        finals.update((o.request_id, o) for o in eng.step() if o.finished)
    ids = [req.request_id] + [eng.add_request(p, sp).request_id for p in shorts]
    while eng.has_unfinished():
        finals.update((o.request_id, o) for o in eng.step() if o.finished)
    return [finals[i] for i in ids]


def main(argv=None) -> int:
    from medha_jax import LLM, SamplingParams

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--shorts", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scheduler", default="srpt",
                    help="srpt (default) runs the later, shorter prompts first: their decodes preempt the "
                         "document's prefill and their pages evict its KV before it resumes")
    ap.add_argument("--small", action="store_true", help="tiny model and prompts: a code-path check")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/medha_swap"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.small:
        args.tokens, args.shorts, args.rounds = 1024, 6, 1
    cfg = TINY if args.small else {**LLAMA_31M, "max_position_embeddings": 16384}
    model_dir = write_model_dir(args.workdir, "tiny-swap" if args.small else "llama-31m-16k", cfg)
    V, n, new = cfg["vocab_size"], args.tokens, 64
    rng = random.Random(0)

    def workload():  # new random prompts per round: nothing of an earlier round is in the prefix cache
        return ([rng.randrange(256, V) for _ in range(n)],
                [[rng.randrange(256, V) for _ in range(300)] for _ in range(args.shorts)])

    pages = -(-(n + new) // 16) + 1  # the document alone fits; with the others it does not
    sp = SamplingParams(max_tokens=new, temperature=0.0, ignore_eos=True)
    log = lambda m: print(f"[swap {time.strftime('%H:%M:%S')}] {m}", flush=True)  # noqa: E731
    load_before = os.getloadavg()
    llms = {}
    for name, gb in CONFIGS.items():
        llms[name] = LLM(model=str(model_dir), load_format="dummy", dtype="float32", scheduler=args.scheduler,
                         max_model_len=n + 1024, num_pages=pages, max_num_batched_tokens=64, swap_space_gb=gb,
                         profile_dir=str(args.workdir / "profiles"), warmup=False)  # the untimed round compiles
    rows, same = [], True
    for rnd in range(-1, args.rounds):  # round 0: untimed (compiles the buckets and swap copies it needs)
        doc, shorts = workload()
        once = sum(len(p) + new - 1 for p in [doc, *shorts])  # every position computed once (the last token is not fed)
        tokens = {}
        for name, llm in llms.items():
            eng = llm.engine
            sched, st0 = eng.scheduler, eng.stats()
            rec0, pre0 = len(sched.records), sched.num_preemptions
            t0 = time.perf_counter()
            outs = _run(eng, doc, shorts, sp)
            wall = time.perf_counter() - t0
            st = eng.stats()
            computed = sum(q for r in list(sched.records)[rec0:] for q, _ in r.composition.seqs)
            tokens[name] = [o.token_ids for o in outs]
            if rnd < 0:
                continue
            rows.append(dict(round=rnd + 1, config=name, wall_s=wall, preemptions=sched.num_preemptions - pre0,
                             recomputed_tokens=computed - once, pages_out=st.swapped_out_pages - st0.swapped_out_pages,
                             pages_in=st.swapped_in_pages - st0.swapped_in_pages,
                             document_done_s=outs[0].metrics.finish_time - outs[0].metrics.arrival_time))
            log(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in rows[-1].items()))
        same = same and len({tuple(map(tuple, t)) for t in tokens.values()}) == 1
    for llm in llms.values():
        llm.close()
    med = {name: {k: statistics.median(r[k] for r in rows if r["config"] == name)
                  for k in ("wall_s", "document_done_s", "recomputed_tokens", "preemptions")} for name in CONFIGS}
    out_name = "swap_small" if args.small else "swap"
    report = dict(run_info("swap.py", argv, load_before), model=cfg, tokens=n, shorts=args.shorts, num_pages=pages,
                  rows=rows, medians=med, same_tokens=same)
    lines = [f"# Swap instead of recompute: a {n}-token prompt preempted under KV-memory pressure", "",
             f"{provenance(report)} Model: random Llama, {cfg['num_hidden_layers']} layers, hidden "
             f"{cfg['hidden_size']}, float32. The {n}-token document alone until half of it is prefilled, then "
             f"{args.shorts} x 300-token prompts at once, {new} new tokens each (greedy), {args.scheduler} with "
             "64-token chunks, "
             f"{pages} pages of 16 tokens (the document alone fits). New prompts per round, the same for both "
             "configurations; rounds interleaved after an untimed one.", "",
             "| round | config | wall | document done after | preemptions | tokens recomputed | pages to host | "
             "pages from host |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['round']} | {r['config']} | {r['wall_s']:.2f} s | {r['document_done_s']:.2f} s | "
                     f"{r['preemptions']} | {r['recomputed_tokens']} | {r['pages_out']} | {r['pages_in']} |")
    a, b = (med[k] for k in CONFIGS)
    lines += ["", f"Medians: swap {a['wall_s']:.2f} s wall, document done after {a['document_done_s']:.2f} s, "
              f"{a['recomputed_tokens']:.0f} tokens recomputed; recompute {b['wall_s']:.2f} s, "
              f"{b['document_done_s']:.2f} s, {b['recomputed_tokens']:.0f} tokens recomputed "
              f"(wall: swap takes {a['wall_s'] / b['wall_s']:.2f}x recompute's time). "
              f"Same greedy tokens in both, every round: {same}."]
    write_results(args.out, out_name, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
