"""The prefill and decode kernels in turn over a hybrid batch (interpret mode) vs the dense reference,
and `paged_attention(backend="pallas")` choosing it or the fused kernel by `fuse_hybrid`."""

import jax.numpy as jnp
import pytest

from pallas_kernels.api import paged_attention
from pallas_kernels.config import KernelConfig
from pallas_kernels.reference import paged_attention_reference
from pallas_kernels.serial import serial_attention

SMALL = KernelConfig(prefill_rows=32, block_kv=32, num_sms=4, programs_per_sm=1)
SPLIT = KernelConfig(prefill_rows=16, block_kv=16, num_sms=64, max_prefill_splits=4, max_decode_splits=3)


@pytest.mark.parametrize("G,KVH,Dh,page,dtype,config", [
    (4, 2, 64, 8, jnp.float32, SMALL),
    (8, 1, 128, 16, jnp.bfloat16, SMALL),
    (1, 2, 64, 16, jnp.float32, SPLIT),
])
def test_serial_matches_reference(make_batch, seqs, check, run, G, KVH, Dh, page, dtype, config, interpret):
    """Every edge case of the hybrid batches: chunks at page edges, empty and padded tokens, decodes
    at 0 / page-1 / page / long contexts, KV lengths that differ from q_offset + q_len."""
    args = make_batch(seqs(page), H=G * KVH, KVH=KVH, Dh=Dh, page=page, dtype=dtype)
    check(run(serial_attention, args, config=config, interpret=interpret), run(paged_attention_reference, args), dtype)


@pytest.mark.parametrize("kind", ["decodes", "prefills", "two-token chunk"])
def test_serial_single_kind_batches(make_batch, Seq, check, run, kind, interpret):
    """A batch of one kind leaves the other kernel owning no token; the shortest chunk (2 tokens)
    is the prefill kernel's, a 1-token sequence the decode kernel's."""
    batch = {"decodes": [Seq(1, c) for c in (0, 7, 8, 9, 40)], "prefills": [Seq(9, 0), Seq(17, 30)],
             "two-token chunk": [Seq(1, 5), Seq(2, 0), Seq(1, 0)]}[kind]
    args = make_batch(batch, H=8, KVH=2, Dh=64, page=8)
    check(run(serial_attention, args, config=SMALL, interpret=interpret), run(paged_attention_reference, args),
          jnp.float32)


@pytest.mark.parametrize("fuse", [False, True])
def test_paged_attention_pallas_runs_the_configured_path(make_batch, seqs, check, run, fuse, interpret):
    args = make_batch(seqs(8), H=8, KVH=2, Dh=64, page=8)
    cfg = KernelConfig(prefill_rows=32, block_kv=32, num_sms=4, programs_per_sm=1, fuse_hybrid=fuse)
    got = run(paged_attention, args, backend="pallas", config=cfg, interpret=interpret)
    check(got, run(paged_attention_reference, args), jnp.float32)
