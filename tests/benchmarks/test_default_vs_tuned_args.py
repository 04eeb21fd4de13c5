"""benchmarks/default_vs_tuned.py's hand-tuned configuration list: parsed as given, and a malformed
entry is refused with the entry named (the benchmark itself runs minutes: see its docstring)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from default_vs_tuned import tuned_configs  # noqa: E402


def test_tuned_configs_parse_policy_and_token_cap():
    assert tuned_configs("fcfs:512,slo:8448") == [("fcfs", 512), ("slo", 8448)]


@pytest.mark.parametrize("bad", ["fcfs", "fcfs:", ":512", "fcfs:0", "fcfs:5x"])
def test_a_malformed_entry_is_named(bad):
    with pytest.raises(ValueError, match=f"--tuned entry '{bad}'"):
        tuned_configs(f"slo:8448,{bad}")
