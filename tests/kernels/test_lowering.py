"""Cross-lowering: every Pallas kernel lowered for an H100 from this CPU-only machine.

Interpret mode skips Triton's rules; this catches their violations in CI without a GPU. Each
kernel is traced under an abstract H100 mesh and lowered with `lowering_platforms=("cuda",)`,
which runs the Pallas -> Triton-dialect lowering (power-of-two shapes, one indexer per ref
access, no scratch shapes / scalar prefetch, supported primitives). Every Triton module built
is also run through the MLIR verifier and its `tt.dot` shapes are checked against M, N, K >= 16.

What this cannot catch: Triton's own compilation to PTX (shared-memory limits, layouts,
register pressure) happens inside XLA on a real GPU; `benchmarks/kernels_gpu.py` covers that.
"""

import re

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
from jax.sharding import AbstractDevice, AbstractMesh, use_abstract_mesh

from pallas_kernels.decode import decode_attention
from pallas_kernels.pod import pod_attention
from pallas_kernels.serial import serial_attention
from pallas_kernels.prefill import prefill_attention

H100 = AbstractDevice("NVIDIA H100 80GB HBM3", 132, "cuda")
DOT = re.compile(r"tt\.dot .*: tensor<(\d+)x(\d+)x\w+> \* tensor<(\d+)x(\d+)x\w+>")


@pytest.fixture
def triton_modules(monkeypatch):
    """Verify and collect (as text) every Triton module the Pallas lowering builds."""
    from jax._src.pallas.triton import lowering

    built = []
    original = lowering.lower_jaxpr_to_triton_module

    def verified(*args, **kwargs):
        result = original(*args, **kwargs)
        assert result.module.operation.verify()
        built.append(result.module.operation.get_asm())
        return result

    monkeypatch.setattr(lowering, "lower_jaxpr_to_triton_module", verified)
    return built


def lower_for_h100(fn, *shapes):
    mesh = AbstractMesh((1,), ("x",), abstract_device=H100)
    with use_abstract_mesh(mesh):
        return jax.jit(fn).trace(*shapes).lower(lowering_platforms=("cuda",)).as_text()


def contract_shapes(*, T, H, KVH, Dh, page, pages, S, cols, dtype=jnp.bfloat16):
    sds = jax.ShapeDtypeStruct
    return (sds((T, H, Dh), dtype), sds((pages, page, KVH, Dh), dtype), sds((pages, page, KVH, Dh), dtype),
            sds((S, cols), jnp.int32), sds((S + 1,), jnp.int32), sds((S,), jnp.int32), sds((S,), jnp.int32))


# Llama-3-70B-like per device: 64 query heads over 8 kv heads (GQA 8), head dim 128, bf16;
# a 2048-token chunk plus 64 decodes over a 32K-token page table; and GQA 4 / page 8 / Dh 64.
REALISTIC = [
    dict(T=2048 + 64, H=64, KVH=8, Dh=128, page=16, pages=16384, S=65, cols=2048),
    dict(T=1024 + 32, H=32, KVH=8, Dh=64, page=8, pages=8192, S=33, cols=1024),
]
KERNELS = {"prefill": prefill_attention, "decode": decode_attention, "pod": pod_attention}


@pytest.mark.parametrize("shape", REALISTIC, ids=["gqa8-dh128-page16", "gqa4-dh64-page8"])
@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_lowers_for_h100(triton_modules, name, shape):
    fn = KERNELS[name]
    text = lower_for_h100(lambda *a: fn(*a, scale=0.088, interpret=False), *contract_shapes(**shape))
    assert text.count("__gpu$xla.gpu.triton") == 1, "exactly one Triton kernel per call"
    assert len(triton_modules) == 1
    dots = [tuple(map(int, m)) for m in DOT.findall(triton_modules[0])]
    assert len(dots) >= 4, "q.kT and p.v, in the unmasked and the masked KV loop"
    for m, k, k2, n in dots:
        assert k == k2 and min(m, k, n) >= 16, f"tl.dot needs M, N, K >= 16, got {m}x{k} * {k2}x{n}"
    G = shape["H"] // shape["KVH"]
    rows = {m for m, *_ in dots}
    if name in ("prefill", "pod"):
        assert 128 in rows, "prefill tile: BQ x G = 128 rows"
    if name in ("decode", "pod"):
        assert max(16, G) in rows, "decode tile: the G heads padded to 16 rows"


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_lowers_for_h100_on_fp8_pages(triton_modules, name):
    """fp8 pages (uint8 bits of float8_e4m3fn, Triton's fp8e4nv) with their f32 scales [N, KVH]:
    the page loads, the bitcast, the per-key scale gathers and the bf16 dots all lower."""
    shape = REALISTIC[0]
    q, k, v, *meta = contract_shapes(**shape)
    sds = jax.ShapeDtypeStruct
    f8 = sds(k.shape, jnp.uint8)
    scales = sds((shape["pages"], shape["KVH"]), jnp.float32)
    fn = KERNELS[name]
    text = lower_for_h100(lambda q, k, v, *rest: fn(q, k, v, *rest[:4], k_scales=rest[4], v_scales=rest[5],
                                                     scale=0.088, interpret=False),
                          q, f8, f8, *meta, scales, scales)
    assert text.count("__gpu$xla.gpu.triton") == 1
    module = triton_modules[0]
    assert "f8E4M3FN" in module, "the kernel converts the fp8 bits itself"
    dots = [tuple(map(int, m)) for m in DOT.findall(module)]
    assert len(dots) >= 4 and all(min(m, k, n) >= 16 for m, k, _, n in dots)


@pytest.mark.parametrize("fp8", [False, True])
def test_serial_hybrid_lowers_to_the_two_kernels(triton_modules, fp8):
    """`serial_attention` (what `paged_attention(backend="pallas")` runs): the prefill kernel and
    the decode kernel, one Triton module each, on bf16 and on fp8 pages."""
    shape = REALISTIC[0]
    q, k, v, *meta = contract_shapes(**shape)
    if fp8:
        f8 = jax.ShapeDtypeStruct(k.shape, jnp.uint8)
        scales = jax.ShapeDtypeStruct((shape["pages"], shape["KVH"]), jnp.float32)
        text = lower_for_h100(lambda q, k, v, *rest: serial_attention(
            q, k, v, *rest[:4], k_scales=rest[4], v_scales=rest[5], scale=0.088, interpret=False),
            q, f8, f8, *meta, scales, scales)
    else:
        text = lower_for_h100(lambda *a: serial_attention(*a, scale=0.088, interpret=False), q, k, v, *meta)
    assert text.count("__gpu$xla.gpu.triton") == 2 and len(triton_modules) == 2


def test_f32_dots_are_exact_not_tf32(triton_modules):
    """Triton would run f32 dots as tf32 (~1e-3 error) unless asked for ieee precision."""
    shape = dict(REALISTIC[1], dtype=jnp.float32)
    lower_for_h100(lambda *a: decode_attention(*a, scale=0.125, interpret=False), *contract_shapes(**shape))
    dots = [line for line in triton_modules[0].splitlines() if "tt.dot" in line]
    assert dots and not any("tf32" in line for line in dots), dots  # ieee is the unprinted default


def test_cross_lowering_rejects_what_triton_rejects():
    """Negative control: the check has teeth (two indexers on one ref access fail to lower)."""

    def kernel(x_ref, idx_ref, o_ref):
        o_ref[...] = x_ref.at[0][idx_ref[...]]  # `x_ref[0, idx]` would be the Triton-friendly form

    def f(x, idx):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 32), x.dtype),
                              compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=2))(x, idx)

    sds = jax.ShapeDtypeStruct
    with pytest.raises(NotImplementedError, match="multiple indexers"):
        lower_for_h100(f, sds((2, 64, 32), jnp.float32), sds((16,), jnp.int32))
