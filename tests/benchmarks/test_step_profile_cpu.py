"""benchmarks/step_profile_cpu.py's trace arithmetic: nested events are charged their self time
once, an op is charged to the innermost frame of its HLO metadata, executions keep launch order."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
profile = pytest.importorskip("step_profile_cpu")


def ev(name, ts, dur, tid=1, op=None, run="r1"):
    args = {} if op is None else {"hlo_module": "jit_step", "hlo_op": op, "run_id": run}
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "tid": tid, "args": args}


def test_self_time_subtracts_nested_events_once():
    loop = ev("while.1", 0, 100, op="while.1")
    body = ev("ThunkExecutor::Execute", 10, 80)
    dot = ev("dot.1", 20, 50, op="dot.1")
    after = ev("add.1", 100, 5, op="add.1")  # starts where the loop ends: not nested
    got = {e["name"]: s for e, s in profile.self_times([after, dot, body, loop])}
    assert got == {"while.1": 20, "ThunkExecutor::Execute": 30, "dot.1": 50, "add.1": 5}
    assert sum(got.values()) == 105  # the span covered, nothing counted twice


def test_step_runs_group_by_execution_in_launch_order():
    events = [ev("dot.1", 500, 10, op="dot.1", run="late"), ev("dot.1", 0, 10, op="dot.1", run="early"),
              ev("ThunkExecutor::Execute", 0, 30), ev("add.1", 15, 10, op="add.1", run="early"),
              ev("dot.9", 0, 99, op="dot.9", run="other")]
    events[-1]["args"]["hlo_module"] = "jit_other"  # another program: not an engine step
    runs = profile.step_runs(events)
    assert [r["t0"] for r in runs] == [0, 500]
    assert runs[0]["wall_us"] == 30  # the executor event spans the run
    charged = dict(runs[0]["ops"])
    assert charged == {"dot.1": 10, "add.1": 10, None: 10}  # the executor's own 10 us: its gap


HLO = """HloModule jit_step

FileNames
1 "/x/medha_jax/model/llama.py"
2 "/x/pallas_kernels/reference.py"

FunctionNames
1 "_layer"
2 "_xla_decodes"

FileLocations
1 {file_name_id=1 function_name_id=1 line=110 end_line=110 column=1 end_column=2}
2 {file_name_id=2 function_name_id=2 line=235 end_line=235 column=1 end_column=2}

StackFrames
1 {file_location_id=1 parent_frame_id=0}
2 {file_location_id=2 parent_frame_id=1}

ENTRY %main {
  %ynn_fusion.3 = f32[4]{0} fusion(%p), kind=kCustom, calls=%f, metadata={op_name="dot_general" stack_frame_id=1}
  ROOT %transpose_copy_fusion = f32[4]{0} fusion(%a), kind=kLoop, metadata={op_name="x" stack_frame_id=2}, backend_config={}
  %param = f32[4]{0} parameter(0)
}
"""


def test_op_sources_name_the_innermost_frame():
    src = profile.op_sources(HLO)
    assert src["ynn_fusion.3"] == ("/x/medha_jax/model/llama.py", "_layer", 110)
    assert src["transpose_copy_fusion"] == ("/x/pallas_kernels/reference.py", "_xla_decodes", 235)
    assert "param" not in src  # no metadata: left to the "?" row


def test_set_parses_numbers_and_keeps_other_values_as_strings():
    assert profile._parse_setting("layer_unroll=8") == ("layer_unroll", 8)
    assert profile._parse_setting("gpu_memory_utilization=0.5") == ("gpu_memory_utilization", 0.5)
    assert profile._parse_setting("scheduler=fcfs") == ("scheduler", "fcfs")
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        profile._parse_setting("layer_unroll")
