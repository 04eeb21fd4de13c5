"""How many memory mappings one compiled shape bucket holds, and so how many fit in one process.

    python benchmarks/mappings_per_bucket.py [--buckets 6] [--out DIR]

Data flow: LLM(model="demo", small ladders, warmup=False) -> count /proc/self/maps lines -> compile
`--buckets` of its buckets one at a time (`Executor.compile_bucket`, an empty compilation cache so
each is a real compile) -> mappings each compile added, by kind (code, read-only, read-write) ->
with vm.max_map_count: buckets that fit in one process (less map_budget.RESERVE) ->
results/mappings_per_bucket.{json,md} with the machine. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def mapping_kinds() -> collections.Counter:
    """This process's mappings by permission string (r-xp: code, r--p: read-only, rw-p: data)."""
    with open("/proc/self/maps") as f:
        return collections.Counter(line.split()[1] for line in f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--buckets", type=int, default=6)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default="mappings_per_bucket")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="medha_maps_")  # real compiles
    from medha_jax import LLM
    from medha_jax.executor.map_budget import BUDGET, RESERVE

    llm = LLM(model="demo", scheduler="fcfs", num_devices=1, max_model_len=256, num_pages=64, page_size=16,
              max_num_batched_tokens=64, max_num_seqs=8, min_token_bucket=16, min_page_bucket=4, warmup=False)
    ex = llm.engine.executor
    rows = []
    for b in ex.ladders.all_buckets()[: args.buckets]:
        before, t0 = mapping_kinds(), time.perf_counter()
        ex.compile_bucket(b)
        after = mapping_kinds()
        added = {k: after[k] - before[k] for k in set(after) | set(before)}
        rows.append(dict(bucket=[b.tokens, b.seqs, b.pages], seconds=time.perf_counter() - t0,
                         added=sum(added.values()), by_kind={k: v for k, v in sorted(added.items()) if v}))
        print(f"bucket {b}: +{rows[-1]['added']} mappings {rows[-1]['by_kind']} in {rows[-1]['seconds']:.1f} s",
              flush=True)
    per = statistics.median(r["added"] for r in rows)
    limit = BUDGET.limit
    fit = int(limit * (1 - RESERVE) / per) if limit else None
    llm.close()
    report = dict(run_info("mappings_per_bucket.py", argv, load_before), rows=rows, median_per_bucket=per,
                  max_map_count=limit, buckets_per_process=fit)
    lines = ["# Memory mappings per compiled shape bucket (XLA:CPU)", "",
             f"{provenance(report)} The demo model's engine step (every kernel XLA:CPU compiles for it is "
             "mapped as code, read-only and data pages of its own), compiled into an empty compilation cache.", "",
             "| bucket (tokens, seqs, pages) | mappings added | by kind | compile s |", "|---|---|---|---|"]
    lines += [f"| {tuple(r['bucket'])} | {r['added']} | {r['by_kind']} | {r['seconds']:.1f} |" for r in rows]
    lines += ["", f"Median {per:.0f} mappings a bucket; vm.max_map_count here {limit}: about {fit} compiled buckets "
              f"per process (all engines in it together), less what the process maps besides."]
    write_results(args.out, args.name, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
