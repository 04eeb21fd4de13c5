#!/usr/bin/env bash
# Install everything (first run) and run the whole test suite on 8 host CPU devices.
# The fast set runs in parallel; tests marked slow or multiprocess run after it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/ensure_venv.sh"
cd "$ROOT"
export JAX_PLATFORMS=cpu XLA_FLAGS="--xla_force_host_platform_device_count=8"
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-$ROOT/.jax_cache}"
python -m pytest -q -n 2 --dist loadfile --durations=15 -m "not slow and not multiprocess" "$@"
rc=0; python -m pytest -q -m "slow or multiprocess" "$@" || rc=$?
[ "$rc" -eq 5 ] && rc=0  # 5: nothing selected (no slow tests under the given paths)
exit "$rc"
