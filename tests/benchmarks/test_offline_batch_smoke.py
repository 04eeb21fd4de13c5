"""benchmarks/offline_batch.py end to end on tiny shapes: every policy runs the same job on the
same shapes, rounds are timed, greedy tokens agree across policies, and the report is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def test_offline_batch_small(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "offline_batch.py"), "--small", "--policies",
                        "slo,fcfs", "--repeats", "2", "--out", str(tmp_path / "out"), "--workdir", str(tmp_path / "w")],
                       check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    report = json.loads((tmp_path / "out" / "offline_batch_small.json").read_text())
    rows = {row["policy"]: row for row in report["rows"]}
    assert set(rows) == {"slo", "fcfs"} and rows["fcfs"]["throughput_vs_fcfs"] == 1.0
    assert rows["fcfs"]["same_batches_as_fcfs"] is True and isinstance(rows["slo"]["same_batches_as_fcfs"], bool)
    for row in rows.values():
        assert len(row["walls_s"]) == 2 and row["median_s"] > 0 and row["same_tokens_as_first"]
    assert "cores" in report["machine"] and (tmp_path / "out" / "offline_batch_small.md").is_file()
