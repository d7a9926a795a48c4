#!/usr/bin/env bash
# What the console's browser tests (tests/test_console_browser.py) need: Debian's headless
# Chromium and its matching chromedriver (one source package, one version), and Selenium in
# the venv. Nothing downloads a browser: apt installs Debian's build, pip installs the pure
# Python client. Idempotent, and quick (no apt, no pip) when everything is there.
# Usage: scripts/browser.sh            (CI: before scripts/test.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}  # the project's venv (scripts/setup.sh makes it)
if [ ! -x "$PY" ]; then
  echo "no $PY: run scripts/setup.sh first, or set PYTHON" >&2
  exit 2
fi

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing chromium and chromium-driver (Debian packages)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    chromium chromium-driver >/dev/null
fi

if ! "$PY" -c "import selenium" 2>/dev/null; then
  echo "installing selenium into $PY's environment" >&2
  "$PY" -m pip install -q "selenium>=4.20,<4.52"  # the [browser] extra's range
fi

/usr/bin/chromium --version >&2
/usr/bin/chromedriver --version >&2
"$PY" -c "import selenium; print('selenium', selenium.__version__)" >&2
