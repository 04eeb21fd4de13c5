"""benchmarks/decode_profile_gpu.summarize on a hand-made GPU trace: busy time per stream and its
union (overlapping streams counted once), kernels and copies by name, issuing HLO op and size."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from jax.profiler import ProfileData

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from decode_profile_gpu import summarize  # noqa: E402

US = 1_000_000  # picoseconds in a microsecond


def _event(meta: int, start_us: float, dur_us: float, op: str, details: str | None = None) -> str:
    stats = f'stats {{ metadata_id: 1 str_value: "{op}" }}'
    if details:
        stats += f' stats {{ metadata_id: 2 str_value: "{details}" }}'
    return f"events {{ metadata_id: {meta} offset_ps: {int(start_us * US)} duration_ps: {int(dur_us * US)} {stats} }}"


def _trace() -> ProfileData:
    compute = [_event(1, 0, 10, "dot.3"), _event(1, 20, 10, "dot.3"), _event(2, 30, 5, "copy.7",
                                                                              "kind_src:device kind_dst:device size:2048 dest:0 async:0")]
    copies = [_event(2, 5, 10, "dynamic-slice.2", "kind_src:device kind_dst:device size:134217728 dest:0 async:1")]
    text = f"""
planes {{
  id: 1 name: "/device:GPU:0"
  lines {{ id: 14 name: "Stream #14(Compute,MemcpyD2D)" timestamp_ns: 1000 {" ".join(compute)} }}
  lines {{ id: 69 name: "Stream #69(MemcpyD2D)" timestamp_ns: 1000 {" ".join(copies)} }}
  event_metadata {{ key: 1 value {{ id: 1 name: "gemm_fusion_dot.12" }} }}
  event_metadata {{ key: 2 value {{ id: 2 name: "MemcpyD2D" }} }}
  stat_metadata {{ key: 1 value {{ id: 1 name: "hlo_op" }} }}
  stat_metadata {{ key: 2 value {{ id: 2 name: "memcpy_details" }} }}
}}
planes {{ id: 2 name: "/host:CPU" lines {{ id: 1 name: "python" {_event(1, 0, 99, "x")} }}
  event_metadata {{ key: 1 value {{ id: 1 name: "step" }} }} stat_metadata {{ key: 1 value {{ id: 1 name: "hlo_op" }} }} }}
"""
    return ProfileData.from_serialized_xspace(ProfileData.text_proto_to_serialized_xspace(text))


def test_streams_union_kernels_and_copies():
    out = summarize(_trace())
    assert out["lines"] == {"/device:GPU:0: Stream #14(Compute,MemcpyD2D)": 25_000,
                            "/device:GPU:0: Stream #69(MemcpyD2D)": 10_000}
    assert out["union_ns"] == 30_000 and out["span_ns"] == 35_000  # [0, 15) u [20, 35): the copy overlaps
    assert dict(out["kernels"]) == {"gemm_fusion_dot": [20_000, 2], "MemcpyD2D": [15_000, 2]}
    assert out["hlo_ops"]["dot.3"] == [20_000, 2]
    assert set(out["copies"]) == {"MemcpyD2D, >= 64 MB", "MemcpyD2D, < 4 KB"}
    assert out["copies"]["MemcpyD2D, >= 64 MB"] == [10_000, 1, 134217728]
    assert out["copies"]["MemcpyD2D, < 4 KB"] == [5_000, 1, 2048]
    assert out["copy_ops"]["MemcpyD2D dynamic-slice.2"] == [10_000, 1, 134217728]
    assert len(out["copy_stats_sample"]) == 2


def test_nothing_traced():
    out = summarize(None)
    assert out["union_ns"] == 0 and not out["kernels"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
