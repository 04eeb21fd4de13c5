"""`python -m medha_jax.sim` end to end on small inputs, and its errors."""

import json
import os
import subprocess
import sys

import pytest

from medha_jax.sim.cli import main

DATA = os.path.join(os.path.dirname(__file__), "data")


def test_trace_run_writes_the_report(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["--trace", os.path.join(DATA, "paper_scenario_slack.csv"), "--device", "linear:1e-4",
               "--policies", "sarathi-512,medha", "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| medha |" in text and "x real time" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policies"]["medha"]["all"]["deadline_miss_rate"] == 0.0
    assert summary["policies"]["sarathi-512"]["short"]["deadline_miss_rate"] == 1.0
    assert (out / "ttft_cdf.png").exists() and (out / "ttft_over_time.png").exists() and (out / "table.md").exists()


def test_generated_workload_on_a_modelled_device(capsys):
    rc = main(["--qps", "0.5", "--duration", "60", "--long-fraction", "0", "--policies", "medha", "--no-plots"])
    assert rc == 0
    assert "| medha |" in capsys.readouterr().out


@pytest.mark.parametrize("argv, match", [
    (["--policies", "sjf"], "unknown policies"),
    (["--device", "tpu-v9"], "unknown device profile"),
    (["--device", "model=llama3-8b,tp=16"], "NVLink"),
    (["--trace", "/nonexistent.csv"], "No such file"),
])
def test_bad_arguments_fail_clearly(argv, match, capsys):
    assert main(argv + ["--duration", "10"]) == 2
    assert match in capsys.readouterr().err


def test_module_entry_point_help():
    r = subprocess.run([sys.executable, "-m", "medha_jax.sim", "--help"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0 and "--policies" in r.stdout


def test_measured_profile_json_plays_the_device(tmp_path, capsys):
    from medha_jax.scheduler.predictor import ProfileKey, RuntimePredictor

    path = tmp_path / "demo__tp=1__float32__cpu.json"
    RuntimePredictor({"const": 2e-3, "tokens": 5e-5, "chunk_kv": 1e-9, "decodes": 1e-5, "decode_kv": 1e-8},
                     key=ProfileKey("demo", "tp=1", "float32", "cpu")).save(str(path))
    rc = main(["--device", str(path), "--qps", "2", "--duration", "30", "--long-fraction", "0",
               "--policies", "sarathi-512,medha", "--no-plots", "--out", str(tmp_path / "o")])
    assert rc == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["predictor"]["kind"] == "measured profile"
    assert summary["policies"]["medha"]["short"]["first_token"] > 0
