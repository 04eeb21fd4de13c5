"""Accelerator data sheets and the efficiency factors the analytic model applies to them.

  DeviceSpec (peak FLOP/s, HBM bandwidth, links)  --+
  Efficiency (fraction of each peak achieved)   --+--> AnalyticPerfModel (perf_model.py)

Every number here is a public data-sheet value or a stated, sourced assumption; none is fitted
to the figures the analytic model is later compared against (tests/sim/test_hardware_references.py).
Pure Python, no JAX.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One accelerator and the links around it (all bandwidths per device, one direction)."""

    name: str
    peak_flops: float
    """Dense bf16 tensor-core FLOP/s."""
    hbm_bandwidth: float
    """HBM bytes/s."""
    hbm_bytes: float
    """HBM capacity in bytes."""
    nvlink_bandwidth: float
    """Intra-node (NVLink) bytes/s per device, one direction."""
    net_bandwidth: float
    """Inter-node (InfiniBand) bytes/s per device, one direction."""
    devices_per_node: int = 8
    nvlink_latency: float = 10e-6
    """Seconds of fixed cost per intra-node collective (NCCL small-message all-reduce on 8 GPUs)."""
    net_latency: float = 20e-6
    """Seconds of fixed cost per inter-node transfer (InfiniBand send/recv through NCCL)."""

    def __post_init__(self) -> None:
        for f in ("peak_flops", "hbm_bandwidth", "hbm_bytes", "nvlink_bandwidth", "net_bandwidth"):
            if not getattr(self, f) > 0:
                raise ValueError(f"DeviceSpec.{f} must be > 0, got {getattr(self, f)!r}")
        if self.devices_per_node < 1:
            raise ValueError(f"DeviceSpec.devices_per_node must be >= 1, got {self.devices_per_node}")
        if self.nvlink_latency < 0 or self.net_latency < 0:
            raise ValueError("DeviceSpec latencies must be >= 0")


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Fraction of each peak that real kernels reach, plus fixed software costs."""

    gemm: float = 0.6
    """Linear layers (QKV, O, MLP) when compute bound. TP-sharded GEMMs of 8B/70B models are narrow;
    0.6 of peak is typical of cuBLAS at these shapes (Megatron-LM reports ~52% end-to-end MFU)."""
    attention: float = 0.6
    """Attention kernels when compute bound (device dependent: see `default_efficiency`)."""
    memory: float = 0.8
    """HBM streaming (weights, KV cache). Medha reports up to 92% MBU for KVP decodes."""
    link: float = 0.8
    """NVLink / InfiniBand collectives: fraction of nominal bandwidth NCCL reaches."""
    iteration_overhead: float = 2e-3
    """Seconds per scheduled batch outside the kernels: scheduling, input preparation, sampling.
    Medha moved this path to C++; 2 ms is what such engines report for a step."""
    layer_overhead: float = 30e-6
    """Seconds per layer per stage of kernel launches and small ops (~10 kernels x 3 us)."""
    elementwise_passes: int = 4
    """Reads+writes of the hidden state per layer by unfused ops (norms, RoPE, residuals)."""

    def __post_init__(self) -> None:
        for f in ("gemm", "attention", "memory", "link"):
            v = getattr(self, f)
            if not 0.0 < v <= 1.0:
                raise ValueError(f"Efficiency.{f} must be in (0, 1], got {v!r}")
        if self.iteration_overhead < 0 or self.layer_overhead < 0 or self.elementwise_passes < 0:
            raise ValueError("Efficiency overheads must be >= 0")


GB = 1e9

A100_80GB = DeviceSpec(
    name="A100-SXM4-80GB",
    peak_flops=312e12,  # dense BF16 (NVIDIA A100 data sheet)
    hbm_bandwidth=2.039e12,  # HBM2e
    hbm_bytes=80 * 2**30,
    nvlink_bandwidth=300 * GB,  # NVLink 3: 600 GB/s bidirectional
    net_bandwidth=25 * GB,  # DGX A100: one 200 Gb/s HDR InfiniBand NIC per GPU
)

H100_80GB = DeviceSpec(
    name="H100-SXM5-80GB",
    peak_flops=989e12,  # dense BF16 (NVIDIA H100 SXM data sheet)
    hbm_bandwidth=3.35e12,  # HBM3
    hbm_bytes=80 * 2**30,
    nvlink_bandwidth=450 * GB,  # NVLink 4: 900 GB/s bidirectional
    net_bandwidth=50 * GB,  # DGX H100: one 400 Gb/s NDR NIC per GPU ("50 GBps per GPU pair", Mnemosyne 6.1)
)

DEVICES = {"a100": A100_80GB, "h100": H100_80GB}


def default_efficiency(device: DeviceSpec, **overrides) -> Efficiency:
    """The efficiency factors we assume for `device` (overrides replace single fields).

    Attention: the papers ran FlashAttention-2-class kernels (FlashInfer). FlashAttention-2 reaches
    50-73% of peak forward on A100 (Dao 2023) -> 0.6; the FlashAttention-3 paper reports that
    FlashAttention-2 reaches only ~35% of peak on H100 -> 0.35."""
    attention = 0.35 if device.name.startswith("H100") else 0.6
    return replace(Efficiency(attention=attention), **overrides)


def get_device(name: str) -> DeviceSpec:
    try:
        return DEVICES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown device {name!r}; valid: {', '.join(DEVICES)}") from None
