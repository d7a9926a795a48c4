#!/usr/bin/env bash
# Quick start, command 2: set up with the dev tools, then lint, type-check and run the tests
# against a real embedded PostgreSQL (started in a temporary directory by the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
# the framework adapters' extras too, so tests/test_integration_*.py run (about 80 s more)
scripts/setup.sh dev,langgraph,openai-agents,llamaindex
. .venv/bin/activate
ruff check src tests bench
mypy
python -m pytest -q "$@"
