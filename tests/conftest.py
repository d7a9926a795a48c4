"""Shared fixtures: one embedded PostgreSQL per test session (a fresh temporary data
directory), the real local embedder, and a fresh tenant per test."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the erasure ledger's default home (<user state dir>/ledger/<database id>): a throwaway
# directory, not the user's
os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="mv-test-state-"))

from mnemovault.config import Settings
from mnemovault.vault import MemoryVault

SHARED = Path(__file__).resolve().parents[2] / "shared"
_counter = itertools.count()


@pytest.fixture(scope="session")
def data_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="mv-test-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# An external database instead of the embedded one (e.g. a Citus coordinator, tests/citus):
# the owner's URL; the schema is migrated into it and each test still has its own tenant.
TEST_DATABASE_URL = os.environ.get("MNEMOVAULT_TEST_DATABASE_URL") or None


@pytest.fixture(scope="session")
def settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, database_url=TEST_DATABASE_URL)


@pytest.fixture(scope="session")
def vault(settings: Settings) -> Iterator[MemoryVault]:
    mv = MemoryVault.open(settings)
    yield mv
    mv.close()
    from mnemovault.store.embedded import stop

    stop(settings.data_dir)  # before data_dir's teardown removes the directory


@pytest.fixture
def tenant(vault: MemoryVault) -> str:
    """A tenant of this test's own, so tests never see each other's rows."""
    name = f"t{next(_counter)}-{uuid.uuid4().hex[:8]}"
    vault.ensure_tenant(name)
    return name
