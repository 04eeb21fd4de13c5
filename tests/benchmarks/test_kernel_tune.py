"""benchmarks/kernel_tune_gpu.py: the sweep's order (defaults, then one knob changed, then two, ...)
and a CPU dry run in interpret mode (every variant checked against the XLA path and timed)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from kernel_tune_gpu import DECODE_KNOBS, PREFILL_KNOBS, variants  # noqa: E402


@pytest.mark.parametrize("knobs", [PREFILL_KNOBS, DECODE_KNOBS])
def test_variants_start_from_the_defaults_and_change_one_knob_at_a_time_first(knobs):
    vs = variants(knobs)
    defaults = {k: v[0] for k, v in knobs.items()}
    changed = [sum(v[k] != defaults[k] for k in knobs) for v in vs]
    assert vs[0] == defaults and changed == sorted(changed)
    assert len(vs) == len({tuple(v.items()) for v in vs}) == math.prod(len(v) for v in knobs.values())
    singles = [v for v, n in zip(vs, changed) if n == 1]
    assert len(singles) == sum(len(v) - 1 for v in knobs.values())


@pytest.mark.slow
def test_dry_run_checks_and_times_every_variant(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernel_tune_gpu.py"), "--small", "--out", str(tmp_path)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads((tmp_path / "kernel_tune_cpu.json").read_text())
    assert [c["kind"] for c in report["cases"]] == ["prefill", "decode"]
    for case in report["cases"]:
        assert len(case["rows"]) == 2 and all(row["ok"] and row["ms"] > 0 for row in case["rows"])
        assert case["rows"][0]["vs_default"] == 1.0
    assert (tmp_path / "kernel_tune_cpu.md").read_text().startswith("# Kernel knobs on cpu")
