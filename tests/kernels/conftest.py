"""Factories for the kernel tests: random paged batches and a tolerance-aware comparison.

`make_batch(seqs, H=, KVH=, Dh=, page=, dtype=)` builds the contract's inputs for a list of
`Seq(q_len, ctx, kv_len=None)` (ctx = q_offset: tokens cached before the chunk; kv_len
defaults to ctx + q_len, smaller on a KVP shard), with pages scattered at random over the pool,
garbage ids in the unused table columns and padding tokens after the last sequence.
Inputs are fresh random draws; the seed comes from the test id (reproducible, different per test;
set KERNEL_TEST_SEED to draw others).

On a CPU the kernels run in Pallas interpret mode; with `JAX_PLATFORMS=cuda` the same tests run
the compiled Triton kernels (`interpret` fixture) against a reference computed at full f32
matmul precision (XLA's GPU default would round f32 dots to tf32).
"""

from __future__ import annotations

import dataclasses
import os
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ON_GPU = jax.default_backend() == "gpu"
if ON_GPU:  # the reference's einsums in exact f32, like the kernels' HIGHEST-precision dots
    jax.config.update("jax_default_matmul_precision", "highest")

TOL = {jnp.float32: 1e-4, jnp.bfloat16: 2e-2}
# Kernel and reference each round their bf16 output once, so they may differ by one bf16 ulp
# (2^-7 of the value) on top of the absolute tolerance; it matters only where |out| > 1 (rows that
# see a handful of keys). f32 outputs are compared with the absolute tolerance alone.
RTOL = {jnp.float32: 0.0, jnp.bfloat16: 2.0**-7}


@dataclasses.dataclass(frozen=True)
class Seq:
    q_len: int
    ctx: int
    kv_len: int | None = None

    @property
    def kv(self) -> int:
        return self.ctx + self.q_len if self.kv_len is None else self.kv_len


@pytest.fixture
def rng(request):
    seed = zlib.crc32(request.node.nodeid.encode()) ^ int(os.environ.get("KERNEL_TEST_SEED", "0"))
    return np.random.default_rng(seed)


@pytest.fixture
def make_batch(rng):
    def make(seqs, *, H, KVH, Dh, page, dtype=jnp.float32, pad_tokens=3, cols=None, pages=None):
        """cols / pages fix the table width and pool size (a shape bucket); default: just enough."""
        kv = [s.kv for s in seqs]
        need = [-(-n // page) for n in kv]
        P = max(need) + 1 if cols is None else cols
        N = sum(need) + 4 if pages is None else pages
        assert P >= max(need) and N >= sum(need)
        perm = rng.permutation(N)
        table = rng.integers(-1, N + 3, size=(len(seqs), P))  # garbage past each sequence's pages
        at = 0
        for s, n in enumerate(need):
            table[s, :n] = perm[at:at + n]
            at += n
        q_lens = [s.q_len for s in seqs]
        cu = np.concatenate([[0], np.cumsum(q_lens)])
        T = int(cu[-1]) + pad_tokens
        draw = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32).astype(dtype)
        return (
            draw(T, H, Dh),
            draw(N, page, KVH, Dh),
            draw(N, page, KVH, Dh),
            jnp.asarray(table, jnp.int32),
            jnp.asarray(cu, jnp.int32),
            jnp.asarray([s.ctx for s in seqs], jnp.int32),
            jnp.asarray(kv, jnp.int32),
        )

    return make


def assert_attention_close(got, want, dtype):
    """(out, lse) vs the reference: same -inf rows, finite lse and out within the dtype's tolerance."""
    tol = TOL[dtype]
    out, lse = (np.asarray(x, np.float32) for x in got)
    ref_out, ref_lse = (np.asarray(x, np.float32) for x in want)
    assert not np.isnan(out).any() and not np.isnan(lse).any()
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(ref_lse))
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[finite], ref_lse[finite], atol=tol, rtol=0)
    np.testing.assert_allclose(out, ref_out, atol=tol, rtol=RTOL[dtype])
    assert (out[~finite] == 0).all()


@pytest.fixture
def check():
    return assert_attention_close


def hybrid_seqs(p: int):
    """A hybrid batch for page size p: prefill chunks first, decodes after, every edge case."""
    return [
        Seq(p + 1, 0),  # first chunk (context 0) of page + 1 tokens
        Seq(p - 1, p),  # chunk of page - 1 after a full page
        Seq(2 * p + 3, p + 1),  # chunk not a multiple of any block, context page + 1
        Seq(p, 3),  # chunk of exactly a page
        Seq(0, 5),  # no query tokens this step
        Seq(5, 1000, p + 1),  # KVP shard with earlier keys only: every local key visible
        Seq(3, 200, 0),  # KVP shard with no pages for this sequence
        Seq(1, 7),  # prefill chunk of one token
        Seq(1, 0),  # decode, kv 1
        Seq(1, p - 1),  # decode, kv page
        Seq(1, p),  # decode, kv page + 1
        Seq(1, 3 * p + 2),  # decode, longer context
        Seq(1, 500, 0),  # decode with no pages on this shard
    ]


@pytest.fixture
def seqs():
    return hybrid_seqs


@pytest.fixture(name="Seq")
def seq_class():
    return Seq


@pytest.fixture
def interpret():
    """Pallas interpret mode off-GPU; the compiled kernels on a GPU."""
    return not ON_GPU


# interpret-mode kernels compile ~3x faster without XLA's CPU optimisations; a GPU compiles as usual
FAST_COMPILE = {} if ON_GPU else {"xla_backend_optimization_level": 0}


def run_jitted(fn, args, *, scale=None, **kw):
    """jit fn(*args, scale=, **kw) and run it, compiled without XLA's slow CPU optimisations.

    scale defaults to 1/sqrt(Dh), as in a model: bf16 outputs then stay averages of magnitude < 1,
    where 2e-2 is several bf16 ulps."""
    import jax

    scale = args[0].shape[-1] ** -0.5 if scale is None else scale

    compiled = jax.jit(lambda *a: fn(*a, scale=scale, **kw)).lower(*args).compile(
        compiler_options=FAST_COMPILE)
    return compiled(*args)


@pytest.fixture
def run():
    return run_jitted
