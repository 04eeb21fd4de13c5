"""benchmarks/kernels_gpu.py: its check path runs in interpret mode on the CPU, and without a GPU
it refuses to time anything, with a clear message."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels_gpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("kernels_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernels_gpu"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_without_gpu_exits_with_a_message(bench, capsys):
    assert bench.main([]) == 2
    assert "no GPU found" in capsys.readouterr().err


def test_interpret_small_checks_pass_and_write_report(bench, tmp_path):
    assert bench.main(["--interpret", "--small", "--out", str(tmp_path), "--seed", "5"]) == 0
    report = json.loads(next(tmp_path.glob("kernels_*.json")).read_text())
    assert report["mode"] == "interpret" and len(report["checks"]) == 3
    assert all(c["ok"] for c in report["checks"])
    assert "# Paged-attention kernels on" in next(tmp_path.glob("kernels_*.md")).read_text()


@pytest.mark.slow
def test_interpret_timing_code_paths_run(bench, tmp_path):
    """The timing code on tiny shapes: our kernels and the in-tree peers in interpret mode; cuDNN
    (GPU only) is recorded as an error, never a crash."""
    assert bench.main(["--interpret", "--small", "--timings", "--out", str(tmp_path), "--seed", "6"]) == 0
    report = json.loads(next(tmp_path.glob("kernels_*.json")).read_text())
    kinds = {c["kind"]: c for c in report["cases"]}
    assert set(kinds) == {"prefill", "decode", "hybrid"}
    assert {"ours_prefill", "ours_pod", "ours_serial_planned"} <= set(kinds["prefill"]["ms"])
    assert {"ours_decode", "ours_pod", "ours_serial_planned", "intree_gqa", "intree_paged"} <= set(kinds["decode"]["ms"])
    assert {"ours_pod", "serial_ours", "ours_serial_planned"} <= set(kinds["hybrid"]["ms"])
    assert "fusion_speedup" in kinds["hybrid"]
