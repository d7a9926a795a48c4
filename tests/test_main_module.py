"""``python -m mnemovault`` is the CLI (as ``python -m mnemovault.cli`` and the console
script are)."""

from __future__ import annotations

import subprocess
import sys


def test_python_dash_m_mnemovault_runs_the_cli() -> None:
    proc = subprocess.run([sys.executable, "-m", "mnemovault", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout and "remember" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "mnemovault", "no-such-command"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no-such-command" in bad.stderr
