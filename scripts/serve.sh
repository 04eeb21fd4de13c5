#!/usr/bin/env bash
# Install everything (first run) and serve the embedded demo model over gRPC and HTTP.
# The shape flags keep start-up compilation short on a CPU; later flags override them.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/ensure_venv.sh"
exec python -m medha_jax.serve --model demo --max-model-len 4096 --num-pages 512 \
  --max-num-seqs 16 --max-num-batched-tokens 512 --min-token-bucket 32 --min-page-bucket 32 "$@"
