"""The embedded server's own settings (``MNEMOVAULT_EMBEDDED_SHARED_BUFFERS``, issue 27).

Each start runs in a subprocess (the embedded server is shared per process and stops
with the last one), and the test asks the running server what it uses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from mnemovault.config import Settings
from mnemovault.store import embedded

# start the server of argv[1] with shared_buffers argv[2]; print what it runs with (bytes);
# with argv[3] == "hold": keep it running until stdin closes
_START = """
import sys, psycopg
from pathlib import Path
from mnemovault.store.embedded import start_embedded
url = start_embedded(Path(sys.argv[1]), shared_buffers=sys.argv[2])
with psycopg.connect(url) as c:
    print(c.execute("SELECT setting::bigint * 8192 FROM pg_settings "
                    "WHERE name = 'shared_buffers'").fetchone()[0], flush=True)
if sys.argv[3:] == ["hold"]:
    sys.stdin.read()
"""

MB = 1 << 20


def _start(data_dir: Path, value: str) -> int:
    out = subprocess.run([sys.executable, "-c", _START, str(data_dir), value],
                         capture_output=True, text=True, timeout=300, check=True)
    return int(out.stdout.split()[-1])


def test_the_server_runs_with_the_setting_from_its_next_start(tmp_path: Path) -> None:
    data = tmp_path / "vault"
    auto = _start(data, "auto")
    assert auto == int(embedded.shared_buffers_for("auto").removesuffix("MB")) * MB
    assert 128 * MB <= auto <= 1024 * MB
    assert _start(data, "256MB") == 256 * MB
    # another process holds the server: a different value waits for the next start
    holder = subprocess.Popen([sys.executable, "-c", _START, str(data), "256MB", "hold"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert int(holder.stdout.readline()) == 256 * MB
        assert _start(data, "160MB") == 256 * MB
        assert "shared_buffers = '160MB'" in (data / "pg" / embedded.SERVER_CONF).read_text()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=120)
    assert _start(data, "160MB") == 160 * MB
    conf = (data / "pg" / "postgresql.conf").read_text()
    assert conf.count(f"include_if_exists = '{embedded.SERVER_CONF}'") == 1


def test_auto_is_a_quarter_of_memory_within_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    for total, want in ((8 << 30, "1024MB"), (2 << 30, "512MB"), (256 * MB, "128MB")):
        pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": total // 4096}
        monkeypatch.setattr(embedded.os, "sysconf", pages.__getitem__)
        assert embedded.shared_buffers_for("auto") == want
    assert embedded.shared_buffers_for("300MB") == "300MB"


@pytest.mark.parametrize("value", ["64MB", "lots", "1TB", "-1GB", ""])
def test_a_bad_value_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(ValidationError, match="MNEMOVAULT_EMBEDDED_SHARED_BUFFERS"):
        Settings(embedded_shared_buffers=value)
    assert Settings(embedded_shared_buffers=" 2GB ").embedded_shared_buffers == "2GB"
