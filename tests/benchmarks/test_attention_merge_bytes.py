"""benchmarks/attention_merge_bytes.py runs and reports every batch; the merges as built now read
no more than before at every batch, and far less where a decode batch used to carry the prefill
half's slots and 16 decode splits (a static XLA estimate, not a timing)."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "attention_merge_bytes.py"


def test_merge_bytes_report(tmp_path):
    spec = importlib.util.spec_from_file_location("attention_merge_bytes", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "attention_merge_bytes.json").read_text())["rows"]
    assert [r["batch"] for r in rows] == [b[0] for b in bench.BATCHES]
    for r in rows:
        for k in ("prefill_merge_mb", "decode_merge_mb", "decode_partials_mb"):
            assert r[k]["now"] <= r[k]["before"], (r["batch"], k)
    big = rows[2]  # 256 x 1K decodes: one split, the prefill half gathered
    assert big["decode_splits"] == 1 and big["prefill_gathered"]
    assert big["decode_merge_mb"]["now"] < big["decode_merge_mb"]["before"] / 10
    assert (tmp_path / "attention_merge_bytes.md").read_text().startswith("# The serial Pallas path's merges")
