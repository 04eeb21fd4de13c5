#!/usr/bin/env bash
# Install everything (first run) and serve the embedded demo model; extra args go to medha_jax.serve.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/ensure_venv.sh"
exec python -m medha_jax.serve --model demo "$@"
