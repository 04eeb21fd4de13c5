"""One entry point for paged attention, picking the backend; the kernels also stand alone.

Every function here has the contract signature of `reference.paged_attention_reference`:
`fn(q [T, H, Dh], k_pages [N, page, KVH, Dh], v_pages, page_table i32[S, P], cu_q_lens i32[S+1],
q_offsets i32[S], kv_lens i32[S], *, scale, k_scales=None, v_scales=None) -> (out [T, H, Dh],
lse f32[T, H])`; fp8 pages come with their scales f32[N, KVH] (`kv_quant`).

- `paged_attention(..., backend="xla")`: `reference.paged_attention_xla` (any platform).
- `paged_attention(..., backend="pallas")`: the prefill kernel on the chunks and the decode kernel
  on the decodes (`serial.serial_attention`), or with `KernelConfig(fuse_hybrid=True)` the fused
  POD kernel over the whole hybrid batch (`pod.pod_attention`); interpret mode automatically when
  the default backend is not a GPU.
- `prefill_attention` / `decode_attention` / `pod_attention`: the three kernels;
  `serial_attention`: the first two in turn over a hybrid batch.
- `attention_plan(...)`: what the pallas backend derives from the metadata alone (`serial_plan`,
  or `pod_plan` when it fuses); a model builds it once per step and passes `plan=` (shifted to
  the layer's pages with `plan.with_first_page`) to every layer's `paged_attention`.

All are traceable with the metadata as traced arrays: work lists are built with jnp inside the
trace and sized from static shapes only, so a jitted step compiles once per shape bucket.
"""

from __future__ import annotations

from pallas_kernels.config import DEFAULT_CONFIG, KernelConfig, device_config
from pallas_kernels.decode import decode_attention
from pallas_kernels.merge import merge_attention
from pallas_kernels.pod import PodPlan, pod_attention, pod_plan
from pallas_kernels.prefill import prefill_attention
from pallas_kernels.reference import paged_attention_reference, paged_attention_xla
from pallas_kernels.serial import SerialPlan, serial_attention, serial_plan

BACKENDS = ("xla", "pallas")

__all__ = [
    "BACKENDS",
    "DEFAULT_CONFIG",
    "KernelConfig",
    "PodPlan",
    "SerialPlan",
    "attention_plan",
    "decode_attention",
    "device_config",
    "merge_attention",
    "paged_attention",
    "paged_attention_reference",
    "paged_attention_xla",
    "pod_attention",
    "pod_plan",
    "prefill_attention",
    "serial_attention",
    "serial_plan",
]


def attention_plan(page_table, cu_q_lens, q_offsets, kv_lens, *, num_tokens: int, num_heads: int,
                   kv_heads: int, page_size: int, num_pages: int, config: KernelConfig | None = None):
    """The pallas backend's per-step plan for this metadata: `pod_plan` when `config.fuse_hybrid`,
    else `serial_plan` (config None: `device_config()`, as `paged_attention` resolves it)."""
    cfg = device_config() if config is None else config
    make = pod_plan if cfg.fuse_hybrid else serial_plan
    return make(page_table, cu_q_lens, q_offsets, kv_lens, num_tokens=num_tokens, num_heads=num_heads,
                kv_heads=kv_heads, page_size=page_size, num_pages=num_pages, config=cfg)


def paged_attention(q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, *, scale,
                    backend: str = "xla", interpret: bool | None = None,
                    config: KernelConfig | None = None, plan: PodPlan | SerialPlan | None = None,
                    k_scales=None, v_scales=None):
    """Paged attention over a hybrid batch (prefill chunks first, then 1-token decodes).

    config: Pallas tuning (default `device_config()`); plan: the pallas backend's
    `attention_plan` of the same metadata and config (the metadata arguments are then not read;
    the xla backend takes none); k_scales/v_scales: f32[N, KVH] for fp8 pages (`kv_quant`), else None.
    """
    args = (q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens)
    scales = dict(k_scales=k_scales, v_scales=v_scales)
    if backend == "xla":
        if plan is not None:
            raise ValueError("the xla backend takes no plan (attention_plan is the pallas backend's)")
        return paged_attention_xla(*args, scale=scale, **scales)
    if backend == "pallas":
        cfg = device_config() if config is None else config
        kind = PodPlan if cfg.fuse_hybrid else SerialPlan
        if plan is not None and not isinstance(plan, kind):
            raise ValueError(f"plan is a {type(plan).__name__}; fuse_hybrid={cfg.fuse_hybrid} needs a {kind.__name__}")
        if cfg.fuse_hybrid:
            return pod_attention(*args, scale=scale, config=cfg, interpret=interpret, plan=plan, **scales)
        return serial_attention(*args, scale=scale, config=cfg, interpret=interpret, plan=plan, **scales)
    raise ValueError(f"backend={backend!r}; expected one of {BACKENDS}")
