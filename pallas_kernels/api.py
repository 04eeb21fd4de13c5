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
- `pod_plan(...)`: the fused kernel's work lists from the metadata alone; build it once per step
  and pass `plan=` to every layer's `paged_attention(..., backend="pallas")` when it fuses.

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
from pallas_kernels.serial import serial_attention

BACKENDS = ("xla", "pallas")

__all__ = [
    "BACKENDS",
    "DEFAULT_CONFIG",
    "KernelConfig",
    "PodPlan",
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
]


def paged_attention(q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens, *, scale,
                    backend: str = "xla", interpret: bool | None = None,
                    config: KernelConfig | None = None, plan: PodPlan | None = None,
                    k_scales=None, v_scales=None):
    """Paged attention over a hybrid batch (prefill chunks first, then 1-token decodes).

    config: Pallas tuning (default `device_config()`); plan: a `pod_plan` built from the same
    metadata and config (pallas backend with `fuse_hybrid` only; otherwise ignored); k_scales/v_scales:
    f32[N, KVH] for fp8 pages (`kv_quant`), else None.
    """
    args = (q, k_pages, v_pages, page_table, cu_q_lens, q_offsets, kv_lens)
    scales = dict(k_scales=k_scales, v_scales=v_scales)
    if backend == "xla":
        return paged_attention_xla(*args, scale=scale, **scales)
    if backend == "pallas":
        cfg = device_config() if config is None else config
        if cfg.fuse_hybrid:
            return pod_attention(*args, scale=scale, config=cfg, interpret=interpret, plan=plan, **scales)
        return serial_attention(*args, scale=scale, config=cfg, interpret=interpret, **scales)
    raise ValueError(f"backend={backend!r}; expected one of {BACKENDS}")
