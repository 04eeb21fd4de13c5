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
    """The CPU as results files name it (`describe_cpu` of /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as f:
            return describe_cpu(f.read())
    except OSError:
        return platform.processor() or "unknown"


def describe_cpu(cpuinfo: str) -> str:
    """The first processor of a /proc/cpuinfo text: its model name, then family / model / stepping
    and the widest vector extension ("AMD EPYC (family 25 model 1 stepping 1, avx2)"). A cloud VM's
    model name can be as bare as "AMD EPYC" on hosts of different generations (with AVX-512 or
    without), for which XLA generates different code; the numbers tell those rows apart."""
    first = cpuinfo.split("\n\n", 1)[0]
    info = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in first.splitlines() if ":" in line)}
    name = info.get("model name") or platform.processor() or "unknown"
    flags = set(info.get("flags", "").split())
    ids = " ".join(f"{label} {info[k]}" for k, label in
                   (("cpu family", "family"), ("model", "model"), ("stepping", "stepping")) if k in info)
    vector = next((f for f in ("avx512f", "avx2", "avx", "sse4_2") if f in flags), "")
    extra = ", ".join(x for x in (ids, vector) if x)
    return f"{name} ({extra})" if extra else name


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
