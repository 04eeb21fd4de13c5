"""Where the test suite's time goes to XLA: compiles per test file, as a pytest plugin.

  PYTHONPATH=benchmarks python -m pytest -p compile_profile [pytest args...]
      -> every JAX compile event (jax.monitoring: tracing, lowering, backend compile, the persistent
         cache's hits and misses) charged to the test that ran it
      -> one JSON per process (xdist worker) under $COMPILE_PROFILE_DIR (default /tmp/compile_profile)
  python benchmarks/compile_profile.py [DIR] [--out results.md]
      -> per test file: backend compile seconds and count, cache hits and misses, worst first

Run it on an empty compilation cache (JAX_COMPILATION_CACHE_DIR=<new dir>) to see what a fresh
clone's CI pays. Importing the plugin imports JAX; the summary does not.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os

DIR = os.environ.get("COMPILE_PROFILE_DIR", "/tmp/compile_profile")
BACKEND = "/jax/core/compile/backend_compile_duration"
HITS, MISSES = "/jax/compilation_cache/cache_hits", "/jax/compilation_cache/cache_misses"

_current = ["<collection>"]
_events: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def _duration(event: str, duration: float, **_) -> None:
    _events[_current[0]][event + ":n"] += 1
    _events[_current[0]][event + ":s"] += duration


def _event(event: str, **_) -> None:
    _events[_current[0]][event + ":n"] += 1


def pytest_configure(config) -> None:
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_duration)
    jax.monitoring.register_event_listener(_event)


def pytest_runtest_logstart(nodeid, location) -> None:
    _current[0] = nodeid


def pytest_sessionfinish(session) -> None:
    os.makedirs(DIR, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(DIR, f"events_{worker}.json"), "w") as f:
        json.dump({test: dict(c) for test, c in _events.items()}, f)


def summarize(directory: str) -> list[dict]:
    """Per test file, worst backend compile time first."""
    files: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for path in glob.glob(os.path.join(directory, "events_*.json")):
        with open(path) as f:
            for test, counts in json.load(f).items():
                files[test.split("::")[0]].update(counts)
    rows = [{"file": name, "compile_s": c[BACKEND + ":s"], "compiles": int(c[BACKEND + ":n"]),
             "cache_hits": int(c[HITS + ":n"]), "cache_misses": int(c[MISSES + ":n"])} for name, c in files.items()]
    return sorted(rows, key=lambda r: -r["compile_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default=DIR)
    ap.add_argument("--out", help="also write the table here (markdown)")
    args = ap.parse_args()
    rows = summarize(args.dir)
    lines = ["| test file | backend compile s | compiles | cache hits | cache misses |", "|---|---|---|---|---|"]
    lines += [f"| {r['file']} | {r['compile_s']:.1f} | {r['compiles']} | {r['cache_hits']} | {r['cache_misses']} |"
              for r in rows]
    total = sum(r["compile_s"] for r in rows)
    lines.append(f"| **all** | **{total:.1f}** | {sum(r['compiles'] for r in rows)} | "
                 f"{sum(r['cache_hits'] for r in rows)} | {sum(r['cache_misses'] for r in rows)} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
