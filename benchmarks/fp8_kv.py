"""fp8 KV cache vs the model's own dtype: agreement, log-probability drift, bytes, and CPU speed.

    python benchmarks/fp8_kv.py

Data flow:
- quality: tests/data/tiny-llama3-trained (a tiny Llama trained on this repo's text) served by
  `LLM` with every (weights dtype, kv_cache_dtype) pair -> the f32/auto engine's greedy
  continuations of golden.json's 5 prompts (32 tokens) -> (a) teacher-forced: the greedy token
  and its logprob after every prefix of those continuations (160 positions), per engine;
  (b) free-running greedy continuations -> per pair of engines: positions that agree, the drift
  of the shared tokens' logprobs, and positions before each prompt's first divergence;
- bytes: `kv_cache_bytes_per_page` per token for each dtype, and what 1 GB of KV holds;
- speed: a random 31M Llama (benchmarks/dummy_models.LLAMA_31M), bf16 weights, one 2048-token
  prompt + 64 greedy tokens on a bf16 and an fp8 cache, rounds interleaved after an untimed one
-> results/fp8_kv.json and .md with the machine and load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dummy_models import LLAMA_31M, write_model_dir  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CKPT = Path(__file__).resolve().parent.parent / "tests" / "data" / "tiny-llama3-trained"
ENGINES = [("float32", "auto"), ("float32", "fp8_e4m3"), ("bfloat16", "auto"), ("bfloat16", "fp8_e4m3")]
PAIRS = [(("bfloat16", "auto"), ("bfloat16", "fp8_e4m3")), (("float32", "auto"), ("float32", "fp8_e4m3")),
         (("float32", "auto"), ("bfloat16", "auto"))]
NEW = 32


def _name(e):
    return f"{e[0]} weights, {'fp8' if e[1] == 'fp8_e4m3' else e[0]} cache"


def quality() -> dict:
    from medha_jax import LLM, SamplingParams

    golden = json.loads((CKPT / "golden.json").read_text())
    prompts = [p["token_ids"] for p in golden["prompts"]]
    greedy = SamplingParams(max_tokens=NEW, temperature=0.0, ignore_eos=True)
    one = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    forced, free, conts = {}, {}, None
    for e in ENGINES:
        llm = LLM(model=str(CKPT), scheduler="fcfs", dtype=e[0], kv_cache_dtype=e[1], max_model_len=2048,
                  num_pages=512, page_size=8, max_num_batched_tokens=256, max_num_seqs=8, warmup=False)
        free[e] = [o.token_ids for o in llm.generate(prompts, greedy)]
        conts = conts or free[e]  # the first engine (f32 weights and cache) leads every prefix
        forced[e] = []
        for p, c in zip(prompts, conts):
            llm.generate([p], one)
            forced[e] += [(o.token_ids[0], o.logprobs[0]) for o in llm.generate([p + c[:k] for k in range(NEW)], one)]
        llm.close()
    rows = []
    for a, b in PAIRS:
        agree = [x[0] == y[0] for x, y in zip(forced[a], forced[b])]
        drift = [abs(x[1] - y[1]) for x, y in zip(forced[a], forced[b]) if x[0] == y[0]]
        first = [next((i for i, (x, y) in enumerate(zip(s, t)) if x != y), NEW) for s, t in zip(free[a], free[b])]
        rows.append(dict(a=_name(a), b=_name(b), agree=sum(agree), positions=len(agree),
                         drift_mean=statistics.mean(drift), drift_max=max(drift), first_divergence=first))
    return dict(rows=rows, margins=[p["min_margin"] for p in golden["prompts"]],
                held_out_loss=golden["held_out_loss"])


def memory() -> list[dict]:
    import jax
    import jax.numpy as jnp

    from medha_jax.checkpoint.hf_config import parse_hf_config
    from medha_jax.mesh import make_mesh
    from medha_jax.model import kv_cache_bytes_per_page
    from pallas_kernels import kv_quant

    mesh = make_mesh({"tp": 1}, devices=jax.devices()[:1])
    out = []
    for label, hf in (("tiny-llama3-trained", json.loads((CKPT / "config.json").read_text())), ("llama-31m", LLAMA_31M)):
        cfg = parse_hf_config(hf)
        per = {d: kv_cache_bytes_per_page(cfg, mesh, 16, dt) / 16 for d, dt in
               (("float32", jnp.float32), ("bfloat16", jnp.bfloat16), ("fp8_e4m3", kv_quant.FP8))}
        out.append(dict(model=label, bytes_per_token=per, tokens_per_gb={d: int(1e9 // b) for d, b in per.items()}))
    return out


def speed(workdir: Path, rounds: int) -> list[dict]:
    from medha_jax import LLM, SamplingParams

    model_dir = write_model_dir(workdir, "llama-31m", LLAMA_31M)
    V = LLAMA_31M["vocab_size"]
    llms = {kv: LLM(model=str(model_dir), load_format="dummy", dtype="bfloat16", kv_cache_dtype=kv,
                    max_model_len=4096, num_pages=512, warmup=False, scheduler="fcfs",
                    profile_dir=str(workdir / "profiles")) for kv in ("auto", "fp8_e4m3")}
    sp = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
    rng = random.Random(0)
    rows = []
    for rnd in range(rounds + 1):  # round 0 compiles what the request needs: untimed
        prompt = [rng.randrange(256, V) for _ in range(2048)]
        for kv, llm in llms.items():
            t0 = time.perf_counter()
            out = llm.generate([prompt], sp)[0]
            total = time.perf_counter() - t0
            if rnd:
                rows.append(dict(round=rnd, kv_cache_dtype=kv, ttft_s=out.metrics.ttft, total_s=total,
                                 tpot_s=(total - out.metrics.ttft) / 63))
    for llm in llms.values():
        llm.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/medha_fp8_kv"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    q, mem, spd = quality(), memory(), speed(args.workdir, args.rounds)
    report = dict(run_info("fp8_kv.py", argv, load_before), quality=q, memory=mem, speed=spd)
    lines = ["# fp8 KV cache (`kv_cache_dtype=\"fp8_e4m3\"`)", "", provenance(report), "",
             f"## Quality: `tests/data/tiny-llama3-trained` (held-out loss {q['held_out_loss']:.2f} nats/token; "
             f"its greedy continuations' smallest top-1/top-2 margins: "
             f"{', '.join(f'{m:.3f}' for m in q['margins'])} nats)", "",
             "Teacher-forced: the greedy token after each of 160 prefixes (5 prompts x 32 continuation tokens); "
             "logprob drift over the positions where both pick the same token. Free-running: positions of "
             f"each prompt's {NEW}-token continuation before the first token that differs.", "",
             "| engine A | engine B | same greedy token | logprob drift mean / max | free-running: before first divergence |",
             "|---|---|---|---|---|"]
    for r in q["rows"]:
        fd = r["first_divergence"]
        lines.append(f"| {r['a']} | {r['b']} | {r['agree']} / {r['positions']} ({r['agree'] / r['positions']:.1%}) | "
                     f"{r['drift_mean']:.3f} / {r['drift_max']:.3f} nats | {fd} ({sum(fd) / (NEW * len(fd)):.0%}) |")
    lines += ["", "## Bytes of KV per token (one device, K and V, scales included)", "",
              "| model | float32 | bfloat16 | fp8_e4m3 | fp8 / bf16 | tokens per GB, bf16 -> fp8 |", "|---|---|---|---|---|---|"]
    for m in mem:
        b = m["bytes_per_token"]
        lines.append(f"| {m['model']} | {b['float32']:.0f} | {b['bfloat16']:.0f} | {b['fp8_e4m3']:.1f} | "
                     f"{b['fp8_e4m3'] / b['bfloat16']:.3f} | {m['tokens_per_gb']['bfloat16']:,} -> "
                     f"{m['tokens_per_gb']['fp8_e4m3']:,} |")
    lines += ["", "## CPU speed: random 31M Llama, bf16 weights, 2048-token prompt + 64 tokens, one request", "",
              "| round | KV cache | TTFT | time per output token | total |", "|---|---|---|---|---|"]
    for r in spd:
        lines.append(f"| {r['round']} | {r['kv_cache_dtype']} | {r['ttft_s']:.3f} s | {r['tpot_s'] * 1e3:.1f} ms | "
                     f"{r['total_s']:.2f} s |")
    med = {kv: statistics.median(r["total_s"] for r in spd if r["kv_cache_dtype"] == kv) for kv in ("auto", "fp8_e4m3")}
    lines += ["", f"Median total: bf16 cache {med['auto']:.2f} s, fp8 cache {med['fp8_e4m3']:.2f} s "
              f"({med['fp8_e4m3'] / med['auto']:.2f}x). A CPU has no fp8 arithmetic: every read converts."]
    write_results(args.out, "fp8_kv", report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
