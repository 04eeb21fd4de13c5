"""Memory traffic of the serial Pallas path's merges, one layer, at the 8B model's GPU shapes: the
merges as built now vs as they were before stop 46, side by side in one run.

    python benchmarks/attention_merge_bytes.py            # CPU, ~1 min

Why: on the H200 (benchmarks/results/h200/run7_profile_vs_hf) the decode ticks spent more time in
small scatter/select/add kernels than in attention (32 x 1,024 decodes: ~6 ms of them a tick
beside 3.6 ms of the decode kernel). Per layer, the prefill kernel's half of a decode batch left
>= 2 waves of [128, Dh] f32 slots that the slot merge passed over for no token, and the decode
kernel wrote 16 splits x 16 rows of partials per (sequence, kv head) whatever the batch.

What it measures: XLA's cost analysis ("bytes accessed") of the compiled post-kernel work of one
layer, the kernels' partial outputs given as inputs (the kernels are not run). A static estimate
from the CPU compiler, not a GPU timing; `gpu_session.sh profile` measures the device.

Data flow, per batch (1 x 8K, 32 x 1K and 256 x 1K decodes; a 2,048-token chunk + 63 decodes):
  serial_plan at its bucket (H=32, KVH=8, Dh=128, page 16, KernelConfig on 132 SMs)
  -> prefill half: `combine.finish` (now: each token's slots when that reads less) vs
     `merge_slots` + `gather_tokens` over every slot (before)
  -> decode half: the plan's splits, G rows merged (`decode.merge_splits`, now) vs 16 splits,
     all MD rows (before)
  -> bytes accessed of each, compiled for the CPU -> results/attention_merge_bytes.{json,md}
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from pallas_kernels import combine  # noqa: E402
from pallas_kernels.config import KernelConfig  # noqa: E402
from pallas_kernels.decode import merge_splits  # noqa: E402
from pallas_kernels.merge import merge_attention  # noqa: E402
from pallas_kernels.serial import serial_plan  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
H, KVH, DH, PAGE = 32, 8, 128, 16
CONFIG = KernelConfig(num_sms=132)
OLD_DECODE_SPLITS = 16  # max_decode_splits, every bucket, before
# (name, tokens T, sequences S, page-table columns): the engine's buckets for these batches
BATCHES = [("1 x 8K decode", 16, 4, 528), ("32 x 1K decode", 32, 32, 80), ("256 x 1K decode", 256, 256, 80),
           ("2,048-token chunk + 63 decodes", 2112, 64, 1040)]


def bytes_accessed(fn, *args) -> float:
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost["bytes accessed"])


def old_decode_merge(o_part, lse_part, tok_seq):
    """Before: every split and every one of the MD rows merged, then G rows gathered."""
    S, K, _, MD, Dh = o_part.shape
    o_seq, lse_seq = merge_attention(jnp.moveaxis(o_part, 2, 0), jnp.moveaxis(lse_part, 2, 0))
    return combine.gather_tokens(o_seq.reshape(S * K, MD, Dh), lse_seq.reshape(S * K, MD), tok_seq,
                                 jnp.zeros_like(tok_seq), kv_heads=K, groups=H // K)


def measure(name: str, T: int, S: int, P: int) -> dict:
    meta = (jax.ShapeDtypeStruct((S, P), jnp.int32), jax.ShapeDtypeStruct((S + 1,), jnp.int32),
            jax.ShapeDtypeStruct((S,), jnp.int32), jax.ShapeDtypeStruct((S,), jnp.int32))
    plan = jax.eval_shape(lambda *m: serial_plan(*m, num_tokens=T, num_heads=H, kv_heads=KVH, page_size=PAGE,
                                                 num_pages=1 << 20, config=CONFIG), *meta)
    tiles = CONFIG.tiles(H // KVH, PAGE)
    pre = plan.pre.work
    R = pre.rows.shape[0]
    o_rows = jax.ShapeDtypeStruct((R, tiles.M, DH), jnp.float32)
    lse_rows = jax.ShapeDtypeStruct((R, tiles.M), jnp.float32)
    pre_now = bytes_accessed(lambda w, o, lse: combine.finish(w, o, lse, kv_heads=KVH, groups=tiles.G)[:2],
                             pre, o_rows, lse_rows)
    pre_before = bytes_accessed(
        lambda w, o, lse: combine.gather_tokens(*combine.merge_slots(o, lse, w.row_item, w.num_items), w.tok_item,
                                                w.tok_row, kv_heads=KVH, groups=tiles.G), pre, o_rows, lse_rows)

    def part(splits):
        return (jax.ShapeDtypeStruct((S, KVH, splits, tiles.MD, DH), jnp.float32),
                jax.ShapeDtypeStruct((S, KVH, splits, tiles.MD), jnp.float32))

    tok_seq = jax.ShapeDtypeStruct((T,), jnp.int32)
    splits = plan.dec.splits
    dec_now = bytes_accessed(lambda o, lse, t: merge_splits(o, lse, t, groups=tiles.G), *part(splits), tok_seq)
    dec_before = bytes_accessed(old_decode_merge, *part(OLD_DECODE_SPLITS), tok_seq)
    gathered = T * KVH * pre.max_splits * tiles.G <= R * tiles.M  # combine.finish's choice
    return dict(batch=name, tokens=T, seqs=S, prefill_slots=R, decode_splits=splits, prefill_gathered=gathered,
                prefill_gathered_rows_mb=T * KVH * pre.max_splits * tiles.G * (DH + 1) * 4 / 1e6 if gathered else None,
                prefill_merge_mb=dict(before=pre_before / 1e6, now=pre_now / 1e6),
                decode_merge_mb=dict(before=dec_before / 1e6, now=dec_now / 1e6),
                decode_partials_mb=dict(before=S * KVH * OLD_DECODE_SPLITS * tiles.MD * DH * 4 / 1e6,
                                        now=S * KVH * splits * tiles.MD * DH * 4 / 1e6))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    rows = [measure(*b) for b in BATCHES]
    report = dict(run_info("attention_merge_bytes.py", argv, load_before), rows=rows,
                  shapes=dict(H=H, KVH=KVH, Dh=DH, page=PAGE, num_sms=CONFIG.num_sms))
    lines = ["# The serial Pallas path's merges, one layer, before and after stop 46 (XLA's bytes accessed)", "",
             provenance(report), "",
             f"8B shapes: {H} query heads, {KVH} kv heads, head dim {DH}, page {PAGE}, {CONFIG.num_sms} SMs. "
             "MB are XLA:CPU's cost-analysis estimate of the compiled post-kernel work of one layer (32 layers a "
             "step), not a GPU measurement; 'partials' is what the decode kernel writes. XLA's cost analysis "
             "charges a gather its whole operand, so where the prefill half now gathers each token's slots its MB is "
             "an upper bound; the rows it reads are in the next column.", "",
             "| batch (bucket T x S) | prefill slots | prefill-half merge MB before / now | prefill-half rows read "
             "now (gathered) MB | decode splits before / now | decode merge MB before / now | decode partials MB "
             "before / now |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        p, d, w = r["prefill_merge_mb"], r["decode_merge_mb"], r["decode_partials_mb"]
        rows_read = "-" if r["prefill_gathered_rows_mb"] is None else f"{r['prefill_gathered_rows_mb']:.1f}"
        lines.append(f"| {r['batch']} ({r['tokens']} x {r['seqs']}) | {r['prefill_slots']} | {p['before']:.1f} / "
                     f"{p['now']:.1f} | {rows_read} | {OLD_DECODE_SPLITS} / {r['decode_splits']} | {d['before']:.1f} / "
                     f"{d['now']:.1f} | {w['before']:.1f} / {w['now']:.1f} |")
    write_results(args.out, "attention_merge_bytes", report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
