"""A repeated long prompt with prefix caching: time to first token of the first and the repeat.

    python benchmarks/prefix_reuse.py                  # 16K-token documents, 31M random Llama
    python benchmarks/prefix_reuse.py --small          # seconds: a code-path check

Data flow: a random-weight Llama (benchmarks/dummy_models.LLAMA_31M, float32) served through
`LLM(load_format="dummy")` with the defaults (prefix caching on) -> per round a new random
document of `--tokens` tokens -> (1) the document alone, (2) the same document again, (3) the
document's first 3/4 with a new quarter after it -> each request's TTFT (max_tokens 1, one at a
time; after an untimed round and the background compiles) and `metrics.num_cached_tokens` -> the repeat's TTFT over the first's
-> results/prefix_reuse[_small].json and .md with the machine and load average.
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


def main(argv=None) -> int:
    from medha_jax import LLM, SamplingParams

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--small", action="store_true", help="tiny model and prompt: a code-path check")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/medha_prefix_reuse"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.small:
        args.tokens = 512
    cfg = TINY if args.small else {**LLAMA_31M, "max_position_embeddings": 32768}  # room for a 16K document
    model_dir = write_model_dir(args.workdir, "tiny" if args.small else "llama-31m-32k", cfg)
    V = cfg["vocab_size"]
    n = args.tokens
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    llm = LLM(model=str(model_dir), load_format="dummy", dtype="float32", max_model_len=n + 1024,
              num_pages=-(-(3 * n + 2048) // 16), profile_dir=str(args.workdir / "profiles"))
    start_s = time.perf_counter() - t0
    sp = SamplingParams(max_tokens=1, temperature=0.0)
    log = lambda m: print(f"[prefix {time.strftime('%H:%M:%S')}] {m}", flush=True)  # noqa: E731
    log(f"engine up in {start_s:.1f} s")
    rng = random.Random(0)
    rows = []
    for rnd in range(-1, args.rounds):  # round 0: untimed, compiles what the requests need
        if rnd == 0:
            llm.engine.executor.wait_compiled(3600)  # no background compile shares the CPU from here
            rows.clear()
        doc = [rng.randrange(256, V) for _ in range(n)]
        shared = doc[: 3 * n // 4] + [rng.randrange(256, V) for _ in range(n - 3 * n // 4)]
        for name, prompt in (("first", doc), ("repeat", doc), ("3/4 shared", shared)):
            out = llm.generate([prompt], sp)[0]
            m = out.metrics
            rows.append(dict(round=rnd + 1, request=name, ttft_s=m.ttft, cached_tokens=m.num_cached_tokens,
                             prompt_tokens=len(prompt)))
            log(f"round {rnd + 1} {name}: TTFT {m.ttft:.2f} s, {m.num_cached_tokens} cached of {len(prompt)}")
    llm.close()
    med = {k: statistics.median(r["ttft_s"] for r in rows if r["request"] == k) for k in ("first", "repeat", "3/4 shared")}
    name = "prefix_reuse_small" if args.small else "prefix_reuse"
    report = dict(run_info("prefix_reuse.py", argv, load_before), model=cfg, tokens=n, start_s=start_s, rows=rows,
                  median_ttft_s=med, repeat_over_first=med["repeat"] / med["first"])
    lines = [f"# Prefix caching: a repeated {n}-token prompt", "",
             f"{provenance(report)} Model: random Llama, "
             f"{cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, float32, `LLM` defaults (prefix "
             f"caching on). Per round a new random document; requests one at a time, max_tokens 1.", "",
             "| round | request | TTFT | cached tokens | prompt tokens |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['round']} | {r['request']} | {r['ttft_s']:.3f} s | {r['cached_tokens']} | {r['prompt_tokens']} |")
    lines += ["", f"Median TTFT: first {med['first']:.3f} s, repeat {med['repeat']:.3f} s "
              f"(**{report['repeat_over_first']:.3f}x** the first; goal <= 0.1x), 3/4 shared {med['3/4 shared']:.3f} s."]
    write_results(args.out, name, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
