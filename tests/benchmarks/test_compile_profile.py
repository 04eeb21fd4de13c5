"""compile_profile: compile events are summed per test file over every worker's file, worst first."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))

from compile_profile import BACKEND, HITS, MISSES, summarize  # noqa: E402


def test_events_of_every_worker_are_summed_per_file_worst_first(tmp_path):
    worker0 = {"tests/a.py::t1": {BACKEND + ":s": 2.0, BACKEND + ":n": 3, MISSES + ":n": 1},
               "tests/b.py::t1": {BACKEND + ":s": 1.5, BACKEND + ":n": 1, HITS + ":n": 1}}
    worker1 = {"tests/b.py::t2": {BACKEND + ":s": 4.0, BACKEND + ":n": 2, MISSES + ":n": 2}}
    for name, events in (("events_gw0.json", worker0), ("events_gw1.json", worker1)):
        (tmp_path / name).write_text(json.dumps(events))
    assert summarize(str(tmp_path)) == [
        {"file": "tests/b.py", "compile_s": 5.5, "compiles": 3, "cache_hits": 1, "cache_misses": 2},
        {"file": "tests/a.py", "compile_s": 2.0, "compiles": 3, "cache_hits": 0, "cache_misses": 1},
    ]
