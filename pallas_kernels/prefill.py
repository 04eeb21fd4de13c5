"""Chunked-prefill paged attention: a Triton-lowered Pallas kernel over a 1-D grid of tiles.

Data flow:
  contract inputs -> `worklist.prefill_work` (tiles of BQ tokens x the G heads of one kv head
  packed as M rows; KV split only while the tiles fill fewer than two waves) -> `pallas_call`
  whose program i runs work row i: walk the sequence's KV blocks through the page table up to
  the tile's causal frontier (bottom-right aligned by q_offsets; only the last blocks masked)
  and write a partial (o, lse) to its slot -> `combine` merges splits and scatters back to
  tokens -> (out [T, H, Dh], lse f32[T, H]).

The metadata half (`prefill_plan`: page table, work list, launch order) and the kernel half
(`prefill_run`) are separate so that a model builds the plan once per step for all its layers
(`serial.serial_plan`). `prefill_row` is also the prefill branch of the fused POD kernel (`pod.py`).
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
from pallas_kernels.tile_attention import run_row
from pallas_kernels.worklist import KIND, PREFILL


def prefill_row(rows_ref, i, pt_ref, q_ref, kv_refs, o_ref, lse_ref, *, tiles: Tiles,
                scale: float):
    """The prefill branch: an M-row tile of BQ tokens x G heads."""
    run_row(rows_ref, i, pt_ref, q_ref, kv_refs, o_ref, lse_ref, rows=tiles.M, tiles=tiles,
            scale=scale)


def _prefill_kernel(rows_ref, pt_ref, q_ref, *refs, tiles, scale):
    kv_refs, (o_ref, lse_ref) = refs[:-2], refs[-2:]  # kv_refs: k, v[, k scales, v scales]
    i = pl.program_id(0)

    @pl.when(rows_ref[i, KIND] == PREFILL)
    def _():
        prefill_row(rows_ref, i, pt_ref, q_ref, kv_refs, o_ref, lse_ref, tiles=tiles, scale=scale)


def prefill_call(launch_rows, table, q, kv, *, num_slots: int, tiles: Tiles,
                 scale: float, config: KernelConfig, interpret: bool):
    """The raw kernel: rows i32[R, NCOL], kv = (k_pages, v_pages[, k_scales, v_scales])
    -> partial (o f32[num_slots, M, Dh], lse f32[num_slots, M])."""
    Dh = q.shape[-1]
    return pl.pallas_call(
        functools.partial(_prefill_kernel, tiles=tiles, scale=scale),
        grid=(launch_rows.shape[0],),
        out_shape=[
            jax.ShapeDtypeStruct((num_slots, tiles.M, Dh), jnp.float32),
            jax.ShapeDtypeStruct((num_slots, tiles.M), jnp.float32),
        ],
        compiler_params=plgpu.CompilerParams(num_warps=config.warps(tiles.M, Dh),
                                             num_stages=config.num_stages),
        interpret=interpret,
        name="medha_prefill_attention",
    )(launch_rows, table, q, *kv)


def prefill_attention(q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, *, scale,
                      config: KernelConfig = DEFAULT_CONFIG, interpret: bool | None = None,
                      k_scales=None, v_scales=None):
    """Contract signature; every sequence (decodes too, as 1-token tiles) runs as prefill tiles."""
    part = prefill_part(q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, scale=scale,
                        config=config, interpret=interpret, k_scales=k_scales, v_scales=v_scales, min_len=1)
    return combine.assemble([part], q.dtype)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PrefillPlan:
    """What the prefill kernel derives from the batch metadata alone: built once per model step,
    it serves every layer (`with_first_page` points it at one layer's pages)."""

    table: jax.Array  # i32[S, P'] page ids in [0, num_pages), padded to whole KV blocks
    work: worklist.Work
    launch_rows: jax.Array  # i32[R', NCOL] work rows in launch order (longest first, NOOP-padded)

    def with_first_page(self, first_page) -> "PrefillPlan":
        """The plan over pages [first_page, first_page + num_pages) of a larger (flattened) cache."""
        return dataclasses.replace(self, table=self.table + first_page)


def prefill_plan(page_table, cu_q_lens, q_offsets, kv_lens, *, num_tokens: int, kv_heads: int, tiles: Tiles,
                 num_pages: int, config: KernelConfig, min_len: int = 1) -> PrefillPlan:
    """Tiles of the sequences with >= min_len query tokens, their KV splits and launch order."""
    table = metadata.pad_page_table(page_table, num_pages=num_pages, block_pages=tiles.block_pages)
    kv_lens = metadata.clamp_kv_lens(kv_lens, max_pages=page_table.shape[1], page_size=tiles.page_size)
    work = worklist.prefill_work(cu_q_lens.astype(jnp.int32), q_offsets.astype(jnp.int32), kv_lens,
                                 num_tokens=num_tokens, kv_heads=kv_heads, tiles=tiles, config=config,
                                 min_len=min_len)
    return PrefillPlan(table, work, worklist.order_rows(work))


def prefill_run(q, kv, plan: PrefillPlan, *, tiles: Tiles, scale: float, config: KernelConfig,
                interpret: bool | None):
    """The kernel over a plan's tiles -> (out f32[T, H, Dh], lse f32[T, H], owned bool[T]: the
    tokens it computed), for `combine.assemble`. kv: (k_pages, v_pages[, k_scales, v_scales])."""
    o_rows, lse_rows = prefill_call(
        plan.launch_rows, plan.table, q, kv, num_slots=plan.work.rows.shape[0],
        tiles=tiles, scale=scale, config=config, interpret=resolve_interpret(interpret))
    return combine.finish(plan.work, o_rows, lse_rows, kv_heads=kv[0].shape[2], groups=tiles.G)


def prefill_part(q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, *, scale,
                 config: KernelConfig, interpret: bool | None, k_scales=None, v_scales=None,
                 min_len: int = 1):
    """The kernel over the sequences with >= min_len query tokens -> (out f32[T, H, Dh],
    lse f32[T, H], owned bool[T]: the tokens it computed), for `combine.assemble`."""
    kv = metadata.check_shapes(q, k_pages, v_pages, k_scales, v_scales)
    T, H, _ = q.shape
    N, page_size, KVH, _ = k_pages.shape
    tiles = config.tiles(H // KVH, page_size)
    plan = prefill_plan(page_table, cu_q_lens, q_offsets, kv_lens, num_tokens=T, kv_heads=KVH, tiles=tiles,
                        num_pages=N, config=config, min_len=min_len)
    return prefill_run(q, kv, plan, tiles=tiles, scale=scale, config=config, interpret=interpret)
