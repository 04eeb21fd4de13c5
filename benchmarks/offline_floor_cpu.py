"""How fast the CPU offline job of issue 16 could possibly run on this machine: its roofline.

    python benchmarks/offline_floor_cpu.py [--hf-seconds 6.44] [--medha-seconds 5.66] [--name N]
        -> results/offline_floor_cpu.{json,md} (or N.{json,md})

Data flow:
  measured here, float32 under jax.jit (the engine's dtype and compiler for the job):
    matmul throughput at the job's prefill shapes ([512 or 8192 tokens, 512] x the layer weights)
        -> peak GFLOP/s (the best shape)
    read bandwidth: a reduction over a 256 MB array (what a decode step does to weights and KV)
    a decode step's matmuls alone: 16 rows through every layer weight and the lm_head, one jit
        (the rate small-M matmuls actually read weights at here; numpy's BLAS gets the same)
  the job (LLAMA_31M, 16 prompts x 512 tokens, 64 new, greedy) counted from its config:
    prefill FLOPs: 2 x layer params x tokens + causal attention (QK and PV) + 16 lm_head rows
    decode bytes per step: every layer weight + the lm_head + each sequence's K and V so far
  -> floor = prefill FLOPs / peak + 63 steps x bytes / bandwidth (nothing else costs anything)
  -> practical floor: the same with each decode step's matmuls at their measured time (and the
     K/V reads still at the full bandwidth, attention and everything else free)
  -> the most HF's time over medha-jax's could be: HF's measured seconds / each floor, beside the
     measured ratio (defaults: `vs_hf_cpu_sampler.md`, the last vs-HF run; pass a new run's)

A goal above that ceiling cannot be met on this machine by any implementation of the same job.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dummy_models import LLAMA_31M  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PROMPTS, PROMPT_LEN, NEW = 16, 512, 64


def layer_shapes(cfg: dict) -> list[tuple[int, int]]:
    """(in, out) of every weight matrix of one layer."""
    D, F, Dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    H, K = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    return [(D, H * Dh), (D, K * Dh), (D, K * Dh), (H * Dh, D), (D, F), (D, F), (F, D)]


def job_counts(cfg: dict) -> dict:
    L, D, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]
    H, K, Dh = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    layer_params = sum(a * b for a, b in layer_shapes(cfg))
    tokens = PROMPTS * PROMPT_LEN
    causal_pairs = PROMPTS * PROMPT_LEN * (PROMPT_LEN + 1) // 2  # (query, key) pairs a prompt's prefill scores
    prefill_flops = (2 * L * layer_params * tokens + L * 4 * causal_pairs * H * Dh + 2 * PROMPTS * D * V)
    mean_ctx = PROMPT_LEN + NEW / 2
    weight_bytes = 4 * (L * layer_params + D * V)
    kv_bytes = 4 * PROMPTS * mean_ctx * L * 2 * K * Dh
    return dict(layer_params=layer_params, prefill_flops=prefill_flops, decode_steps=NEW - 1,
                decode_bytes_per_step=weight_bytes + kv_bytes, kv_bytes_per_step=kv_bytes)


def timed(fn, *args, repeats: int = 7) -> float:
    fn(*args).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn(*args).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return best


def measure(cfg: dict) -> dict:
    import jax
    import jax.numpy as jnp

    mm = jax.jit(lambda a, b: a @ b)
    rates = {}
    for rows in (PROMPT_LEN, PROMPTS * PROMPT_LEN):
        for k, n in sorted(set(layer_shapes(cfg))):
            a, b = jnp.ones((rows, k), jnp.float32), jnp.ones((k, n), jnp.float32)
            rates[f"{rows}x{k}x{n}"] = 2 * rows * k * n / timed(mm, a, b) / 1e9
    big = jnp.ones((64 << 20,), jnp.float32)  # 256 MB
    read = big.nbytes / timed(jax.jit(jnp.sum), big) / 1e9
    weights = [jnp.full(s, 1e-3, jnp.float32) for _ in range(cfg["num_hidden_layers"]) for s in layer_shapes(cfg)]
    weights.append(jnp.full((cfg["hidden_size"], cfg["vocab_size"]), 1e-3, jnp.float32))  # lm_head
    rows = {k: jnp.ones((PROMPTS, k), jnp.float32) for k in {w.shape[0] for w in weights}}

    def step_matmuls(rows, *ws):  # every product summed, so none is dropped
        return sum(jnp.sum(rows[w.shape[0]] @ w) for w in ws)

    decode_mm = timed(jax.jit(step_matmuls), rows, *weights)
    return dict(matmul_gflops=rates, peak_gflops=max(rates.values()), read_gbs=read, decode_matmuls_s=decode_mm)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf-seconds", type=float, default=6.44, help="HF generate's time on the job (measured)")
    ap.add_argument("--medha-seconds", type=float, default=5.66, help="medha-jax's time on the job (measured)")
    ap.add_argument("--source", default="benchmarks/results/vs_hf_cpu_sampler.md", help="where those come from")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default="offline_floor_cpu", help="results file stem (one per machine)")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    cfg = LLAMA_31M
    c, m = job_counts(cfg), measure(cfg)
    prefill_s = c["prefill_flops"] / (m["peak_gflops"] * 1e9)
    step_s = c["decode_bytes_per_step"] / (m["read_gbs"] * 1e9)
    floor = prefill_s + c["decode_steps"] * step_s
    step_practical = m["decode_matmuls_s"] + c["kv_bytes_per_step"] / (m["read_gbs"] * 1e9)
    practical = prefill_s + c["decode_steps"] * step_practical
    report = dict(run_info("offline_floor_cpu.py", argv, load_before), counts=c, measured=m, floor_s=floor,
                  prefill_floor_s=prefill_s, decode_step_floor_s=step_s, hf_s=args.hf_seconds,
                  medha_s=args.medha_seconds, source=args.source, ceiling=args.hf_seconds / floor,
                  practical_floor_s=practical, practical_ceiling=args.hf_seconds / practical,
                  measured_ratio=args.hf_seconds / args.medha_seconds)
    rates = ", ".join(f"{k} {v:.0f}" for k, v in m["matmul_gflops"].items())
    lines = [f"# The CPU offline job's roofline ({time.strftime('%Y-%m-%d')})", "", provenance(report), "",
             f"Job: {PROMPTS} prompts x {PROMPT_LEN} tokens + {NEW} new, the 31M-param Llama (8 layers, hidden 512, "
             "GQA 8:2, vocab 8192), float32, greedy.", "",
             "| quantity | value |", "|---|---|",
             f"| matmul throughput at the job's shapes (jit, f32), GFLOP/s | {rates} |",
             f"| read bandwidth (jit sum over 256 MB), GB/s | {m['read_gbs']:.1f} |",
             f"| prefill FLOPs (layers + causal attention + 16 lm_head rows) | {c['prefill_flops'] / 1e9:.0f} GFLOP |",
             f"| prefill floor at the best matmul rate | {prefill_s:.2f} s |",
             f"| bytes per decode step (weights + lm_head + K/V at mean context) | {c['decode_bytes_per_step'] / 1e6:.0f} MB |",
             f"| decode step floor at the read bandwidth | {step_s * 1e3:.1f} ms x {c['decode_steps']} steps |",
             f"| whole-job floor | **{floor:.2f} s** |",
             f"| a decode step's matmuls, measured (16 rows, every weight + lm_head, one jit) | "
             f"{m['decode_matmuls_s'] * 1e3:.1f} ms ({(c['decode_bytes_per_step'] - c['kv_bytes_per_step']) / m['decode_matmuls_s'] / 1e9:.1f} GB/s of weights) |",
             f"| practical floor (those matmuls, K/V at full bandwidth, nothing else) | **{practical:.2f} s** |",
             f"| HF `generate` / medha-jax, measured ({args.source}) | {args.hf_seconds:.2f} s / {args.medha_seconds:.2f} s"
             f" = {report['measured_ratio']:.2f}x |",
             f"| the most HF / medha-jax can be here: HF's time over the floor / the practical floor | "
             f"**{report['ceiling']:.2f}x / {report['practical_ceiling']:.2f}x** |", ""]
    write_results(args.out, args.name, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
