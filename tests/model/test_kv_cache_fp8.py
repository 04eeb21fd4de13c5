"""fp8 KV cache (`model.kv_cache`): what the writer stores, and the model on it vs a bf16 cache.

The writer is checked against a plain f32 cache written with the same slots: every page's scale
is the smallest power of two >= amax / 448 of the tokens the page holds now (a reused page
forgets its earlier request's scale), and every stored element is within one fp8 rounding of the
true value (plus subnormal steps), also after a page's earlier tokens were re-quantised because a
later token raised its scale. The model's cache does not depend on how a prompt was chunked.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from medha_jax.demo_model import DEMO_CONFIG, byte_tokenizer, load_demo
from medha_jax.mesh import make_mesh
from medha_jax.model import init_kv_cache, kv_cache, kv_cache_bytes_per_page, make_forward, make_inputs
from medha_jax.model.kv_cache import QuantizedPages, write
from pallas_kernels import kv_quant
from pallas_kernels.reference import paged_attention_xla

PAGE, N, K, DH = 4, 12, 2, 8


def _slots(pages, start, n):
    pos = np.arange(start, start + n)
    return np.asarray(pages)[pos // PAGE] * PAGE + pos % PAGE


@jax.jit
def _write_both(fp8, plain, slots, new, cu):
    return write(fp8, 0, slots, new, cu), write(plain, 0, slots, new, cu)


def test_writer_keeps_each_pages_scale_at_its_amax_and_values_within_fp8_rounding():
    rng = np.random.default_rng(0)
    fp8 = QuantizedPages(jnp.zeros((1, N, PAGE, K, DH), kv_quant.STORAGE), jnp.zeros((1, N, 1, K, 1), jnp.float32))
    plain = jnp.zeros((1, N, PAGE, K, DH), jnp.float32)
    tables = {0: [3, 7, 1], 1: [5, 0, 9, 2], 2: [11, 4]}
    lens = {0: 0, 1: 0, 2: 0}
    # chunks (and decodes) of three sequences, several per batch; magnitudes grow so scales rise
    steps = [[(0, 5), (1, 3)], [(0, 1), (1, 6), (2, 2)], [(0, 1), (1, 1), (2, 3)], [(0, 2), (2, 1)],
             [(0, 1), (1, 1), (2, 1)], [(1, 2), (0, 1)]]
    for i, step in enumerate(steps):
        slots, cu = [], [0]
        for s, n in step:
            slots.extend(_slots(tables[s], lens[s], n))
            lens[s] += n
            cu.append(cu[-1] + n)
        pad = 3  # padding tokens: slot -1
        T = len(slots) + pad
        new = rng.standard_normal((T, K, DH)).astype(np.float32) * (1 + i) * rng.uniform(0.2, 2, (T, K, 1))
        slot_arr = jnp.asarray(slots + [-1] * pad, jnp.int32)
        fp8, plain = _write_both(fp8, plain, slot_arr, jnp.asarray(new), jnp.asarray(cu, jnp.int32))
    vals = np.asarray(kv_quant.to_float(fp8.values[0]))
    scales = np.asarray(fp8.scales[0, :, 0, :, 0])  # [N, K]
    truth = np.asarray(plain[0])
    for s, table in tables.items():
        for j, p in enumerate(table):
            held = min(max(lens[s] - j * PAGE, 0), PAGE)
            if not held:
                continue
            amax = np.abs(truth[p, :held]).max(axis=(0, 2))  # [K]
            np.testing.assert_array_equal(scales[p], 2.0 ** np.ceil(np.log2(amax / kv_quant.FP8_MAX)))
            got = vals[p, :held] * scales[p][None, :, None]
            # e4m3 keeps 3 mantissa bits: rounding a normal number errs by <= 2^-4 of it; power-of-two
            # re-scaling is exact except into subnormals (step 2^-9 of the scale), at most twice.
            bound = np.abs(truth[p, :held]) / 16 + 2 * scales[p][None, :, None] * 2.0 ** -10
            assert (np.abs(got - truth[p, :held]) <= bound * (1 + 1e-6)).all()
            rescaled = np.abs(got - truth[p, :held]) > np.abs(truth[p, :held]) / 16
            assert rescaled.mean() < 0.05  # the subnormal allowance is rarely used


def test_a_reused_page_forgets_the_earlier_requests_scale():
    fp8 = QuantizedPages(jnp.zeros((1, N, PAGE, K, DH), kv_quant.STORAGE), jnp.zeros((1, N, 1, K, 1), jnp.float32))
    plain = jnp.zeros((1, N, PAGE, K, DH), jnp.float32)
    cu = jnp.asarray([0, 2], jnp.int32)
    big = jnp.full((2, K, DH), 100.0)
    fp8, plain = _write_both(fp8, plain, jnp.asarray([20, 21], jnp.int32), big, cu)  # page 5
    small = jnp.full((2, K, DH), 0.01).at[1].set(-0.02)
    fp8, plain = _write_both(fp8, plain, jnp.asarray([20, 21], jnp.int32), small, cu)  # page 5 again, offset 0
    scale = 2.0 ** np.ceil(np.log2(0.02 / kv_quant.FP8_MAX))
    np.testing.assert_array_equal(np.asarray(fp8.scales[0, 5, 0, :, 0]), scale)
    got = np.asarray(kv_quant.to_float(fp8.values[0, 5, :2])) * scale
    np.testing.assert_allclose(got[:, 0, 0], [0.01, -0.02], rtol=0.07)


def test_fp8_pages_take_about_half_the_bytes_of_bf16():
    mesh = make_mesh({"tp": 1}, devices=jax.devices()[:1])
    bf16 = kv_cache_bytes_per_page(DEMO_CONFIG, mesh, 16, jnp.bfloat16)
    fp8 = kv_cache_bytes_per_page(DEMO_CONFIG, mesh, 16, kv_quant.FP8)
    assert 0.5 < fp8 / bf16 < 0.51  # the scales: 4 bytes per page and head
    k, _ = init_kv_cache(DEMO_CONFIG, mesh, 8, 16, kv_quant.FP8)
    assert sum(a.nbytes for a in jax.tree.leaves(k)) * 2 == fp8 * 8


def test_the_fp8_cache_does_not_depend_on_the_chunking():
    """One prompt prefilled whole, in 16-token chunks and one token at a time: the same cache
    up to f32 noise in k/v (an element may round to a neighbouring fp8 value), although the
    pages' scales grew token by token in the last run."""
    mesh = make_mesh({"tp": 1}, devices=jax.devices()[:1])
    _, params, _ = load_demo(mesh)
    ids = byte_tokenizer().encode("fp8 pages hold the keys and values of this prompt, " * 3)[:144]
    caches = [_run_chunks(mesh, params, ids, kv_quant.FP8, chunk)[1] for chunk in (144, 16, 1)]
    deq = [np.asarray(kv_quant.to_float(c.values)) * np.asarray(c.scales) for c in caches]
    for c, d in zip(caches[1:], deq[1:]):
        np.testing.assert_array_equal(np.asarray(c.scales), np.asarray(caches[0].scales))
        assert np.sqrt(((d - deq[0]) ** 2).mean() / (deq[0] ** 2).mean()) < 1e-3


def _run_chunks(mesh, params, ids, dtype, chunk):
    """Prefill ids in chunks of `chunk` tokens -> (last-token logits per chunk, final k cache)."""
    fwd = jax.jit(make_forward(DEMO_CONFIG, mesh, paged_attention_xla), donate_argnums=(1, 2))
    k, v = init_kv_cache(DEMO_CONFIG, mesh, 32, 8, dtype)
    pages = list(range(31, -1, -1))
    out = []
    for s in range(0, len(ids), chunk):
        part = ids[s:s + chunk]
        logits, k, v = fwd(params, k, v, make_inputs([(part, s, pages)], 8, pad_tokens=chunk))
        out.append(np.asarray(logits[0]))
    return np.stack(out), k


def _fake_fp8_attention(q, k_pages, v_pages, *meta, scale):
    """Unquantised attention over pages rounded to fp8 at each page's power-of-two scale (right
    for pages written by one prefill into a zero cache: a page's amax is its tokens'), the keys
    rounded after the Hadamard rotation the fp8 cache stores them in, the query rotated alike."""
    def rounded(pages):  # pages: f32[N, page, K, Dh]
        amax = jnp.abs(pages).max(axis=(1, 3), keepdims=True)
        s = 2.0 ** jnp.ceil(jnp.log2(jnp.maximum(amax / 448.0, 1e-30)))
        return (pages / s).astype(jnp.float8_e4m3fn).astype(jnp.float32) * s

    rot = jnp.asarray(kv_cache.key_rotation(q.shape[-1]))
    return paged_attention_xla(q @ rot, rounded(k_pages @ rot), rounded(v_pages), *meta, scale=scale)


@pytest.mark.parametrize("tp", [1, 2])
def test_model_on_an_fp8_cache_is_the_model_on_fp8_rounded_kv(tp):
    """The whole path (writer, scales through the layer scan and shard_map, the XLA backend's
    column scaling) against attention over an f32 cache rounded to fp8 independently."""
    mesh = make_mesh({"tp": tp}, devices=jax.devices()[:tp])
    _, params, _ = load_demo(mesh)
    ids = byte_tokenizer().encode("fp8 pages hold the keys and values of this prompt, " * 2)[:100]
    inp = make_inputs([(ids, 0, list(range(31, -1, -1)))], 8)
    k, v = init_kv_cache(DEMO_CONFIG, mesh, 32, 8, kv_quant.FP8)
    got = np.asarray(jax.jit(make_forward(DEMO_CONFIG, mesh, paged_attention_xla))(params, k, v, inp)[0])
    k, v = init_kv_cache(DEMO_CONFIG, mesh, 32, 8, jnp.float32)
    want = np.asarray(jax.jit(make_forward(DEMO_CONFIG, mesh, _fake_fp8_attention))(params, k, v, inp)[0])
    exact = np.asarray(jax.jit(make_forward(DEMO_CONFIG, mesh, paged_attention_xla))(params, k, v, inp)[0])
    assert np.abs(got - want).max() < 1e-3 * want.std()
    assert np.abs(got - exact).max() > 1e-2 * want.std()  # fp8 rounding is visible: the check has teeth


@pytest.mark.parametrize("head_dim", [64, 96, 80, 128])
def test_the_key_rotation_is_orthonormal_hadamard_blocks(head_dim):
    r = kv_cache.key_rotation(head_dim).astype(np.float64)
    np.testing.assert_allclose(r @ r.T, np.eye(head_dim), atol=1e-6)
    n = 1 << (head_dim.bit_length() - 1)  # the first block: every entry +-1/sqrt(n)
    np.testing.assert_allclose(np.abs(r[:n, :n]), 1.0 / np.sqrt(n), rtol=1e-6)
    q, k = np.random.default_rng(0).normal(size=(2, 5, head_dim))
    np.testing.assert_allclose((q @ r) @ (k @ r).T, q @ k.T, atol=1e-4)  # scores unchanged


def test_rotated_keys_round_with_less_score_error_where_queries_and_keys_share_outlier_channels():
    """Why the fp8 cache stores keys rotated: with a few channels large in both q and k (as in
    Llama's keys), fp8 rounding error in those channels dominates q . k; spread over all channels
    by the rotation, the same rounding moves the scores less."""
    rng = np.random.default_rng(0)
    dh = 64
    boost = np.ones(dh)
    boost[[3, 17]] = 20.0  # two outlier channels
    q = rng.normal(size=(64, dh)) * boost
    k = rng.normal(size=(256, dh)) * boost
    r = kv_cache.key_rotation(dh)

    def fp8(x):
        s = 2.0 ** np.ceil(np.log2(np.abs(x).max() / 448.0))
        return np.asarray(jnp.asarray(x / s, jnp.float32).astype(jnp.float8_e4m3fn).astype(jnp.float32)) * s

    exact = q @ k.T
    plain = np.abs(q @ fp8(k).T - exact).mean()
    rotated = np.abs((q @ r) @ fp8(k @ r).T - exact).mean()
    assert rotated < 0.5 * plain, (rotated, plain)
