"""The paged KV cache as the layers hold it: plain pages, or fp8 pages with a scale per page and head.

Per device, each of kv_k / kv_v is either
  plain          [Ll, N, page, K, Dh] in the model's dtype, or
  QuantizedPages values uint8 [Ll, N, page, K, Dh] holding float8_e4m3fn bits (`kv_quant`) +
                 scales f32[Ll, N, 1, K, 1] (key j of page p, head h =
                 to_float(values[l, p, j, h]) * scales[l, p, 0, h, 0]; the
                 scales keep the cache's rank so the cache's PartitionSpec and sharding apply
                 to both leaves unchanged).

Writing one layer's new k or v [T, K, Dh] at slot_mapping i32[T] (-1: not this device's):
  plain: scatter at [layer, slot // page, slot % page].
  fp8:   a page's scale is max(its kept scale, each new token's power-of-two scale for its amax,
         `kv_quant.power_of_two_scale`); a page first
         written at offset 0 in this batch is new to its request (pages fill in order), so its
         old scale (earlier KV's) is dropped. A page continued from an earlier step (the first
         token a sequence writes, at offset > 0) whose scale grew has its earlier tokens
         re-quantised to the new scale (an exact shift: both are powers of two); then the new
         tokens are quantised and scattered.
Every update indexes [layer, page, ...] of the stacked arrays, so it stays in place.

fp8 keys are stored rotated: the layer multiplies q and k by `key_rotation(Dh)`, an orthonormal
(block-)Hadamard matrix, before writing k and attending (`rotate_for_fp8`). Scores are unchanged
(q R . k R = q . k for orthonormal R), but a key's rounding error no longer sits in the few
channels where both keys and queries are large (Llama's outlier channels): on
tests/data/tiny-llama3-trained the log-probability drift of the fp8 cache against a bf16 one fell
from 0.056 to 0.028 nats and the teacher-forced greedy agreement rose from 149 to 154 of 160
(`benchmarks/results/fp8_kv.md`). Values are not rotated: their error is averaged over the
attended keys (emulated, fp8 values alone drift 0.016 nats, fp8 keys alone 0.058:
`benchmarks/results/fp8_kv_emulated.md`).
Every attention backend reads the rotated pages like any others: only q and k change, outside them.

`layer_view` gives attention one layer's pages without slicing: the [Ll, N, ...] arrays
reshaped to [Ll*N, ...] (free) and the page table offset by layer*N; fp8 adds the kwargs
`k_scales` / `v_scales` f32[Ll*N, K] of the paged-attention contract.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import kv_quant


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class QuantizedPages:
    values: jax.Array  # u8[Ll, N, page, K, Dh]: float8_e4m3fn bits
    scales: jax.Array  # f32[Ll, N, 1, K, 1]


def zeros(shape: tuple[int, ...], dtype):
    """An empty cache side of `shape` [L, N, page, K, Dh]: fp8 pages when dtype is float8_e4m3fn."""
    if jnp.dtype(dtype) == kv_quant.FP8:
        L, N, _, K, _ = shape
        return QuantizedPages(jnp.zeros(shape, kv_quant.STORAGE), jnp.zeros((L, N, 1, K, 1), jnp.float32))
    return jnp.zeros(shape, dtype)


def bytes_per_page_element(dtype, page_size: int, head_dim: int) -> float:
    """Bytes one cached element costs, scales included (fp8: 1 + 4 / (page * Dh))."""
    if jnp.dtype(dtype) == kv_quant.FP8:
        return 1.0 + 4.0 / (page_size * head_dim)
    return float(jnp.dtype(dtype).itemsize)


@functools.cache
def key_rotation(head_dim: int) -> np.ndarray:
    """Orthonormal f32[Dh, Dh]: Sylvester Hadamard blocks (1/sqrt(n) scaled) down the diagonal,
    one per power of two in Dh's binary form (Dh = 64: one block; 96: 64 + 32)."""
    r = np.zeros((head_dim, head_dim), np.float64)
    at = 0
    for bit in reversed(range(head_dim.bit_length())):
        n = 1 << bit
        if head_dim & n:
            h = np.ones((1, 1))
            while h.shape[0] < n:
                h = np.block([[h, h], [h, -h]])
            r[at:at + n, at:at + n] = h / np.sqrt(n)
            at += n
    return r.astype(np.float32)


def rotate_for_fp8(x):
    """q or k [T, N, Dh] -> x @ key_rotation(Dh), computed in f32, in x's dtype."""
    rot = jnp.asarray(key_rotation(x.shape[-1]))
    return jnp.einsum("tnd,de->tne", x.astype(jnp.float32), rot).astype(x.dtype)


def write(cache, layer, slots, new, cu_q_lens):
    """One layer's new k or v [T, K, Dh] written at flat slots i32[T] (-1 skipped) -> the cache.

    cu_q_lens i32[S+1]: where each sequence's tokens start (fp8: its first token may continue a
    page written in an earlier step)."""
    if isinstance(cache, QuantizedPages):
        return _write_fp8(cache, layer, slots, new, cu_q_lens)
    _, N, page, _, _ = cache.shape
    pages = jnp.where(slots < 0, N, slots // page)  # out of range -> dropped by mode="drop"
    return cache.at[layer, pages, slots % page].set(new.astype(cache.dtype), mode="drop")


def _write_fp8(cache: QuantizedPages, layer, slots, new, cu_q_lens) -> QuantizedPages:
    vals, sc = cache.values, cache.scales  # vals: u8[Ll, N, page, K, Dh] (fp8 bits); sc: f32[Ll, N, 1, K, 1]
    _, N, page, _, _ = vals.shape
    T = slots.shape[0]
    valid = slots >= 0
    pages = jnp.where(valid, slots // page, N)  # pages: i32[T]; N is dropped by mode="drop"
    at = jnp.minimum(pages, N - 1)  # for reads
    off = slots % page
    x = new.astype(jnp.float32)  # x: f32[T, K, Dh]
    need = kv_quant.power_of_two_scale(jnp.max(jnp.abs(x), axis=-1))  # need: f32[T, K]
    prev = jnp.concatenate([jnp.full((1,), -2, slots.dtype), slots[:-1]])
    starts = valid & ((off == 0) | (prev != slots - 1))  # the batch's first write to its page
    keep = starts & (off > 0)  # ... to a page holding earlier tokens: its scale is kept
    old = sc[layer, at, 0, :, 0]  # old: f32[T, K]
    sc = sc.at[layer, jnp.where(starts, pages, N), 0, :, 0].set(jnp.where(keep[:, None], old, 0.0), mode="drop")
    sc = sc.at[layer, pages, 0, :, 0].max(need, mode="drop")
    scale = sc[layer, at, 0, :, 0]  # scale: f32[T, K], each token's page's new scale
    # A continued page is only ever a sequence's first token here: later tokens of the batch fill
    # pages in order, and a kvp group's share of a chunk starts on a page boundary.
    t0 = jnp.clip(cu_q_lens[:-1], 0, T - 1)  # t0: i32[S]
    grow = (cu_q_lens[1:] > cu_q_lens[:-1]) & keep[t0] & (scale[t0] > old[t0]).any(axis=-1)
    p0 = jnp.where(grow, pages[t0], N)
    ratio = jnp.where(grow[:, None], old[t0] / scale[t0], 1.0)  # ratio: f32[S, K] <= 1
    earlier = kv_quant.to_float(vals[layer, jnp.minimum(p0, N - 1)])  # earlier: f32[S, page, K, Dh]
    earlier = kv_quant.encode(earlier * ratio[:, None, :, None])  # |values| only shrink
    vals = vals.at[layer, p0].set(earlier, mode="drop")
    vals = vals.at[layer, pages, off].set(kv_quant.quantize(x, scale), mode="drop")
    return QuantizedPages(vals, sc)


def layer_view(kv_k, kv_v, layer, page_table):
    """Attention's view of one layer: (k_pages, v_pages, page_table + layer*N, scale kwargs)."""
    scales = {}
    if isinstance(kv_k, QuantizedPages):
        L, N, _, K, _ = kv_k.scales.shape
        scales = dict(k_scales=kv_k.scales.reshape(L * N, K), v_scales=kv_v.scales.reshape(L * N, K))
        kv_k, kv_v = kv_k.values, kv_v.values
    L, N = kv_k.shape[:2]
    flat = lambda c: c.reshape((L * N,) + c.shape[2:])  # noqa: E731
    return flat(kv_k), flat(kv_v), page_table + layer * N, scales
