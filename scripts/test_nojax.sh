#!/usr/bin/env bash
# Prove the pure-Python core imports and passes its tests in a Python WITHOUT JAX installed.
#
#   .venv-nojax (Python 3.12 + pytest, numpy, matplotlib, hypothesis from PyPI; no jax, no flax)
#   -> import the scheduler, KV manager, request, sampling, config, outputs and simulator
#      modules and fail if any of them pulled in jax
#   -> run their tests (tests/scheduler, tests/sim, tests/outputs) from the source tree, two at a
#      time (one file per worker); `scripts/test.sh` runs this after the JAX tests
# Works on a fresh clone; needs only PyPI (or a local mirror pip is configured for).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MEDHA_NOJAX_VENV:-$ROOT/.venv-nojax}"
if [ ! -x "$VENV/bin/python" ]; then
  PY=""
  for c in python3.12 "$HOME/.pyenv/versions/3.12.1/bin/python3.12"; do  # as ensure_venv.sh picks it
    if PYENV_VERSION=3.12.1 "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then PY="$c"; break; fi
  done
  [ -n "$PY" ] || { echo "test_nojax: needs Python 3.12 (python3.12 on PATH, or pyenv 3.12.1)" >&2; exit 1; }
  PYENV_VERSION=3.12.1 "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "pytest>=8" "pytest-timeout>=2.3" "pytest-xdist>=3.5" "hypothesis>=6.100" \
      numpy matplotlib
fi
"$VENV/bin/python" -c "import xdist" 2>/dev/null || "$VENV/bin/python" -m pip install -q "pytest-xdist>=3.5"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if "$VENV/bin/python" -c "import jax" 2>/dev/null; then
  echo "test_nojax: $VENV has jax installed; this check needs a Python without it" >&2; exit 1
fi
"$VENV/bin/python" - <<'PY'
import importlib, sys
mods = ["medha_jax", "medha_jax.config", "medha_jax.request", "medha_jax.sampling_params", "medha_jax.outputs",
        "medha_jax.output_stream", "medha_jax.batch", "medha_jax.step_input", "medha_jax.kv_cache_manager",
        "medha_jax.page_allocator", "medha_jax.scheduler", "medha_jax.scheduler.replay", "medha_jax.model",
        "medha_jax.model.config", "medha_jax.hardware", "medha_jax.sim.cli"]
for m in mods:
    importlib.import_module(m)
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib", "flax"))
assert not bad, f"importing the pure-Python core pulled in {bad[:5]}"
print(f"test_nojax: {len(mods)} modules import without JAX")
PY
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile tests/scheduler tests/sim tests/outputs "$@"
