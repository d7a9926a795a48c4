"""Tests that only make sense on a Citus cluster: they run when ``MNEMOVAULT_TEST_DATABASE_URL``
names a Citus coordinator (``.ci/run`` starts ``../shared/citus/cluster.sh`` and sets it) and
skip otherwise.

``SUBSET`` below is the part of the existing suite that CI also runs against the coordinator
(every governed operation, isolation and the audit chain); collecting this directory marks
those tests ``citus`` too, so ``-m citus`` selects the whole Citus run. ``NOT_ON_CITUS``
names the tests of those files that cannot run there, and why; they are skipped (with the
reason) when the database is a Citus coordinator.

The subset needs a database of its own per session (a fresh cluster, as ``.ci/run`` starts):
each session makes its own KEK file, and a session that finds data keys of another one's
KEK refuses to open the vault."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.conftest import TEST_DATABASE_URL

# whole files of the existing suite that CI runs against the coordinator
SUBSET = (
    "tests/test_store.py",          # schema, login role, signed tenant, isolation
    "tests/test_vault.py",          # remember (vault entries, audit row), recall, get, page
    "tests/test_forget.py",         # forget: memories, lineage, graph, vault, audit, ledger
    "tests/test_erase.py",          # subject erase and its conflicts with writes
    "tests/test_pii_vault.py",      # the vault, shred, KEK rotation
    "tests/test_audit_service.py",  # the audit chain, its head row, proofs, checkpoints
    "tests/test_procedures.py",     # procedures, runs, feedback, prune
    "tests/test_tenant_delete.py",  # tenant soft delete and purge
    "tests/test_review_gate.py",    # the review gate
    "tests/test_lexical_stats.py",  # BM25 statistics kept by triggers (on the shards)
    "tests/test_retention.py",      # the retention job over every tenant, its scheduler
    "tests/test_postings.py",       # BM25 postings kept by triggers (on the shards), top-n
    "tests/test_visibility.py",     # the one visibility rule: pending, limits, reveal
    "tests/test_stat_deltas.py",    # BM25 statistics' deltas and their fold, access log
    "tests/test_sealed_content.py", # content sealed under keys outside the database
    "tests/test_keystore.py",       # the key stores (directory, PostgreSQL)
)

_EMBEDDED = ("makes a database of its own next to the session's by renaming the embedded "
             "server's `/mnemovault` URL")
_CLI = ("runs the CLI on the test's data dir, which has no database URL: the CLI starts "
        "its own embedded server there (the same commands are covered through the facade)")
NOT_ON_CITUS: dict[str, str] = {
    "tests/test_store.py::test_migrations_from_empty_reach_head":
        "asserts the plain schema's extensions (plpgsql, vector); Citus adds `citus`",
    "tests/test_store.py::test_a_schema_from_before_the_login_role_is_migrated_to_it": _EMBEDDED,
    "tests/test_store.py::test_an_app_login_that_owns_the_tables_is_refused": _EMBEDDED,
    "tests/test_store.py::test_app_password_is_stored_as_a_scram_verifier": _EMBEDDED,
    "tests/test_store.py::test_sql_on_an_app_connection_cannot_switch_tenant":
        "switches the tenant with set_config, which Citus keeps on the coordinator (the "
        "shards see no tenant); the Citus form is tests/citus/test_citus.py::"
        "test_signed_tenant_reaches_the_workers_only_by_set_local",
    "tests/test_forget.py::test_migration_indexes_memories_stored_before_it": _EMBEDDED,
    "tests/test_forget.py::test_cli_forget_preview_confirm_pin": _CLI,
    "tests/test_erase.py::test_http_and_cli": _CLI,
    "tests/test_tenant_delete.py::test_cli_delete_cancel_status_and_purge": _CLI,
    "tests/test_review_gate.py::test_cli_review_list_approve_reject": _CLI,
    "tests/test_retention.py::test_cli_retention_run": _CLI,
    "tests/test_postings.py::"
    "test_the_migration_fills_the_postings_of_memories_stored_before_it": _EMBEDDED,
    "tests/test_postings.py::test_postings_follow_every_change":
        "the test's own checks join lexical_postings and memories without tenant_id, a "
        "join Citus refuses (it would repartition); the same changes are checked on Citus "
        "by tests/citus/test_citus_lexical.py::test_postings_follow_writes_forget_and_purge",
    "tests/test_procedures.py::test_free_text_is_pseudonymised":
        "the test's own check joins memories and procedures without tenant_id, a join "
        "Citus refuses (it would repartition); the product's queries join on tenant_id",
}


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
        elif item.nodeid.startswith(tuple(f"{f}::" for f in SUBSET)):
            item.add_marker(pytest.mark.citus)
            reason = NOT_ON_CITUS.get(item.nodeid.split("[")[0])
            if reason is not None and CITUS:
                item.add_marker(pytest.mark.skip(reason=f"not on Citus: {reason}"))
