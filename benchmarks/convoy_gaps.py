"""The default policy's short P99 TTFT against edf's in every convoy run: which gaps are noise?

    python benchmarks/convoy_gaps.py                      # every results/convoy*.json with both policies
    python benchmarks/convoy_gaps.py results/convoy_a.json results/convoy_b.json --name my_gaps

Data flow: convoy results JSON (`benchmarks/convoy.py`: each configuration's pooled requests, the
same workload for all) -> per run, in the order they started: both policies' short P99 TTFT and misses,
the P99 gap with its 95% paired-bootstrap interval over the short requests both served
(`convoy.criteria` -> `convoy_report.paired_percentile_diff`: the same request in the same round
is one pair), the reading (noise: the interval holds 0) and the convoy's own strict verdict ->
results/NAME.json/.md (default convoy_p99_gaps). The convoy's "no worse than edf" verdict compares
the two P99s strictly; this says which of those verdicts a different draw of the tail could have
turned.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from convoy import DEFAULT_POLICY, criteria  # noqa: E402
from convoy_report import gap_reading  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def gap_row(path: Path) -> dict | None:
    """One convoy results file -> its row (`convoy.criteria` on its pooled requests), or None
    without both policies' requests."""
    data = json.loads(path.read_text())
    configs = data.get("configs")
    if not isinstance(configs, dict):  # other benchmarks' files named convoy_* (token caps, replays)
        return None
    pair = {p: configs[p] for p in (DEFAULT_POLICY, "edf") if "requests" in configs.get(p, {})}
    if len(pair) < 2:
        return None
    c = criteria({p: rec["summary"] for p, rec in pair.items()}, None,
                 {p: rec["requests"] for p, rec in pair.items()})
    if "short_p99_ttft_minus_edf_ci95_s" not in c:
        return None
    lo, hi = c["short_p99_ttft_minus_edf_ci95_s"]
    return dict(run=path.stem, started=data.get("started", ""), shorts=pair["edf"]["summary"]["short"]["count"],
                p99=c["short_p99_ttft_default_s"], misses=c["short_misses_default"], edf_p99=c["short_p99_ttft_edf_s"],
                edf_misses=c["short_misses_edf"], gap_s=c["short_p99_ttft_minus_edf_s"], ci95_s=[lo, hi],
                reading=gap_reading(lo, hi, DEFAULT_POLICY), strict_met=c["no_worse_than_edf"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="convoy results JSON (default: every results/convoy*.json)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default="convoy_p99_gaps")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    rows = sorted((r for r in map(gap_row, args.files or RESULTS.glob("convoy*.json")) if r is not None),
                  key=lambda r: r["started"])
    report = dict(run_info("convoy_gaps.py", argv, load_before), policy=DEFAULT_POLICY, rows=rows)
    p = DEFAULT_POLICY
    lines = [f"# {p} vs edf, short P99 TTFT, every convoy run", "", provenance(report), "",
             f"The gap is {p}'s P99 less edf's over the short requests both served (the same request in the same "
             "round is a pair); the interval, the 2.5th-97.5th percentiles of that gap over 2,000 resamples of "
             "those requests. 'noise': the interval holds 0, so which requests landed in the tail could have "
             f"decided the convoy's strict verdict ({p}'s P99 and misses no worse than edf's).", "",
             f"| run (started) | shorts | {p} P99 (misses) | edf P99 (misses) | gap | 95% interval | reading | strict verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lo, hi = r["ci95_s"]
        lines.append(f"| {r['run']} ({r['started'][:16]}) | {r['shorts']} | {r['p99']:.3f} s ({r['misses']}) | {r['edf_p99']:.3f} s "
                     f"({r['edf_misses']}) | {1e3 * r['gap_s']:+.1f} ms | [{1e3 * lo:+.1f}, {1e3 * hi:+.1f}] ms | "
                     f"{r['reading']} | {'met' if r['strict_met'] else 'NOT met'} |")
    write_results(args.out, args.name, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
