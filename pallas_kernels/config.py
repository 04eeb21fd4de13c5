"""Static tuning knobs of the Pallas paged-attention kernels, and the tile shapes they imply.

Everything here is a Python int fixed at trace time: changing a field compiles a new program,
changing lengths in the batch does not. `KernelConfig.tiles(G, page_size)` turns the knobs into
the concrete tile shape for one model (`Tiles`), which the work-list builder, the kernels and the
combine step all read, so they agree on rows per tile and keys per block.

Glossary: T query tokens, S sequences, H query heads, KVH kv heads, G = H // KVH, Dh head dim,
BQ query tokens per prefill tile, M = rows of a prefill tile (BQ * G padded to a power of two,
at least 16 for `tl.dot`), MD = rows of a decode tile (G padded likewise), BK keys per KV block.
"""

from __future__ import annotations

import dataclasses


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@dataclasses.dataclass(frozen=True, slots=True)
class KernelConfig:
    """Tile sizes, Triton launch parameters and split limits (POD-Attention section 4.2)."""

    prefill_rows: int = 128
    """Target rows M of a prefill tile: BQ = prefill_rows // G query tokens x G heads."""
    block_kv: int = 64
    """Keys per KV block (a whole number of pages; at least 16, a power of two)."""
    num_warps: int | None = None
    """Triton warps per program (one value for the fused kernel: both branches share it);
    None: 8 when a prefill tile holds >= 128 x 128 f32 accumulators, else 4."""
    num_stages: int = 2
    """Triton software-pipelining stages of the KV loop."""
    decode_num_warps: int = 4
    """Warps of the stand-alone decode kernel."""
    num_sms: int = 132
    """Streaming multiprocessors of the target GPU (H100 SXM: 132, H200: 132, A100: 108)."""
    programs_per_sm: int = 2
    """Concurrent programs (CTAs) per SM assumed when sizing a wave."""
    prefill_waves: int = 2
    """POD 4.2.4: KV-split the prefill tiles only up to this many full waves of programs."""
    max_prefill_splits: int = 8
    """Most KV splits of one prefill tile."""
    decode_waves: int = 1
    """KV-split decodes (flash-decoding) up to about this many waves of programs (the fused
    kernel's work list, which counts the batch's real decodes)."""
    decode_grid_waves: int = 4
    """The stand-alone decode kernel's static split count: splits while its grid (the bucket's
    sequences, padding included, x kv heads x splits) holds fewer than this many waves."""
    max_decode_splits: int = 16
    """Most KV splits of one decode."""
    min_split_blocks: int = 1
    """Fewest KV blocks a split may hold."""
    fuse_hybrid: bool = False
    """`paged_attention(backend="pallas")` on a hybrid batch: the fused POD kernel (True) or the
    prefill and decode kernels in turn (False, `serial.py`): on an H200 the fused kernel was the
    slower at every measured shape (benchmarks/results/h200/run2_kernels)."""

    def __post_init__(self):
        for name in ("prefill_rows", "block_kv"):
            v = getattr(self, name)
            if v < 16 or v & (v - 1):
                raise ValueError(f"{name}={v} must be a power of two >= 16")
        for name in ("decode_num_warps", "max_prefill_splits", "max_decode_splits", "decode_grid_waves"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")

    def warps(self, rows: int, head_dim: int) -> int:
        if self.num_warps is not None:
            return self.num_warps
        return 8 if rows * head_dim >= 128 * 128 else 4

    @property
    def wave(self) -> int:
        return self.num_sms * self.programs_per_sm

    def tiles(self, num_groups: int, page_size: int) -> "Tiles":
        if page_size < 1 or page_size & (page_size - 1):
            raise ValueError(f"page_size={page_size} must be a power of two")
        block_kv = max(self.block_kv, page_size)
        bq = max(1, self.prefill_rows // num_groups)
        return Tiles(
            G=num_groups,
            BQ=bq,
            M=max(16, next_pow2(bq * num_groups)),
            MD=max(16, next_pow2(num_groups)),
            page_size=page_size,
            block_pages=block_kv // page_size,
            BK=block_kv,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Tiles:
    """Concrete tile shape for one (G, page_size)."""

    G: int
    BQ: int
    M: int
    MD: int
    page_size: int
    block_pages: int
    BK: int


DEFAULT_CONFIG = KernelConfig()


def resolve_interpret(interpret: bool | None) -> bool:
    """None -> interpret mode unless the default backend is a GPU."""
    if interpret is None:
        import jax

        return jax.default_backend() != "gpu"
    return bool(interpret)


def device_config(**overrides) -> KernelConfig:
    """DEFAULT_CONFIG with num_sms read from the default device when it is a GPU."""
    import jax

    dev = jax.devices()[0]
    sms = getattr(dev, "core_count", None) if dev.platform == "gpu" else None
    if sms:
        overrides.setdefault("num_sms", int(sms))
    return dataclasses.replace(DEFAULT_CONFIG, **overrides)
