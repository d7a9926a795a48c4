#!/usr/bin/env bash
# Quick start, command 2: set up with the dev tools, then lint, type-check and run the tests
# against a real embedded PostgreSQL (started in a temporary directory by the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
# the framework adapters' extras too, so tests/test_integration_*.py run (about 80 s more),
# and docs (mkdocs) for the site's build below
scripts/setup.sh dev,langgraph,openai-agents,llamaindex,docs
. .venv/bin/activate
ruff check src tests bench
mypy
# the documentation site: every warning (a broken link or anchor) fails; offline, about 3 s.
# (Its code blocks run in the tests: tests/test_docs_examples.py.)
site_dir=$(mktemp -d /tmp/mv-site-XXXXXX)
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir "$site_dir"
rm -rf "$site_dir"
python -m pytest -q "$@"
