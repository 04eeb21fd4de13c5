"""What a benchmark records about its run, and where its results go.

  run_info(script, argv, load_before) -> {machine, commit, load_before, load_after, command}
      (merged into the benchmark's report dict)
  provenance(report) -> "`command` at commit. Machine: ...; 1-min load average x before, y after."
      (the first sentence of its Markdown)
  write_results(out_dir, name, report, lines) -> out_dir/name.json (the report) and
      out_dir/name.md (the lines), the Markdown also printed

Shared by the benchmarks under benchmarks/ so every results file states its machine, commit and
load the same way. No JAX.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def device_slug(name: str) -> str:
    """A device name as a file-name part: "NVIDIA H200" -> "nvidia_h200"."""
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").lower()


def commit() -> str:
    """The checkout's short commit hash ("unknown" outside git)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=HERE, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_info(script: str, argv: list[str] | None, load_before) -> dict:
    """The report fields every benchmark carries; call it once the timed work is over."""
    args = argv if argv is not None else sys.argv[1:]
    return dict(machine=f"{cpu_model()} x {os.cpu_count()} cores", commit=commit(), load_before=load_before,
                load_after=os.getloadavg(), command=f"python benchmarks/{script} " + " ".join(args))


def provenance(report: dict) -> str:
    return (f"`{report['command']}` at {report['commit']}. Machine: {report['machine']}; 1-min load average "
            f"{report['load_before'][0]:.1f} before, {report['load_after'][0]:.1f} after.")


def write_results(out_dir: Path, name: str, report: dict, lines: list[str]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
