"""Smoke run of benchmarks/convoy.py (the convoy benchmark's whole code path, tiny settings): two
servers (fcfs_nonchunked, lars) as subprocesses, calibration, a quick runtime profile, a handful
of short requests and one long one through gRPC, JSON + table + plots written, the slo server's
iteration trace summarized."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def test_convoy_benchmark_smoke(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "convoy.py"), "--smoke", "--out", str(tmp_path / "out"),
         "--workdir", str(tmp_path / "work"), "--iteration-trace"],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    report = json.loads((tmp_path / "out" / "convoy.json").read_text())
    assert set(report["configs"]) == {"fcfs_nonchunked", "slo"}
    for name, rec in report["configs"].items():
        s = rec["summary"]
        assert s["num_errors"] == 0 and s["num_completed"] == s["num_requests"] >= 2, (name, s)
        assert s["long"]["count"] == 1 and s["long_completion_s"] > 0
        assert s["short"]["ttft_p99_s"] is not None and s["throughput_tok_s"] > 0
        assert rec["exit_code"] == 0
        for q in rec["requests"]:  # every request streamed all of its tokens and has a deadline
            assert q["num_tokens"] == q["max_tokens"] and q["ttft_deadline_s"] > 0
    trace = report["configs"]["slo"]["iteration_trace"]  # the server wrote one line per iteration
    lines = Path(trace["path"]).read_text().splitlines()
    assert trace["iterations"] == len(lines) > 0 and trace["measured_s"] > 0 and trace["ratio_p50"] > 0
    assert report["machine"]["cores"] and "loadavg" in report["calibration"]["load"]
    assert report["choice"]["long_len"] > max(report["choice"]["short_prompt"])
    for suffix in ("_ttft_over_time.png", "_ttft_cdf.png", ".md"):
        assert (tmp_path / "out" / f"convoy{suffix}").stat().st_size > 0
    assert "short TTFT P99" in r.stdout and "slo" in r.stdout
