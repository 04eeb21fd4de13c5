#!/usr/bin/env bash
# Install everything (first run) and run the whole test suite on 8 host CPU devices.
#
#   bash scripts/test.sh            the whole suite: the JAX tests (the fast set, then the tests marked
#                                   slow, two files at a time; then those that only start several
#                                   processes, one at a time: ports and signal timings), then the
#                                   pure-Python tests (tests/scheduler, tests/sim, tests/outputs) once,
#                                   in a Python without JAX (scripts/test_nojax.sh), which proves the
#                                   core needs none
#   bash scripts/test.sh ARGS...    pytest ARGS (paths, -k, ...) in this venv, the same three sets
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/ensure_venv.sh"
cd "$ROOT"
export JAX_PLATFORMS=cpu XLA_FLAGS="--xla_force_host_platform_device_count=8"
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-$ROOT/.jax_cache}"
whole=0
if [ $# -eq 0 ]; then
  whole=1
  set -- --ignore=tests/scheduler --ignore=tests/sim --ignore=tests/outputs  # run without JAX below
fi
run_set() {  # run_set PYTEST_ARGS...: one set of tests; selecting none (pytest's exit code 5) is fine
  local rc=0
  python -m pytest -q "$@" || rc=$?
  [ "$rc" -eq 5 ] && rc=0
  return "$rc"
}
run_set -n 2 --dist loadfile --durations=15 -m "not slow and not multiprocess" "$@"
run_set -n 2 --dist loadfile -m slow "$@"
run_set -m "multiprocess and not slow" "$@"
if [ "$whole" -eq 1 ]; then
  bash "$ROOT/scripts/test_nojax.sh"
fi
