"""Dry run of benchmarks/engine_gpu.py on the CPU (tiny shapes): the GPU session's engine stages
run end to end, the goldens compare equal, the timed phases compile nothing, and the report is
written. Without a GPU and without --small the script refuses to run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def _run(*args, timeout=300, script="engine_gpu.py"):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], check=False,
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_engine_gpu_dry_run(tmp_path):
    r = _run("--hf", "--backends", "xla", "--llama8b", "--small", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    report = json.loads((tmp_path / "engine_hf_llama8b_cpu.json").read_text())
    assert report["mode"] == "cpu-dry-run" and [h["equal"] for h in report["hf"]] == [True]
    phases = report["llama8b"]["phases"]
    assert [p["phase"] for p in phases] == ["tpot", "offline"] + ["ttft"] * 3
    assert report["llama8b"]["compiles_after_warmup_total"] == 0
    assert all(p.get("ttft_s", 1) > 0 for p in phases)
    assert all(0.0 <= p["device_idle_fraction"] < 1.0 and p["ticks"] > 1 for p in phases[:2])
    assert all(p["host"].startswith("host ") and p["host_ms"]["schedule"] >= 0 for p in phases[:2])
    md = (tmp_path / "engine_hf_llama8b_cpu.md").read_text()
    assert md.startswith("# The engine on cpu") and "Host work per step, offline: host " in md


def test_refuses_without_gpu_or_small(tmp_path):
    r = _run("--hf", "--out", str(tmp_path), timeout=120)
    assert r.returncode == 2 and "no GPU found" in r.stderr


def test_decode_profile_dry_run(tmp_path):
    """benchmarks/decode_profile_gpu.py --small: both layer loops, both batches, decode ticks traced."""
    r = _run("--small", "--new", "8", "--out", str(tmp_path), script="decode_profile_gpu.py")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    rows = json.loads((tmp_path / "decode_profile_cpu.json").read_text())["rows"]
    assert [(r["layer_loop"], r["requests"]) for r in rows] == [
        ("scan", 1), ("scan", 4), ("unrolled (2 of 2)", 1), ("unrolled (2 of 2)", 4)]
    assert all(r["tpot_ms"] > 0 and r["traced_ms_per_tick"] > 0 and r["ticks"] >= 4 for r in rows)
    assert (tmp_path / "decode_profile_cpu.md").read_text().startswith("# Decode ticks on cpu")


def test_decode_profile_one_loop_tagged(tmp_path):
    """--loops picks the layer loops (a cut-off GPU run can skip the one already measured), --tag
    names the files (one call profiles several XLA-flag variants into one folder), and the XLA
    flags in effect are recorded; an unknown loop is refused by name."""
    r = _run("--small", "--new", "4", "--loops", "unrolled", "--tag", "probe", "--out", str(tmp_path),
             script="decode_profile_gpu.py")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    report = json.loads((tmp_path / "decode_profile_cpu_probe.json").read_text())
    assert [row["layer_loop"] for row in report["rows"]] == ["unrolled (2 of 2)"] * 2
    assert report["tag"] == "probe" and "xla_flags" in report
    bad = _run("--small", "--loops", "scan,while", "--out", str(tmp_path), script="decode_profile_gpu.py", timeout=120)
    assert bad.returncode == 2 and "while" in bad.stderr
