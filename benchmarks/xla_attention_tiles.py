"""Seconds of one layer's prefill attention on the XLA path (what a CPU runs) per tile shape.

    python benchmarks/xla_attention_tiles.py --chunk 4096 --cached 4096

Data flow: random q (T x 8 heads x 64) and a paged KV cache (GQA 8:2, pages of 16) for one
sequence whose chunk of T tokens follows `cached` tokens -> pallas_kernels.reference
.paged_attention_xla jitted with each prefill tile (block_q, prefill_block_pages) -> best of 2 timed
calls after one compile call -> printed table. The engine uses the function's defaults
(XLA_BLOCK_Q=128 queries, prefill_block_pages=32).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import pallas_kernels.reference as ref

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunk", type=int, default=4096)
    ap.add_argument("--cached", type=int, default=4096)
    ap.add_argument("--shapes", default="32x8,32x32,64x32,128x16,128x32", help="block_q x prefill_block_pages, ...")
    args = ap.parse_args(argv)
    T, kv0, H, KVH, Dh, page = args.chunk, args.cached, 8, 2, 64, 16
    P = -(-(kv0 + T) // page)
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((T, H, Dh), np.float32))  # q: f32[T, H, Dh]
    kp = jnp.asarray(rng.standard_normal((P + 1, page, KVH, Dh), np.float32))  # kp: f32[pages, page, KVH, Dh]
    table = jnp.arange(P, dtype=jnp.int32)[None, :]  # table: i32[1, P]
    cu, qo, kl = jnp.array([0, T], jnp.int32), jnp.array([kv0], jnp.int32), jnp.array([kv0 + T], jnp.int32)
    print(f"chunk {T} tokens after {kv0} cached, 8 heads GQA 8:2, head_dim 64, f32; load {os.getloadavg()[0]:.1f}")
    print("| block_q | prefill_block_pages | seconds |\n|---|---|---|")
    for spec in args.shapes.split(","):
        bq, bp = (int(x) for x in spec.split("x"))
        f = jax.jit(functools.partial(ref.paged_attention_xla, scale=0.125, block_q=bq, prefill_block_pages=bp))
        f(q, kp, kp, table, cu, qo, kl)[0].block_until_ready()
        best = float("inf")
        for _ in range(2):
            t0 = time.perf_counter()
            f(q, kp, kp, table, cu, qo, kl)[0].block_until_ready()
            best = min(best, time.perf_counter() - t0)
        print(f"| {bq} | {bp} | {best:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
