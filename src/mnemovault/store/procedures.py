"""SQL of procedural memory: the ``procedures`` and ``procedure_runs`` tables (migration
``0008_procedures``), and the ``memories`` rows of type ``procedure`` they hang off.

Every function runs in the caller's transaction (tenant set for row-level security; each
statement names the tenant too, which on Citus routes it to one shard) and
returns plain rows (dicts) or ids; the rules (validation, ranking, verdict precedence,
what an erase or a prune may remove) live in :mod:`mnemovault.procedures`. Counters are
changed by relative ``UPDATE``s (``runs = runs + 1``) under the procedure's row lock, so
concurrent run recorders never lose an increment.

Also touches ``graph_node_support`` / ``graph_edge_support`` (:func:`release_nodes`): a
run's placeholders are indexed as support of its procedure's memory, and an erase of a
subject's runs releases the ones nothing of that procedure uses any more.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import Jsonb

from mnemovault.store.memories import KEEP_PLAINTEXT, stored_plaintext

if TYPE_CHECKING:
    import numpy as np

Conn = psycopg.Connection[Any]

PROCEDURE_COLUMNS = (
    "m.id, m.scope, m.subject_id, m.content, m.pinned, m.archived, m.status, m.created_at, "
    "m.updated_at, m.provenance, m.parent_id, m.version, m.key_id, m.content_sealed, "
    "m.provenance_sealed, p.name, p.intent, p.steps, p.sealed AS procedure_sealed, p.runs, "
    "p.successes, p.judged_runs, p.judged_successes, p.first_used, p.last_used"
)
"""The columns a :class:`~mnemovault.procedures.models.Procedure` is built from (the row
factory opens the sealed ones: :mod:`mnemovault.pii.sealing`)."""

RUN_COLUMNS = (
    "r.id, r.procedure_id, r.scope, r.subject_id, r.ran_at, r.duration_ms, r.agent_verdict, "
    "r.evaluator, r.evaluator_verdict, r.score, r.person_verdict, r.feedback_accuracy, "
    "r.feedback_efficiency, r.feedback_satisfaction, r.feedback_at, r.provenance, "
    "r.key_id, r.provenance_sealed, r.success, r.judged"
)
"""The columns a :class:`~mnemovault.procedures.models.Run` is built from."""

_FROM = ("FROM memories m JOIN procedures p ON p.tenant_id = m.tenant_id "
         "AND p.memory_id = m.id")


# -- write -----------------------------------------------------------------------------
def insert(conn: Conn, *, tenant: str, memory_id: uuid.UUID, scope: str, subject: str | None,
           content: str, embedding: Any, status: str, provenance: dict[str, Any],
           parent_id: uuid.UUID | None, version: int, now: datetime, name: str, intent: str,
           steps: dict[str, Any], terms: tuple[str, int], key_id: uuid.UUID,
           sealed: bytes, provenance_sealed: bytes, procedure_sealed: bytes) -> None:
    """Insert a procedure: its ``memories`` row (type ``procedure``) and its
    ``procedures`` row. ``embedding`` None copies the parent's (a new version asked
    without a question). ``terms``: the content's keyed terms, (tsv, tsv_length).
    ``provenance`` is the clear part (:func:`mnemovault.pii.sealing.split_provenance`);
    ``name``, ``intent`` and ``steps`` are sealed in ``procedure_sealed`` (the clear
    columns get empty values)."""
    cols = ("tenant_id, id, scope, subject_id, type, content, embedding, status, created_at, "
            "updated_at, provenance, parent_id, version, tsv, tsv_length, key_id, "
            "content_sealed, provenance_sealed, valid_from")
    params = {"t": tenant, "id": memory_id, "scope": scope, "subject": subject,
              "content": stored_plaintext(content), "emb": embedding, "status": status,
              "now": now, "prov": Jsonb(provenance), "parent": parent_id, "version": version,
              "tsv": terms[0], "tsvlen": terms[1], "kid": key_id, "sealed": sealed,
              "psealed": provenance_sealed}
    if embedding is None:
        # the parent's own tenant_id as the new row's: on Citus the INSERT ... SELECT then
        # runs on the shard (a constant there makes Citus copy the row through the
        # coordinator, which row-level security refuses)
        conn.execute(
            f"INSERT INTO memories ({cols}) SELECT tenant_id, %(id)s, %(scope)s, %(subject)s, "
            "'procedure', %(content)s, embedding, %(status)s, %(now)s, %(now)s, %(prov)s, "
            "%(parent)s, %(version)s, %(tsv)s::tsvector, %(tsvlen)s, %(kid)s, %(sealed)s, "
            "%(psealed)s, %(now)s FROM memories WHERE tenant_id = %(t)s AND id = %(parent)s",
            params)
    else:
        conn.execute(
            f"INSERT INTO memories ({cols}) VALUES (%(t)s, %(id)s, %(scope)s, %(subject)s, "
            "'procedure', %(content)s, %(emb)s, %(status)s, %(now)s, %(now)s, %(prov)s, "
            "%(parent)s, %(version)s, %(tsv)s::tsvector, %(tsvlen)s, %(kid)s, %(sealed)s, "
            "%(psealed)s, %(now)s)",
            params)
    conn.execute(
        "INSERT INTO procedures (tenant_id, memory_id, name, intent, steps, sealed, "
        "created_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (tenant, memory_id, stored_plaintext(name), stored_plaintext(intent),
         Jsonb(steps if KEEP_PLAINTEXT else {}), procedure_sealed, now))


def lock(conn: Conn, tenant: str, memory_id: uuid.UUID) -> dict[str, Any] | None:
    """The procedure ``memory_id`` (:data:`PROCEDURE_COLUMNS`), its memory row locked
    ``FOR UPDATE``; None when there is no such procedure."""
    return conn.execute(f"SELECT {PROCEDURE_COLUMNS} {_FROM} WHERE m.tenant_id = %s "
                        "AND m.id = %s AND m.type = 'procedure' FOR UPDATE OF m",
                        (tenant, memory_id)).fetchone()


def supersede(conn: Conn, tenant: str, memory_id: uuid.UUID, now: datetime) -> bool:
    """Mark procedure ``memory_id`` superseded (its valid time ends ``now``, where its
    successor's begins); whether it was live until now."""
    row = conn.execute(
        "UPDATE memories SET status = 'superseded', updated_at = %s, "
        "valid_to = greatest(coalesce(valid_from, %s), %s) WHERE tenant_id = %s "
        "AND id = %s AND type = 'procedure' AND status <> 'superseded' RETURNING id",
        (now, now, now, tenant, memory_id)).fetchone()
    return row is not None


def supersede_parents_of_active(conn: Conn, tenant: str, ids: Sequence[uuid.UUID],
                                now: datetime) -> list[uuid.UUID]:
    """For the active procedures among ``ids`` that are versions, mark their parents
    superseded (their valid time ends where the child's begins); the parents changed,
    sorted."""
    rows = conn.execute(
        "UPDATE memories p SET status = 'superseded', updated_at = %s, "
        "valid_to = greatest(p.valid_from, c.valid_from) FROM memories c "
        "WHERE p.tenant_id = %s AND c.tenant_id = p.tenant_id AND c.parent_id = p.id "
        "AND c.id = ANY(%s) AND c.type = 'procedure' AND c.status = 'active' "
        "AND p.status <> 'superseded' RETURNING p.id", (now, tenant, list(ids))).fetchall()
    return sorted(r["id"] for r in rows)


# -- read ------------------------------------------------------------------------------
def get(conn: Conn, tenant: str, memory_id: uuid.UUID) -> dict[str, Any] | None:
    """One procedure (:data:`PROCEDURE_COLUMNS`), whatever its status."""
    return conn.execute(f"SELECT {PROCEDURE_COLUMNS} {_FROM} WHERE m.tenant_id = %s "
                        "AND m.id = %s", (tenant, memory_id)).fetchone()


def recent_runs(conn: Conn, tenant: str, memory_id: uuid.UUID,
                limit: int, *, subject: str | None = None) -> list[dict[str, Any]]:
    """The newest ``limit`` runs of a procedure (:data:`RUN_COLUMNS`), newest first; with
    ``subject`` (as stored: a subject-limited key's limit) only that subject's runs."""
    cond = "" if subject is None else " AND r.subject_id = %(subject)s"
    return conn.execute(f"SELECT {RUN_COLUMNS} FROM procedure_runs r WHERE r.tenant_id = "
                        f"%(t)s AND r.procedure_id = %(id)s{cond} "
                        "ORDER BY r.ran_at DESC, r.id DESC LIMIT %(limit)s",
                        {"t": tenant, "id": memory_id, "limit": limit,
                         "subject": subject}).fetchall()


def candidates(conn: Conn, qvec: np.ndarray[Any, Any], *, tenant: str, scope: str,
               subject: str | None, tags: Sequence[str], n: int,
               ef_search: int = 100) -> list[dict[str, Any]]:
    """The ``n`` live procedures of ``scope`` nearest to ``qvec`` by cosine distance
    (HNSW with iterative scans, as memory recall), nearest first: active, not archived,
    and not the parent of an active version. Each row: :data:`PROCEDURE_COLUMNS` and
    ``similarity`` (``1 - cosine distance``)."""
    conn.execute(f"SET LOCAL hnsw.ef_search = {int(max(ef_search, n))}")
    conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
    params: dict[str, Any] = {"q": qvec, "n": n, "tenant": tenant, "scope": scope}
    where = ("m.tenant_id = %(tenant)s AND m.scope = %(scope)s AND m.type = 'procedure' "
             "AND m.status = 'active' AND NOT m.archived")
    if subject is not None:
        where += " AND m.subject_id = %(subject)s"
        params["subject"] = subject
    if tags:
        where += " AND m.provenance -> 'tags' ?| %(tags)s"
        params["tags"] = list(tags)
    rows = conn.execute(
        f"WITH near AS (SELECT m.id, m.embedding <=> %(q)s AS distance FROM memories m "
        f"WHERE {where} ORDER BY m.embedding <=> %(q)s LIMIT %(n)s) "
        f"SELECT {PROCEDURE_COLUMNS}, 1 - near.distance AS similarity FROM near "
        "JOIN memories m ON m.tenant_id = %(tenant)s AND m.id = near.id "
        "JOIN procedures p ON p.tenant_id = m.tenant_id AND p.memory_id = m.id "
        "WHERE NOT EXISTS (SELECT 1 FROM memories c WHERE c.tenant_id = m.tenant_id "
        "AND c.parent_id = m.id AND c.type = 'procedure' AND c.status = 'active')",
        params).fetchall()
    rows.sort(key=lambda r: -float(r["similarity"]))
    return rows


# -- runs ------------------------------------------------------------------------------
def insert_run(conn: Conn, *, tenant: str, run_id: uuid.UUID, procedure_id: uuid.UUID,
               scope: str, subject: str | None, ran_at: datetime, duration_ms: float | None,
               agent_verdict: str | None, evaluator: str | None,
               evaluator_verdict: str | None, score: float | None,
               provenance: dict[str, Any], key_id: uuid.UUID,
               provenance_sealed: bytes) -> dict[str, Any]:
    """Insert a run and count it in its procedure's counters (one row lock on the
    procedure: exact under concurrent recorders). Returns the procedure's counters after
    the update (``runs``, ``successes``, ``judged_runs``, ``judged_successes``,
    ``first_used``, ``last_used``) and the run's ``success`` and ``judged``.
    ``provenance``: the clear part; the writer's is ``provenance_sealed`` under ``key_id``
    (the run's own owner's key)."""
    run = conn.execute(
        "INSERT INTO procedure_runs (tenant_id, id, procedure_id, scope, subject_id, ran_at, "
        "duration_ms, agent_verdict, evaluator, evaluator_verdict, score, provenance, "
        "key_id, provenance_sealed) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
        "RETURNING success, judged",
        (tenant, run_id, procedure_id, scope, subject, ran_at, duration_ms, agent_verdict,
         evaluator, evaluator_verdict, score, Jsonb(provenance), key_id,
         provenance_sealed)).fetchone()
    assert run is not None
    counters = bump(conn, tenant, procedure_id, runs=1, successes=int(run["success"]),
                    judged_runs=int(run["judged"]),
                    judged_successes=int(run["success"] and run["judged"]), used_at=ran_at)
    return {**counters, "success": run["success"], "judged": run["judged"]}


def bump(conn: Conn, tenant: str, procedure_id: uuid.UUID, *, runs: int = 0,
         successes: int = 0,
         judged_runs: int = 0, judged_successes: int = 0,
         used_at: datetime | None = None) -> dict[str, Any]:
    """Add the deltas to a procedure's counters (and widen first/last use to ``used_at``);
    the counters after."""
    row = conn.execute(
        "UPDATE procedures SET runs = runs + %(r)s, successes = successes + %(s)s, "
        "judged_runs = judged_runs + %(j)s, judged_successes = judged_successes + %(js)s, "
        "first_used = CASE WHEN %(at)s::timestamptz IS NULL THEN first_used "
        "  ELSE least(first_used, %(at)s) END, "
        "last_used = CASE WHEN %(at)s::timestamptz IS NULL THEN last_used "
        "  ELSE greatest(last_used, %(at)s) END "
        "WHERE tenant_id = %(t)s AND memory_id = %(id)s RETURNING runs, successes, "
        "judged_runs, judged_successes, first_used, last_used",
        {"r": runs, "s": successes, "j": judged_runs, "js": judged_successes, "at": used_at,
         "id": procedure_id, "t": tenant}).fetchone()
    assert row is not None
    return dict(row)


def lock_run(conn: Conn, tenant: str, run_id: uuid.UUID) -> dict[str, Any] | None:
    """One run (:data:`RUN_COLUMNS`) locked ``FOR UPDATE``, or None."""
    return conn.execute(f"SELECT {RUN_COLUMNS} FROM procedure_runs r WHERE r.tenant_id = %s "
                        "AND r.id = %s FOR UPDATE", (tenant, run_id)).fetchone()


def get_run(conn: Conn, tenant: str, run_id: uuid.UUID) -> dict[str, Any] | None:
    """One run (:data:`RUN_COLUMNS`), or None."""
    return conn.execute(f"SELECT {RUN_COLUMNS} FROM procedure_runs r WHERE r.tenant_id = %s "
                        "AND r.id = %s", (tenant, run_id)).fetchone()


def set_evaluation(conn: Conn, tenant: str, run_id: uuid.UUID, *, evaluator: str,
                   verdict: str, score: float | None) -> dict[str, Any]:
    """Store an evaluator's name, verdict and score on a run (replacing an earlier
    evaluator's; the person's and the agent's verdicts are other columns, untouched).
    Returns the run after (:data:`RUN_COLUMNS`)."""
    row = conn.execute(
        "UPDATE procedure_runs r SET evaluator = %s, evaluator_verdict = %s, score = %s "
        f"WHERE r.tenant_id = %s AND r.id = %s RETURNING {RUN_COLUMNS}",
        (evaluator, verdict, score, tenant, run_id)).fetchone()
    assert row is not None
    return dict(row)


def counters(conn: Conn, tenant: str, procedure_id: uuid.UUID) -> dict[str, Any]:
    """A procedure's counters (``runs``, ``successes``, ``judged_runs``,
    ``judged_successes``, ``first_used``, ``last_used``)."""
    row = conn.execute(
        "SELECT runs, successes, judged_runs, judged_successes, first_used, last_used "
        "FROM procedures WHERE tenant_id = %s AND memory_id = %s",
        (tenant, procedure_id)).fetchone()
    assert row is not None
    return dict(row)


def set_feedback(conn: Conn, tenant: str, run_id: uuid.UUID, *, scores: dict[str, float | None],
                 person_verdict: str | None, agent_verdict: str | None,
                 at: datetime) -> dict[str, Any]:
    """Store feedback on a run: the scores given (``accuracy``, ``efficiency``,
    ``satisfaction``; None keeps the old one) and a person's or the agent's verdict (None
    keeps the old one). Returns the run after (:data:`RUN_COLUMNS`)."""
    row = conn.execute(
        "UPDATE procedure_runs r SET "
        "feedback_accuracy = coalesce(%(a)s, feedback_accuracy), "
        "feedback_efficiency = coalesce(%(e)s, feedback_efficiency), "
        "feedback_satisfaction = coalesce(%(s)s, feedback_satisfaction), "
        "person_verdict = coalesce(%(pv)s, person_verdict), "
        "agent_verdict = coalesce(%(av)s, agent_verdict), feedback_at = %(at)s "
        f"WHERE r.tenant_id = %(t)s AND r.id = %(id)s RETURNING {RUN_COLUMNS}",
        {"a": scores.get("accuracy"), "e": scores.get("efficiency"),
         "s": scores.get("satisfaction"), "pv": person_verdict, "av": agent_verdict,
         "at": at, "id": run_id, "t": tenant}).fetchone()
    assert row is not None
    return dict(row)


# -- prune -----------------------------------------------------------------------------
def old_runs(conn: Conn, tenant: str, before: datetime, *, delete: bool) -> int:
    """How many runs ran before ``before``; with ``delete`` they are deleted (counters
    are kept: they summarise every run ever recorded)."""
    if delete:
        cur = conn.execute("DELETE FROM procedure_runs WHERE tenant_id = %s AND ran_at < %s",
                           (tenant, before))
        return cur.rowcount
    row = conn.execute("SELECT count(*) AS n FROM procedure_runs WHERE tenant_id = %s "
                       "AND ran_at < %s", (tenant, before)).fetchone()
    return int(row["n"]) if row else 0


def unused(conn: Conn, tenant: str, before: datetime) -> list[uuid.UUID]:
    """Unpinned procedures last used (or, never used, created) before ``before``, in id
    order."""
    rows = conn.execute(
        f"SELECT m.id {_FROM} WHERE m.tenant_id = %s AND m.type = 'procedure' "
        "AND NOT m.pinned AND coalesce(p.last_used, m.created_at) < %s ORDER BY m.id",
        (tenant, before)).fetchall()
    return [r["id"] for r in rows]


# -- subjects --------------------------------------------------------------------------
def subject_runs(conn: Conn, tenant: str, *, scope: str, subject: str,
                 after: uuid.UUID | None, limit: int) -> list[dict[str, Any]]:
    """Runs of ``subject`` in ``scope`` (as stored), oldest id first, after ``after``; at
    most ``limit`` (:data:`RUN_COLUMNS`)."""
    return conn.execute(
        f"SELECT {RUN_COLUMNS} FROM procedure_runs r WHERE r.tenant_id = %s AND r.scope = %s "
        "AND r.subject_id = %s AND (%s::uuid IS NULL OR r.id > %s) ORDER BY r.id LIMIT %s",
        (tenant, scope, subject, after, after, limit)).fetchall()


def subject_procedures(conn: Conn, tenant: str, *, scope: str, subject: str,
                       after: uuid.UUID | None, limit: int) -> list[dict[str, Any]]:
    """Procedures of ``subject`` in ``scope`` (as stored), every status, oldest id first,
    after ``after``; at most ``limit`` (:data:`PROCEDURE_COLUMNS`)."""
    return conn.execute(
        f"SELECT {PROCEDURE_COLUMNS} {_FROM} WHERE m.tenant_id = %s AND m.scope = %s "
        "AND m.subject_id = %s AND (%s::uuid IS NULL OR m.id > %s) ORDER BY m.id LIMIT %s",
        (tenant, scope, subject, after, after, limit)).fetchall()


def delete_subject_runs(conn: Conn, tenant: str, *, scope: str,
                        subject: str) -> list[dict[str, Any]]:
    """Delete the runs of ``subject`` in ``scope`` on procedures that are not the
    subject's own, and take them out of those procedures' counters (first and last use
    recomputed from the runs that remain). Returns one row per procedure adjusted:
    ``procedure_id``, the deltas removed (``runs``, ``successes``, ``judged_runs``,
    ``judged_successes``) and ``run_ids`` (the runs deleted, sorted)."""
    return _delete_runs(
        conn, tenant, "r.scope = %(scope)s AND r.subject_id = %(subject)s "
        "AND m.subject_id IS DISTINCT FROM %(subject)s", {"scope": scope, "subject": subject})


def delete_runs(conn: Conn, tenant: str, run_ids: Sequence[uuid.UUID]) -> list[dict[str, Any]]:
    """Delete the runs ``run_ids`` that exist and take them out of their procedures'
    counters, as :func:`delete_subject_runs` (which returns the same rows)."""
    if not run_ids:
        return []
    return _delete_runs(conn, tenant, "r.id = ANY(%(ids)s)", {"ids": sorted(run_ids)})


def existing_runs(conn: Conn, tenant: str, run_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """Those of ``run_ids`` that exist, sorted."""
    if not run_ids:
        return []
    rows = conn.execute("SELECT id FROM procedure_runs WHERE tenant_id = %s AND id = ANY(%s) "
                        "ORDER BY id", (tenant, list(run_ids))).fetchall()
    return [r["id"] for r in rows]


def _delete_runs(conn: Conn, tenant: str, where: str,
                 params: dict[str, Any]) -> list[dict[str, Any]]:
    rows = conn.execute(
        "WITH gone AS ("
        " DELETE FROM procedure_runs r USING memories m WHERE r.tenant_id = %(t)s "
        f" AND m.tenant_id = r.tenant_id AND m.id = r.procedure_id AND {where} "
        " RETURNING r.id, r.procedure_id, r.success, r.judged"
        "), sums AS ("
        " SELECT procedure_id, count(*)::int AS runs, "
        " count(*) FILTER (WHERE success)::int AS successes, "
        " count(*) FILTER (WHERE judged)::int AS judged_runs, "
        " count(*) FILTER (WHERE success AND judged)::int AS judged_successes, "
        " array_agg(id ORDER BY id) AS run_ids "
        " FROM gone GROUP BY procedure_id"
        ") UPDATE procedures p SET runs = p.runs - s.runs, "
        " successes = p.successes - s.successes, judged_runs = p.judged_runs - s.judged_runs, "
        " judged_successes = p.judged_successes - s.judged_successes "
        "FROM sums s WHERE p.tenant_id = %(t)s AND p.memory_id = s.procedure_id "
        "RETURNING s.procedure_id, s.runs, s.successes, s.judged_runs, s.judged_successes, "
        "s.run_ids", {**params, "t": tenant}).fetchall()
    ids = [r["procedure_id"] for r in rows]
    if ids:  # a separate statement: the CTE's DELETE is not visible to its own UPDATE
        conn.execute(
            "UPDATE procedures p SET first_used = u.first_used, last_used = u.last_used "
            "FROM (SELECT i AS id, (SELECT min(ran_at) FROM procedure_runs r "
            "WHERE r.tenant_id = %(t)s AND r.procedure_id = i) AS first_used, "
            "(SELECT max(ran_at) FROM procedure_runs r WHERE r.tenant_id = %(t)s "
            "AND r.procedure_id = i) AS last_used "
            "FROM unnest(%(ids)s::uuid[]) AS i) u WHERE p.tenant_id = %(t)s "
            "AND p.memory_id = u.id", {"ids": ids, "t": tenant})
    return [dict(r) for r in rows]


def stored_texts(conn: Conn, tenant: str, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Per procedure, every stored free-text field of it and of its remaining runs, joined
    (where its placeholders can be), as the row factory opens them."""
    rows = conn.execute(
        "SELECT m.id, m.scope, m.subject_id, m.content, m.key, m.provenance, m.key_id, "
        "m.content_sealed, m.key_sealed, m.provenance_sealed, p.name, p.intent, p.steps, "
        f"p.sealed AS procedure_sealed {_FROM} WHERE m.tenant_id = %s AND m.id = ANY(%s)",
        (tenant, list(ids))).fetchall()
    runs = conn.execute(
        "SELECT id, procedure_id, subject_id, evaluator, provenance, key_id, "
        "provenance_sealed FROM procedure_runs WHERE tenant_id = %s "
        "AND procedure_id = ANY(%s)", (tenant, list(ids))).fetchall()
    out: dict[uuid.UUID, list[str]] = {}
    for r in rows:
        out[r["id"]] = [r["content"], r["scope"], r["subject_id"], r["key"],
                        json.dumps(r["provenance"], ensure_ascii=False), r["name"],
                        r["intent"], json.dumps(r["steps"], ensure_ascii=False)]
    for r in runs:
        out.setdefault(r["procedure_id"], []).extend(
            [r["subject_id"], r["evaluator"], json.dumps(r["provenance"], ensure_ascii=False)])
    return {i: " ".join(t for t in texts if t) for i, texts in out.items()}


def supported_nodes(conn: Conn, tenant: str, memory_id: uuid.UUID) -> list[str]:
    """The graph nodes ``memory_id`` supports, sorted."""
    rows = conn.execute("SELECT node_id FROM graph_node_support WHERE tenant_id = %s "
                        "AND memory_id = %s ORDER BY node_id", (tenant, memory_id)).fetchall()
    return [r["node_id"] for r in rows]


def release_nodes(conn: Conn, tenant: str, memory_id: uuid.UUID, nodes: Sequence[str]) -> None:
    """Remove ``memory_id``'s support of ``nodes`` (and of the edges touching them)."""
    conn.execute("DELETE FROM graph_edge_support WHERE tenant_id = %s AND memory_id = %s "
                 "AND (source_node = ANY(%s) OR target_node = ANY(%s))",
                 (tenant, memory_id, list(nodes), list(nodes)))
    conn.execute("DELETE FROM graph_node_support WHERE tenant_id = %s AND memory_id = %s "
                 "AND node_id = ANY(%s)", (tenant, memory_id, list(nodes)))


# -- sealing what was written before migration 0017 (mnemovault.subjects.keys) -------------
def unsealed(conn: Conn, tenant: str, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` procedures whose name, intent and steps are not sealed yet and
    whose memory row is (``key_id`` set), locked: ``id``, ``scope``, ``subject_id``,
    ``key_id``, ``name``, ``intent``, ``steps`` (and ``erased`` when the row's key was
    destroyed)."""
    return conn.execute(
        "SELECT m.id, m.scope, m.subject_id, m.key_id, m.content_sealed, p.name, p.intent, "
        f"p.steps {_FROM} WHERE m.tenant_id = %s AND p.sealed IS NULL "
        "AND m.key_id IS NOT NULL ORDER BY m.id LIMIT %s FOR UPDATE OF p SKIP LOCKED",
        (tenant, limit)).fetchall()


def set_sealed(conn: Conn, tenant: str, rows: Sequence[tuple[uuid.UUID, bytes]]) -> None:
    """Seal procedures in place: each (memory id, sealed); the clear columns emptied."""
    sql = ("UPDATE procedures SET sealed = %s WHERE tenant_id = %s AND memory_id = %s"
           if KEEP_PLAINTEXT else
           "UPDATE procedures SET sealed = %s, name = '', intent = '', steps = '{}'::jsonb "
           "WHERE tenant_id = %s AND memory_id = %s")
    with conn.cursor() as cur:
        cur.executemany(sql, [(blob, tenant, i) for i, blob in rows])


def unsealed_runs(conn: Conn, tenant: str, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` runs whose provenance is not sealed yet (``key_id`` NULL), locked:
    ``id``, ``scope``, ``subject_id``, ``provenance``."""
    return conn.execute(
        "SELECT id, scope, subject_id, provenance FROM procedure_runs WHERE tenant_id = %s "
        "AND key_id IS NULL ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
        (tenant, limit)).fetchall()


def set_runs_sealed(conn: Conn, tenant: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Seal runs' provenance in place: each (id, key_id, clear provenance (Jsonb),
    provenance_sealed)."""
    with conn.cursor() as cur:
        cur.executemany(
            "UPDATE procedure_runs SET key_id = %s, provenance = %s, provenance_sealed = %s "
            "WHERE tenant_id = %s AND id = %s",
            [(k, prov, blob, tenant, i) for i, k, prov, blob in rows])


def runs_under_keys(conn: Conn, tenant: str, key_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """The runs sealed under any of ``key_ids`` (destroyed keys: the start's sweep)."""
    rows = conn.execute("SELECT id FROM procedure_runs WHERE tenant_id = %s "
                        "AND key_id = ANY(%s) ORDER BY id", (tenant, list(key_ids))).fetchall()
    return [r["id"] for r in rows]
