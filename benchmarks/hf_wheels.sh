#!/usr/bin/env bash
# Fetch transformers and the wheels it needs beside torch into benchmarks/.hf_wheels/ (git-ignored),
# for a machine that has torch but no transformers and no network: the GPU machines' image.
# `gpu_session.sh vs-hf` unpacks them into a folder on the HF worker's PYTHONPATH (a wheel is a zip:
# no pip, no network) and runs vs_hf.py there.
#
#   bash benchmarks/hf_wheels.sh [PYTHON_VERSION]    # default 3.12, the GPU image's Python
#
# Left out: numpy (the image has it) and hf_xet (downloads from the Hub only). ~25 MB: carry the
# folder in the device call (`carry: ["benchmarks/.hf_wheels"]`; the call sends at most 64 MiB).
set -euo pipefail
cd "$(dirname "$0")"
PYV="${1:-3.12}"
DEST=.hf_wheels
rm -rf "$DEST" && mkdir -p "$DEST"
python3 -m pip download -q --only-binary=:all: --python-version "$PYV" \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$DEST" "transformers==${TRANSFORMERS_VERSION:-5.24.0}"
rm -f "$DEST"/numpy-*.whl "$DEST"/hf_xet-*.whl
ls "$DEST"
du -sh "$DEST"
