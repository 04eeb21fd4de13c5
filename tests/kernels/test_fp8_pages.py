"""fp8 KV pages (`kv_quant`): every backend reads float8_e4m3fn pages (stored as their uint8 bits)
with per-page-and-head scales.

The reference here is independent of the backends' scaling: pages dequantised in numpy (value x
its page's scale) and fed to the unquantised dense reference. Scales span three decades across
pages and heads, so a backend that applies a neighbour page's (or head's) scale is far off.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels import api, kv_quant
from pallas_kernels.config import KernelConfig
from pallas_kernels.reference import paged_attention_xla

SMALL = KernelConfig(prefill_rows=32, block_kv=32, num_sms=4, programs_per_sm=1)


def quantize_batch(args, rng):
    """Contract args with f32 pages -> (fp8 args, scales, the pages the fp8 ones stand for in f32)."""
    q, k, v, *meta = args
    N, _, KVH, _ = k.shape
    out = []
    for pages in (k, v):
        spread = 10.0 ** rng.uniform(-2, 1, size=(N, 1, KVH, 1))  # per page and head magnitude
        x = np.asarray(pages, np.float32) * spread
        scales = np.abs(x).max(axis=(1, 3)) / kv_quant.FP8_MAX  # f32[N, KVH]
        f8 = kv_quant.quantize(jnp.asarray(x), jnp.asarray(scales)[:, None, :])
        exact = np.asarray(jax.lax.bitcast_convert_type(f8, jnp.float8_e4m3fn).astype(jnp.float32)) * scales[:, None, :, None]
        out.append((f8, jnp.asarray(scales, jnp.float32), jnp.asarray(exact)))
    (kf, ks, kx), (vf, vs, vx) = out
    return (q, kf, vf, *meta), dict(k_scales=ks, v_scales=vs), (q, kx, vx, *meta)


BACKENDS = {
    "xla": lambda *a, **kw: api.paged_attention(*a, backend="xla", **kw),
    "pod": lambda *a, interpret, **kw: api.pod_attention(*a, config=SMALL, interpret=interpret, **kw),
    "prefill": lambda *a, interpret, **kw: api.prefill_attention(*a, config=SMALL, interpret=interpret, **kw),
}


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["q-f32", "q-bf16"])
@pytest.mark.parametrize("name", list(BACKENDS))
def test_backend_reads_fp8_pages(make_batch, seqs, check, run, rng, interpret, name, dtype):
    args = make_batch(seqs(8), H=8, KVH=2, Dh=32, page=8, dtype=dtype)
    f8_args, scales, exact = quantize_batch(args, rng)
    fn = BACKENDS[name]
    kw = {} if name == "xla" else {"interpret": interpret}
    got = run(lambda *a, scale: fn(*a, scale=scale, **scales, **kw), f8_args)
    check(got, run(api.paged_attention_reference, exact), dtype)


def test_decode_kernel_reads_fp8_pages(make_batch, Seq, check, run, rng, interpret):
    batch = [Seq(1, 0), Seq(1, 7), Seq(1, 8), Seq(1, 41), Seq(1, 300, 0)]
    args = make_batch(batch, H=8, KVH=2, Dh=32, page=8)
    f8_args, scales, exact = quantize_batch(args, rng)
    got = run(lambda *a, scale: api.decode_attention(*a, scale=scale, config=SMALL, interpret=interpret,
                                                     **scales), f8_args)
    check(got, run(api.paged_attention_reference, exact), jnp.float32)


def test_reference_dequantises_like_the_backends(make_batch, seqs, check, run, rng):
    args = make_batch(seqs(8), H=4, KVH=2, Dh=32, page=8)
    f8_args, scales, exact = quantize_batch(args, rng)
    got = run(lambda *a, scale: api.paged_attention_reference(*a, scale=scale, **scales), f8_args)
    check(got, run(api.paged_attention_reference, exact), jnp.float32)


def test_a_neighbour_pages_scale_is_far_off(make_batch, seqs, run, rng):
    """Negative control: the scales really matter (the tests above could not pass without them)."""
    args = make_batch(seqs(8), H=4, KVH=2, Dh=32, page=8)
    f8_args, scales, exact = quantize_batch(args, rng)
    shifted = {k: jnp.roll(s, 1, axis=0) for k, s in scales.items()}
    got = run(lambda *a, scale: api.paged_attention(*a, scale=scale, **shifted), f8_args)
    want = run(api.paged_attention_reference, exact)
    assert np.abs(np.asarray(got[0]) - np.asarray(want[0])).max() > 0.1


def test_scales_must_match_the_pages(make_batch, seqs, rng):
    args = make_batch(seqs(8), H=4, KVH=2, Dh=32, page=8)
    f8_args, scales, _ = quantize_batch(args, rng)
    with pytest.raises(ValueError, match="need k_scales and v_scales"):
        api.paged_attention(*f8_args, scale=0.1)
    with pytest.raises(ValueError, match="need k_scales and v_scales"):
        api.paged_attention(*args, scale=0.1, **scales)
    with pytest.raises(ValueError, match="one scale per page and kv head"):
        api.paged_attention(*f8_args, scale=0.1, k_scales=scales["k_scales"][:, :1],
                            v_scales=scales["v_scales"])


def test_xla_key_splits_read_fp8_scales(make_batch, Seq, check, run, rng):
    """The XLA backend's narrow tiles walk several key blocks per step (`reference.key_splits`):
    each block's keys keep their own pages' scales."""
    batch = [Seq(128, 500), Seq(32, 400), Seq(1, 300)]
    args = make_batch(batch, H=8, KVH=2, Dh=32, page=8)
    f8_args, scales, exact = quantize_batch(args, rng)
    got = run(lambda *a, scale: paged_attention_xla(*a, scale=scale, prefill_block_pages=2, **scales), f8_args)
    check(got, run(api.paged_attention_reference, exact), jnp.float32)
