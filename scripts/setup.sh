#!/usr/bin/env bash
# Create .venv and install mnemovault with the local (CPU) embedder.
# Usage: scripts/setup.sh [extra]   e.g. scripts/setup.sh dev
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv with $($PY --version)" >&2
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
# The CPU build of torch first, pinned: with it installed, nothing pulls a CUDA build.
python -c "import torch" 2>/dev/null || python -m pip install -q torch==2.13.0
extras="local${1:+,$1}"
python -m pip install -q -e ".[${extras}]"
echo "installed mnemovault[${extras}] into .venv" >&2
