"""Paged decode attention: split-K over pages (flash-decoding), Triton-lowered Pallas.

Data flow:
  grid (sequences, kv heads, splits): program (s, h, j) takes the decode query of sequence s
  (its first token; MD rows = the G heads of kv head h, padded to 16), cuts the keys up to the
  token's frontier min(q_offset + 1, kv_len) into `splits` ranges of whole KV blocks and walks
  range j through the page table -> partial (o f32[MD, Dh], lse f32[MD]) per program
  -> `merge.merge_attention` over the split axis (empty splits have lse = -inf and drop out)
  -> scattered to each sequence's token -> (out [T, H, Dh], lse f32[T, H]).

The contract wrapper is for decode batches: every sequence's first query token is computed
as a decode; later tokens of a sequence (which a decode batch does not have) get (0, -inf).
The metadata half (`decode_plan`) and the kernel half (`decode_run`) are separate so that a model
builds the plan once per step for all its layers (`serial.serial_plan`). `decode_row` is the
decode branch of the fused POD kernel (`pod.py`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels import combine, metadata
from pallas_kernels.config import DEFAULT_CONFIG, KernelConfig, Tiles, resolve_interpret
from pallas_kernels.merge import merge_attention
from pallas_kernels.tile_attention import run_row, tile_attention


def decode_row(rows_ref, i, pt_ref, q_ref, kv_refs, o_ref, lse_ref, *, tiles: Tiles,
               scale: float):
    """The decode branch: one token x G heads on MD rows, one KV split of the work row."""
    run_row(rows_ref, i, pt_ref, q_ref, kv_refs, o_ref, lse_ref, rows=tiles.MD, tiles=tiles,
            scale=scale)


def _decode_kernel(cu_ref, qoff_ref, kvlen_ref, pt_ref, q_ref, *refs, tiles: Tiles, scale: float,
                   splits: int):
    kv_refs, (o_ref, lse_ref) = refs[:-2], refs[-2:]  # kv_refs: k, v[, k scales, v scales]
    s, h, j = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    BK = tiles.BK
    base = qoff_ref[s] + 1  # the decode token sees keys < q_offset + 1
    hi = jnp.minimum(jnp.maximum(base, 0), kvlen_ref[s])
    n_blocks = lax.div(hi + (BK - 1), jnp.int32(BK))
    per_split = jnp.maximum(lax.div(n_blocks + (splits - 1), jnp.int32(splits)), 1)
    kv_lo = j * per_split * BK
    kv_hi = jnp.maximum(jnp.minimum(kv_lo + per_split * BK, hi), kv_lo)
    o, lse = tile_attention(q_ref, kv_refs, pt_ref, s, h, cu_ref[s], 1, base, kv_lo, kv_hi,
                            rows=tiles.MD, groups=tiles.G, scale=scale,
                            block_pages=tiles.block_pages)
    o_ref[...] = o  # o_ref: f32[MD, Dh] block of [S, KVH, splits, MD, Dh]
    lse_ref[...] = lse


def decode_call(cu_q_lens, q_offsets, kv_lens, table, q, kv, *, tiles: Tiles,
                scale: float, splits: int, config: KernelConfig, interpret: bool):
    """The raw kernel, kv = (k_pages, v_pages[, k_scales, v_scales])
    -> partial (o f32[S, KVH, splits, MD, Dh], lse f32[S, KVH, splits, MD])."""
    S = q_offsets.shape[0]
    KVH, Dh = kv[0].shape[2], q.shape[-1]
    whole = pl.BlockSpec()  # whole array: pages are gathered in-kernel
    return pl.pallas_call(
        functools.partial(_decode_kernel, tiles=tiles, scale=scale, splits=splits),
        grid=(S, KVH, splits),
        in_specs=[whole] * (5 + len(kv)),
        out_specs=[
            pl.BlockSpec((None, None, None, tiles.MD, Dh), lambda s, h, j: (s, h, j, 0, 0)),
            pl.BlockSpec((None, None, None, tiles.MD), lambda s, h, j: (s, h, j, 0)),
        ],
        out_shape=[
            jax.ShapeDtypeStruct((S, KVH, splits, tiles.MD, Dh), jnp.float32),
            jax.ShapeDtypeStruct((S, KVH, splits, tiles.MD), jnp.float32),
        ],
        compiler_params=plgpu.CompilerParams(num_warps=config.decode_num_warps,
                                             num_stages=config.num_stages),
        interpret=interpret,
        name="medha_decode_attention",
    )(cu_q_lens, q_offsets, kv_lens, table, q, *kv)


def decode_attention(q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, *, scale,
                     config: KernelConfig = DEFAULT_CONFIG, interpret: bool | None = None,
                     splits: int | None = None, k_scales=None, v_scales=None):
    """Contract signature for decode batches (one query token per sequence)."""
    part = decode_part(q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, scale=scale,
                       config=config, interpret=interpret, splits=splits, k_scales=k_scales, v_scales=v_scales)
    return combine.assemble([part], q.dtype)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodePlan:
    """What the decode kernel derives from the batch metadata alone: built once per model step,
    it serves every layer (`with_first_page` points it at one layer's pages)."""

    table: jax.Array  # i32[S, P'] page ids in [0, num_pages), padded to whole KV blocks
    cu_q_lens: jax.Array  # i32[S+1]
    q_offsets: jax.Array  # i32[S]
    kv_lens: jax.Array  # i32[S] clamped to the table; 0 for a sequence the kernel leaves out
    tok_seq: jax.Array  # i32[T] each token's sequence
    owned: jax.Array  # bool[T] the tokens the kernel computes (each decoded sequence's first)
    splits: int = dataclasses.field(metadata=dict(static=True))  # KV splits per (sequence, kv head)

    def with_first_page(self, first_page) -> "DecodePlan":
        """The plan over pages [first_page, first_page + num_pages) of a larger (flattened) cache."""
        return dataclasses.replace(self, table=self.table + first_page)


def decode_splits(num_seqs: int, kv_heads: int, max_blocks: int, config: KernelConfig) -> int:
    """KV splits per (sequence, kv head), static: flash-decoding splits only while the grid holds
    fewer than `decode_grid_waves` waves of programs (num_seqs is the bucket's, padding included,
    hence several waves), at most `max_decode_splits` and the table's KV blocks. On an H200
    (8 kv heads) up to 8 sequences get 16 splits, 16 get 9, 32 get 5, 256 get 1. Every split is
    an [MD, Dh] f32 partial the merge reads: 16 splits for 256 sequences were 268 MB a layer."""
    fill = -(-config.decode_grid_waves * config.wave // max(1, num_seqs * kv_heads))
    return max(1, min(config.max_decode_splits, max_blocks, fill))


def decode_plan(page_table, cu_q_lens, q_offsets, kv_lens, *, num_tokens: int, kv_heads: int, tiles: Tiles,
                num_pages: int, config: KernelConfig, splits: int | None = None,
                decodes_only: bool = False) -> DecodePlan:
    """Lengths, splits and token owners of a decode launch. splits: None picks `decode_splits`;
    a number is capped by the table's KV blocks. decodes_only: sequences with more than one query
    token are left out (no keys walked, nothing owned): a hybrid batch's prefills go to another kernel."""
    table = metadata.pad_page_table(page_table, num_pages=num_pages, block_pages=tiles.block_pages)
    max_blocks = table.shape[1] // tiles.block_pages  # no split can start past the table's end
    S = q_offsets.shape[0]
    splits = decode_splits(S, kv_heads, max_blocks, config) if splits is None else max(1, min(splits, max_blocks))
    kv_lens = metadata.clamp_kv_lens(kv_lens, max_pages=page_table.shape[1], page_size=tiles.page_size)
    cu_q_lens = cu_q_lens.astype(jnp.int32)
    is_decode = metadata.seq_lengths(cu_q_lens) == 1  # is_decode: bool[S]
    if decodes_only:
        kv_lens = jnp.where(is_decode, kv_lens, 0)  # a prefill's program walks no keys
    tseq, loc, valid = metadata.token_sequences(cu_q_lens, num_tokens)
    owned = valid & (loc == 0) & (is_decode[tseq] if decodes_only else True)
    return DecodePlan(table, cu_q_lens, q_offsets.astype(jnp.int32), kv_lens, tseq, owned, splits)


def decode_run(q, kv, plan: DecodePlan, *, tiles: Tiles, scale: float, config: KernelConfig,
               interpret: bool | None):
    """The kernel on each planned sequence's first query token -> (out f32[T, H, Dh],
    lse f32[T, H], owned bool[T]), for `combine.assemble`. kv: (k_pages, v_pages[, scales])."""
    o_part, lse_part = decode_call(
        plan.cu_q_lens, plan.q_offsets, plan.kv_lens, plan.table, q, kv, tiles=tiles,
        scale=scale, splits=plan.splits, config=config, interpret=resolve_interpret(interpret))
    out, lse = merge_splits(o_part, lse_part, plan.tok_seq, groups=tiles.G)
    return out, lse, plan.owned


def merge_splits(o_part, lse_part, tok_seq, *, groups: int):
    """The decode kernel's partials o f32[S, KVH, splits, MD, Dh], lse f32[S, KVH, splits, MD]
    -> per token of sequence tok_seq[t]: (out f32[T, H, Dh], lse f32[T, H]). Rows G..MD of a
    partial are padding for tl.dot: only the heads' G rows are merged."""
    S, KVH, _, _, Dh = o_part.shape
    G = groups
    o_seq, lse_seq = merge_attention(jnp.moveaxis(o_part[:, :, :, :G], 2, 0), jnp.moveaxis(lse_part[..., :G], 2, 0))
    return combine.gather_tokens(o_seq.reshape(S * KVH, G, Dh), lse_seq.reshape(S * KVH, G), tok_seq,
                                 jnp.zeros_like(tok_seq), kv_heads=KVH, groups=G)


def decode_part(q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, *, scale,
                config: KernelConfig, interpret: bool | None, splits: int | None = None,
                k_scales=None, v_scales=None, decodes_only: bool = False):
    """The kernel on each sequence's first query token -> (out f32[T, H, Dh], lse f32[T, H],
    owned bool[T]), for `combine.assemble`. decodes_only: as `decode_plan`."""
    kv = metadata.check_shapes(q, k_pages, v_pages, k_scales, v_scales)
    T, H, _ = q.shape
    N, page_size, KVH, _ = k_pages.shape
    tiles = config.tiles(H // KVH, page_size)
    plan = decode_plan(page_table, cu_q_lens, q_offsets, kv_lens, num_tokens=T, kv_heads=KVH, tiles=tiles,
                       num_pages=N, config=config, splits=splits, decodes_only=decodes_only)
    return decode_run(q, kv, plan, tiles=tiles, scale=scale, config=config, interpret=interpret)
