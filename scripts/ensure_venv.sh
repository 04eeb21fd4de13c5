#!/usr/bin/env bash
# Sourced by serve.sh and test.sh: makes .venv (Python 3.12) with medha-jax installed editable,
# reinstalling only when pyproject.toml or setup.py changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MEDHA_VENV:-$ROOT/.venv}"
pick_python() {
  for c in python3.12 "$HOME/.pyenv/versions/3.12.1/bin/python3.12"; do
    if PYENV_VERSION=3.12.1 command -v "$c" >/dev/null 2>&1 && PYENV_VERSION=3.12.1 "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      echo "$c"; return 0
    fi
  done
  echo "medha-jax needs Python 3.12 (python3.12 on PATH, or pyenv 3.12.1)" >&2; return 1
}
if [ ! -x "$VENV/bin/python" ]; then
  PY="$(pick_python)"
  PYENV_VERSION=3.12.1 "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
STAMP="$VENV/.medha-install-stamp"
HASH="$(cat "$ROOT/pyproject.toml" "$ROOT"/setup.py "$ROOT"/proto/*.proto 2>/dev/null | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$HASH" ] || ! "$VENV/bin/python" -c 'import medha_jax' 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q -e "$ROOT[test]"
  echo "$HASH" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
