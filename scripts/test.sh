#!/usr/bin/env bash
# Quick start, command 2: set up with the dev tools, then lint, type-check and run the tests
# against a real embedded PostgreSQL (started in a temporary directory by the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
. .venv/bin/activate
ruff check src tests bench
mypy
python -m pytest -q "$@"
