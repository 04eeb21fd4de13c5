"""A hybrid batch's paged attention as two launches: the prefill kernel, then the decode kernel.

Data flow (contract inputs as `reference.paged_attention_reference`):
  `serial_plan` (metadata only, once per model step):
      prefill.prefill_plan(min_len=2): tiles of the sequences with >= 2 query tokens (the
          chunks), their work list and launch order
      decode.decode_plan(decodes_only=True): flash-decoding splits of the 1-token sequences (the
          chunks' programs walk no keys) and which tokens they own
  `serial_attention` (every layer): prefill.prefill_run -> (out, lse, owned: the chunks' tokens),
      decode.decode_run -> (out, lse, owned: the decodes' tokens)
      -> combine.assemble (the owners are disjoint) -> (out [T, H, Dh], lse f32[T, H]).

Which tokens are chunks and which decodes is read from the traced metadata, so one compiled
program serves every mix of a shape bucket, decode-only batches included. The plan depends only
on the step's metadata, so a model builds it once before its layer loop and passes it to every
layer (`plan=`, shifted to the layer's pages with `with_first_page`): on an H200 the work lists
built inside the layer scan ran in every layer (a sort, a cumsum, searchsorted loops: 30.9 sorts
a decode tick for 32 layers, benchmarks/results/h200/run7_profile_vs_hf), where XLA:CPU's
while-loop invariant code motion had moved them out. This is what
`paged_attention(backend="pallas")` runs unless `KernelConfig.fuse_hybrid` asks for the fused POD
kernel: on an H200 (benchmarks/results/h200/run2_kernels) the two kernels in turn took 0.67-0.82x
the fused kernel's time on hybrid batches, and the decode kernel 0.31-0.56x of it on decodes.
"""

from __future__ import annotations

import dataclasses

import jax

from pallas_kernels import combine, metadata
from pallas_kernels.config import DEFAULT_CONFIG, KernelConfig
from pallas_kernels.decode import DecodePlan, decode_plan, decode_run
from pallas_kernels.prefill import PrefillPlan, prefill_plan, prefill_run


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SerialPlan:
    """Both kernels' plans for one hybrid batch (a pytree: it can close over a layer loop)."""

    pre: PrefillPlan
    dec: DecodePlan

    def with_first_page(self, first_page) -> "SerialPlan":
        """The plan over pages [first_page, first_page + num_pages) of a larger (flattened) cache:
        a model's layer `l` of a [L * N, ...] cache starts at page l * N."""
        return SerialPlan(self.pre.with_first_page(first_page), self.dec.with_first_page(first_page))


def serial_plan(page_table, cu_q_lens, q_offsets, kv_lens, *, num_tokens: int, num_heads: int, kv_heads: int,
                page_size: int, num_pages: int, config: KernelConfig = DEFAULT_CONFIG) -> SerialPlan:
    """Work lists, launch orders and token owners of a hybrid batch, from traced metadata.
    page_table holds ids in [0, num_pages) (one layer's pages)."""
    tiles = config.tiles(num_heads // kv_heads, page_size)
    meta = (page_table, cu_q_lens, q_offsets, kv_lens)
    return SerialPlan(
        prefill_plan(*meta, num_tokens=num_tokens, kv_heads=kv_heads, tiles=tiles, num_pages=num_pages,
                     config=config, min_len=2),
        decode_plan(*meta, num_tokens=num_tokens, kv_heads=kv_heads, tiles=tiles, num_pages=num_pages,
                    config=config, decodes_only=True))


def serial_attention(q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, *, scale,
                     config: KernelConfig = DEFAULT_CONFIG, interpret: bool | None = None,
                     plan: SerialPlan | None = None, k_scales=None, v_scales=None):
    """Contract signature: prefill chunks through the prefill kernel, decodes through the decode kernel.

    plan: `serial_plan` of the same metadata and config (the metadata arguments are then not
    read); None builds it here."""
    kv = metadata.check_shapes(q, k_pages, v_pages, k_scales, v_scales)
    T, H, _ = q.shape
    N, page_size, KVH, _ = k_pages.shape
    if plan is None:
        plan = serial_plan(page_table, cu_q_lens, q_offsets, kv_lens, num_tokens=T, num_heads=H, kv_heads=KVH,
                           page_size=page_size, num_pages=N, config=config)
    tiles = config.tiles(H // KVH, page_size)
    kw = dict(tiles=tiles, scale=scale, config=config, interpret=interpret)
    return combine.assemble([prefill_run(q, kv, plan.pre, **kw), decode_run(q, kv, plan.dec, **kw)], q.dtype)
