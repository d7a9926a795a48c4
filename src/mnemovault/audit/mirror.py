"""The JSON Lines copy of each tenant's audit chain, written from the database after
commit, in sequence order (SPEC section 6: the database is the source of truth; the file
is for shipping elsewhere, and ``mnemovault.audit.verify`` accepts it).

One file per tenant, ``<dir>/<tenant>.jsonl``, one :func:`export_line` a row. Writers in
several processes take an exclusive ``fcntl`` lock on ``<tenant>.jsonl.lock``, read the last
``seq`` already in the file, and append what follows it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import orjson

from mnemovault.audit.chain import export_line
from mnemovault.store import audit as store
from mnemovault.store.db import Database

BATCH = 5000


class JsonlMirror:
    def __init__(self, db: Database, directory: Path) -> None:
        self.db = db
        self.directory = Path(directory)

    def path(self, tenant: str) -> Path:
        return self.directory / f"{tenant}.jsonl"

    def sync(self, tenant: str) -> int:
        """Append the rows committed since the file's last line; returns how many."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(tenant)
        with open(path.with_name(path.name + ".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            last = _last_seq(path)
            written = 0
            with open(path, "ab") as out:
                while True:
                    with self.db.transaction(tenant) as conn:
                        rows = store.rows_after(conn, tenant, last, BATCH)
                    if not rows:
                        break
                    out.write(b"".join(export_line(bytes(r["row_bytes"]), bytes(r["prev_hash"]),
                                                   bytes(r["row_hash"])) for r in rows))
                    last += len(rows)
                    written += len(rows)
                out.flush()
                os.fsync(out.fileno())
        return written


def _last_seq(path: Path) -> int:
    """The ``seq`` of the file's last complete line (0 for a missing or empty file)."""
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size == 0:
            return 0
        chunk = 4096
        while True:
            start = max(0, size - chunk)
            f.seek(start)
            data = f.read(size - start)
            body = data[:-1] if data.endswith(b"\n") else data
            nl = body.rfind(b"\n")
            if nl != -1 or start == 0:
                line = body[nl + 1 :]
                return int(orjson.loads(line)["seq"])
            chunk *= 2
