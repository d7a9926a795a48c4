"""Tests that only make sense on a Citus cluster: they run when ``MNEMOVAULT_TEST_DATABASE_URL``
names a Citus coordinator (``.ci/run`` starts ``../shared/citus/cluster.sh`` and sets it) and
skip otherwise.

``SUBSET`` below is the part of the existing suite that CI also runs against the coordinator;
collecting this directory marks those tests ``citus`` too, so ``-m citus`` selects the
whole Citus run."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.conftest import TEST_DATABASE_URL

# node-id prefixes of the existing tests that pass against the coordinator today
SUBSET = (
    "tests/test_store.py::test_second_upgrade_is_a_no_op",
    "tests/test_store.py::test_app_role_is_not_privileged",
    "tests/test_store.py::test_app_connection_logs_in_as_the_app_role",
    "tests/test_store.py::test_app_settings_reach_the_database",
    "tests/test_store.py::test_a_privileged_app_login_is_refused",
    "tests/test_store.py::test_app_role_cannot_write_into_another_tenant",
    "tests/test_store.py::test_opening_with_another_embedder_is_refused",
)


def _has_citus(url: str | None) -> bool:
    if not url:
        return False
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            return conn.execute(
                "SELECT 1 FROM pg_extension WHERE extname = 'citus'").fetchone() is not None
    except psycopg.Error:
        return False


CITUS = _has_citus(TEST_DATABASE_URL)


def pytest_collection_modifyitems(config: Any, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith("tests/citus/"):
            item.add_marker(pytest.mark.citus)
            if not CITUS:
                item.add_marker(pytest.mark.skip(
                    reason="no Citus coordinator: set MNEMOVAULT_TEST_DATABASE_URL"))
        elif item.nodeid.startswith(SUBSET):
            item.add_marker(pytest.mark.citus)
