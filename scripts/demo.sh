#!/usr/bin/env bash
# Quick start, command 1: set up, then run the main job (embedded PostgreSQL, local
# embedder, no network, no keys): import the example conversation and recall from it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/mnemovault demo "$@"
