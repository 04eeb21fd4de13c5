"""Fused hybrid-batch paged attention (POD-Attention): prefill tiles and decode splits in one kernel.

Data flow:
  contract inputs -> two work lists built with jnp from the traced metadata
  (`worklist.prefill_work`: sequences with q_len >= 2, M-row tiles, KV splits limited to
  `prefill_waves` waves; `worklist.decode_work`: q_len == 1, MD-row tiles, flash-decoding splits)
  -> `worklist.interleave`: one table i32[R, NCOL], prefill and decode rows mixed in proportion,
  padded with NOOP rows to a power of two (fixed shape under jit)
  -> one `pallas_call` over the 1-D grid of rows: `pl.when` on the row's kind runs the prefill
  branch (`prefill.prefill_row`) or the decode branch (`decode.decode_row`), each writing its
  partial (o, lse) to its slot of its kind's buffer
  -> `combine`: splits merged by log-sum-exp, rows scattered back to tokens -> (out, lse).
The work lists and launch order (`PodPlan`) depend only on the metadata: build them once per
step with `pod_plan` and pass `plan=` to every layer's call.

This is POD's CTA-parallel fusion; its SM-aware binding (%smid, per-SM counters) and persistent
programs are not done: the launch order only interleaves, the hardware scheduler places programs.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels import combine, metadata, worklist
from pallas_kernels.config import DEFAULT_CONFIG, KernelConfig, Tiles, resolve_interpret
from pallas_kernels.decode import decode_row
from pallas_kernels.prefill import prefill_row
from pallas_kernels.worklist import DECODE, KIND, PREFILL


def _pod_kernel(rows_ref, pt_ref, q_ref, *refs, tiles: Tiles, scale: float):
    kv_refs, (op_ref, lp_ref, od_ref, ld_ref) = refs[:-4], refs[-4:]  # kv_refs: k, v[, k scales, v scales]
    i = pl.program_id(0)
    kind = rows_ref[i, KIND]

    @pl.when(kind == PREFILL)
    def _():
        prefill_row(rows_ref, i, pt_ref, q_ref, kv_refs, op_ref, lp_ref, tiles=tiles, scale=scale)

    @pl.when(kind == DECODE)
    def _():
        decode_row(rows_ref, i, pt_ref, q_ref, kv_refs, od_ref, ld_ref, tiles=tiles, scale=scale)


def pod_call(launch_rows, table, q, kv, *, prefill_slots: int, decode_slots: int,
             tiles: Tiles, scale: float, config: KernelConfig, interpret: bool):
    """The raw fused kernel, kv = (k_pages, v_pages[, k_scales, v_scales]) -> prefill partials (f32[RP, M, Dh], f32[RP, M]) and decode
    partials (f32[RD, MD, Dh], f32[RD, MD])."""
    Dh = q.shape[-1]
    return pl.pallas_call(
        functools.partial(_pod_kernel, tiles=tiles, scale=scale),
        grid=(launch_rows.shape[0],),
        out_shape=[
            jax.ShapeDtypeStruct((prefill_slots, tiles.M, Dh), jnp.float32),
            jax.ShapeDtypeStruct((prefill_slots, tiles.M), jnp.float32),
            jax.ShapeDtypeStruct((decode_slots, tiles.MD, Dh), jnp.float32),
            jax.ShapeDtypeStruct((decode_slots, tiles.MD), jnp.float32),
        ],
        compiler_params=plgpu.CompilerParams(num_warps=config.warps(tiles.M, Dh),
                                             num_stages=config.num_stages),
        interpret=interpret,
        name="medha_pod_attention",
    )(launch_rows, table, q, *kv)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PodPlan:
    """Everything the fused kernel needs besides q and the pages; depends only on the batch
    metadata, so a model builds it once per step and reuses it in every layer."""

    launch_rows: jax.Array  # i32[R, NCOL], interleaved launch order
    table: jax.Array  # i32[S, P'] page table, clipped and padded to whole KV blocks
    pre: worklist.Work
    dec: worklist.Work

    def with_first_page(self, first_page) -> "PodPlan":
        """The plan over pages [first_page, first_page + num_pages) of a larger (flattened) cache."""
        return dataclasses.replace(self, table=self.table + first_page)


def pod_plan(page_table, cu_q_lens, q_offsets, kv_lens, *, num_tokens: int, num_heads: int,
             kv_heads: int, page_size: int, num_pages: int,
             config: KernelConfig = DEFAULT_CONFIG) -> PodPlan:
    """Work lists and launch order for a hybrid batch, built with jnp from traced metadata."""
    tiles = config.tiles(num_heads // kv_heads, page_size)
    table = metadata.pad_page_table(page_table, num_pages=num_pages, block_pages=tiles.block_pages)
    kv_lens = metadata.clamp_kv_lens(kv_lens, max_pages=page_table.shape[1], page_size=page_size)
    cu_q_lens, q_offsets = cu_q_lens.astype(jnp.int32), q_offsets.astype(jnp.int32)
    common = dict(num_tokens=num_tokens, kv_heads=kv_heads, tiles=tiles, config=config)
    pre = worklist.prefill_work(cu_q_lens, q_offsets, kv_lens, min_len=2, **common)
    dec = worklist.decode_work(cu_q_lens, q_offsets, kv_lens, **common)
    return PodPlan(worklist.interleave(pre, dec), table, pre, dec)


def pod_attention(q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, *, scale,
                  config: KernelConfig = DEFAULT_CONFIG, interpret: bool | None = None,
                  plan: PodPlan | None = None, k_scales=None, v_scales=None):
    """Contract signature: the whole hybrid batch (prefill chunks and decodes) in one kernel.

    `plan` (from `pod_plan` on the same metadata and config) skips rebuilding the work lists.
    """
    kv = metadata.check_shapes(q, k_pages, v_pages, k_scales, v_scales)
    T, H, Dh = q.shape
    N, page_size, KVH, _ = k_pages.shape
    tiles = config.tiles(H // KVH, page_size)
    if plan is None:
        plan = pod_plan(page_table, cu_q_lens, q_offsets, kv_lens, num_tokens=T, num_heads=H,
                        kv_heads=KVH, page_size=page_size, num_pages=N, config=config)
    op, lp, od, ld = pod_call(
        plan.launch_rows, plan.table, q, kv, prefill_slots=plan.pre.rows.shape[0],
        decode_slots=plan.dec.rows.shape[0], tiles=tiles, scale=scale, config=config,
        interpret=resolve_interpret(interpret))
    parts = [
        combine.finish(plan.pre, op, lp, kv_heads=KVH, groups=tiles.G),
        combine.finish(plan.dec, od, ld, kv_heads=KVH, groups=tiles.G),
    ]
    return combine.assemble(parts, q.dtype)
