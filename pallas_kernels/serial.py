"""A hybrid batch's paged attention as two launches: the prefill kernel, then the decode kernel.

Data flow (contract inputs as `reference.paged_attention_reference`):
  prefill.prefill_part(min_len=2): tiles of the sequences with >= 2 query tokens (the chunks)
      -> (out, lse, owned: the chunks' tokens)
  decode.decode_part(decodes_only=True): flash-decoding splits of the 1-token sequences (the
      chunks' programs walk no keys) -> (out, lse, owned: the decodes' tokens)
  -> combine.assemble (the owners are disjoint) -> (out [T, H, Dh], lse f32[T, H]).

Which tokens are chunks and which decodes is read from the traced metadata, so one compiled
program serves every mix of a shape bucket, decode-only batches included. The work lists are built
inside every layer's call but depend only on the step's metadata, which the layer scan carries
unchanged: XLA's while-loop invariant code motion moves them out of the scan (the CPU-compiled
engine step with this backend has the work list's sort and searchsorted loops in its entry
computation, before the layer loop; the GPU pipeline runs the same pass), so they run once a step. This is what
`paged_attention(backend="pallas")` runs unless `KernelConfig.fuse_hybrid` asks for the fused POD
kernel: on an H200 (benchmarks/results/h200/run2_kernels) the two kernels in turn took 0.67-0.82x
the fused kernel's time on hybrid batches, and the decode kernel 0.31-0.56x of it on decodes.
"""

from __future__ import annotations

from pallas_kernels import combine
from pallas_kernels.config import DEFAULT_CONFIG, KernelConfig
from pallas_kernels.decode import decode_part
from pallas_kernels.prefill import prefill_part


def serial_attention(q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, *, scale,
                     config: KernelConfig = DEFAULT_CONFIG, interpret: bool | None = None,
                     k_scales=None, v_scales=None):
    """Contract signature: prefill chunks through the prefill kernel, decodes through the decode kernel."""
    args = (q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens)
    kw = dict(scale=scale, config=config, interpret=interpret, k_scales=k_scales, v_scales=v_scales)
    return combine.assemble([prefill_part(*args, min_len=2, **kw), decode_part(*args, decodes_only=True, **kw)],
                            q.dtype)
