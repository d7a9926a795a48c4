"""Database helpers for tests: assert that the database refused a statement, as the library
reports it (a mnemovault error kind whose ``__cause__`` is the driver's exception of the
expected class), and a scratch database beside the session's for migration tests."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from mnemovault.errors import MnemoError


@contextmanager
def refused_by_database(kind: type[BaseException]) -> Iterator[None]:
    with pytest.raises(MnemoError) as info:
        yield
    assert isinstance(info.value.__cause__, kind), repr(info.value.__cause__)


@contextmanager
def scratch_database(base_url: str, prefix: str) -> Iterator[str]:
    """A new, empty database on the server of ``base_url`` (the session's), named
    ``<prefix>_<random>``; yields its URL and drops it (forcing out connections) after."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    url = re.sub(r"/mnemovault\?", f"/{name}?", base_url)
    assert url != base_url, "the session's database URL names no /mnemovault database"
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield url
    finally:
        with psycopg.connect(base_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
