"""The one forget path (SPEC section 4). Delete on every interface calls :func:`forget`.

In one transaction (the caller's), in this order; each step is a module-level function
named in :data:`STEPS`, so a test can inject a failure after any of them:

1. ``resolve``: the named memories (limited to a scope when given), every version of them
   (a memory with a ``key`` takes its superseded versions along: versions link by
   ``parent_id`` and share scope and key), and, transitively, every memory derived from any
   of them through ``memory_lineage`` (a fact carries information from each of its
   sources) with their versions too. All of them are locked ``FOR UPDATE``.
2. ``collect``: the graph nodes and edges those memories support.
3. ``lineage``: their lineage rows.
4. ``graph_support``: their node and edge support rows.
5. ``memories``: the memories themselves.
6. ``graph_orphans``: nodes and edges no remaining memory supports.
7. ``vault``: crypto-shred the vault values no remaining record uses (their node went in
   step 6) and, when the caller may, the values the forget query named.
8. ``audit``: one ``FORGET`` row: count, first ten ids, derived count, graph counts,
   shredded placeholders, a keyed hash of the query and the placeholders it names, trigger,
   request id. Never content, never the query's text.

A concurrent writer that derives from what is being forgotten makes the delete fail with a
foreign-key violation (see migration ``0003_lineage``) instead of leaving an orphan fact
behind; the caller maps it to a retryable conflict. A writer that mentions an entity
whose node forget may remove is serialised with it by row locks
(:mod:`mnemovault.governance.graph`).
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from mnemovault.audit import log as audit
from mnemovault.governance import graph, lineage
from mnemovault.pii.vault import PLACEHOLDER_RE, PiiVault, TenantKeys, normalise
from mnemovault.store import memories as memory_store

STEPS = ("resolve", "collect", "lineage", "graph_support", "memories", "graph_orphans",
         "vault", "audit")
"""Step names; step ``s`` is the function ``_step_<s>`` of this module."""

EXCERPT_CHARS = 180

@dataclass
class Resolved:
    """What a forget of some ids reaches: ``named`` (found, in scope), ``not_found``,
    ``versions`` (other versions of named ones), ``derived`` (by lineage, with their
    versions); ``all`` is the union, sorted."""

    named: list[uuid.UUID]
    not_found: list[uuid.UUID]
    versions: list[uuid.UUID] = field(default_factory=list)
    derived: list[uuid.UUID] = field(default_factory=list)

    @property
    def all(self) -> list[uuid.UUID]:
        return sorted({*self.named, *self.versions, *self.derived})

    def reasons(self) -> dict[uuid.UUID, str]:
        """id -> ``named``, ``version`` or ``derived``."""
        out = dict.fromkeys(self.derived, "derived")
        out.update(dict.fromkeys(self.versions, "version"))
        out.update(dict.fromkeys(self.named, "named"))
        return out


@dataclass
class ForgetOutcome:
    """The result of :func:`forget`."""

    deleted: list[uuid.UUID]
    not_found: list[uuid.UUID]
    derived: list[uuid.UUID] = field(default_factory=list)
    shredded: list[str] = field(default_factory=list)
    graph_nodes_removed: int = 0
    graph_edges_removed: int = 0
    audit_seq: int | None = None


@dataclass
class _Run:
    """State passed from step to step."""

    tenant: str
    ids: list[uuid.UUID]
    scope: str | None
    lock: bool
    subject: str | None = None
    resolved: Resolved | None = None
    nodes: list[str] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)
    removed_nodes: list[str] = field(default_factory=list)
    removed_edges: int = 0
    shredded: list[str] = field(default_factory=list)


def resolve(conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID], *,
            scope: str | None = None, subject: str | None = None,
            lock: bool = False) -> Resolved:
    """The memories a forget of ``ids`` would delete (see the module docstring); ``scope``
    and ``subject`` (as stored), when given, limit the named ids. With
    ``lock`` every one is locked ``FOR UPDATE``, repeating the walk until nothing new turns
    up (a derivation committed meanwhile is found)."""
    wanted = list(dict.fromkeys(ids))
    found = memory_store.existing(conn, wanted, scope=scope, subject=subject, lock=lock)
    named = [i for i in wanted if i in found]
    res = Resolved(named=named, not_found=[i for i in wanted if i not in found])
    if not named:
        return res
    locked: set[uuid.UUID] = set(named)
    while True:
        versions = memory_store.versions_closure(conn, set(named))
        everything = memory_store.versions_and_derived_closure(conn, versions)
        res.versions = sorted(versions - set(named))
        res.derived = sorted(everything - versions)
        if not lock or everything <= locked:
            return res
        memory_store.lock(conn, sorted(everything - locked))
        locked |= everything


def query_hash(keys: TenantKeys, query: str) -> str:
    """The keyed hash of a forget query for the audit log: hex HMAC-SHA256 of the
    normalised query (case-folded, whitespace collapsed) under a key derived from the
    tenant's fingerprint key for this one purpose. Equal queries give equal hashes within a
    tenant; without the tenant's key the query cannot be confirmed by guessing."""
    key = hmac.new(keys.fingerprint_key, b"mnemovault/audit/forget-query",
                   hashlib.sha256).digest()
    return hmac.new(key, normalise(query).encode("utf-8"), hashlib.sha256).hexdigest()


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """The first ``limit`` characters of ``text``, never ending inside a placeholder."""
    if len(text) <= limit:
        return text
    cut = limit
    for m in PLACEHOLDER_RE.finditer(text, 0, limit + 24):
        if m.start() < limit < m.end():
            cut = m.start()
            break
    return text[:cut]


def preview(conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID], *,
            scope: str | None = None,
            subject: str | None = None) -> tuple[list[dict[str, Any]], list[uuid.UUID]]:
    """What a forget of ``ids`` would delete, deleting nothing: rows of ``id``, ``scope``,
    ``type``, ``archived``, ``status``, ``created_at``, ``reason`` (named, version,
    derived) and ``content`` (as stored, at most 1000 characters: the caller renders and
    cuts it to an excerpt), ordered by id; and the ids not found (or not visible)."""
    res = resolve(conn, ids, scope=scope, subject=subject)
    if not res.named:
        return [], res.not_found
    rows = memory_store.preview_rows(conn, res.all)
    reasons = res.reasons()
    return [{**r, "reason": reasons[r["id"]]} for r in rows], res.not_found


def forget(
    conn: psycopg.Connection[Any],
    *,
    tenant: str,
    ids: Sequence[uuid.UUID],
    actor: str,
    agent: str | None = None,
    trigger: str = "api",
    request_id: str | None = None,
    scope: str | None = None,
    subject: str | None = None,
    pii: PiiVault | None = None,
    query_hash: str | None = None,
    query_placeholders: Sequence[str] = (),
    shred_values: Sequence[str] = (),
) -> ForgetOutcome:
    """Forget ``ids`` with everything that goes with them (module docstring), in ``conn``'s
    transaction. ``scope`` (and ``subject``), when given, limit the named ids (ids elsewhere
    count as not found). ``pii`` enables vault shredding (None when pseudonymisation is
    off). ``query_hash`` and ``query_placeholders`` describe the forget query, if any, for
    the audit row; ``shred_values`` names placeholders to shred even if other records still
    use them (the values the forget query named, when the caller may erase them).

    Nothing is written (not even an audit row) when no id exists.

    Raises:
        psycopg.errors.ForeignKeyViolation: a concurrent write derived from what is
            being forgotten (retrying is safe).
    """
    run = _Run(tenant=tenant, ids=list(ids), scope=scope, lock=True, subject=subject)
    _step_resolve(conn, run)
    assert run.resolved is not None
    if not run.resolved.named:
        return ForgetOutcome(deleted=[], not_found=run.resolved.not_found)
    _step_collect(conn, run)
    _step_lineage(conn, run)
    _step_graph_support(conn, run)
    _step_memories(conn, run)
    _step_graph_orphans(conn, run)
    _step_vault(conn, run, pii, list(shred_values))
    seq = _step_audit(conn, run, actor=actor, agent=agent, trigger=trigger,
                      request_id=request_id, query_hash=query_hash,
                      query_placeholders=list(query_placeholders))
    r = run.resolved
    return ForgetOutcome(deleted=r.all, not_found=r.not_found, derived=r.derived,
                         shredded=run.shredded, graph_nodes_removed=len(run.removed_nodes),
                         graph_edges_removed=run.removed_edges, audit_seq=seq)


# -- steps ------------------------------------------------------------------------------------
def _step_resolve(conn: psycopg.Connection[Any], run: _Run) -> None:
    run.resolved = resolve(conn, run.ids, scope=run.scope, subject=run.subject,
                           lock=run.lock)


def _step_collect(conn: psycopg.Connection[Any], run: _Run) -> None:
    assert run.resolved is not None
    run.nodes, run.edges = graph.supported_by(conn, run.resolved.all)


def _step_lineage(conn: psycopg.Connection[Any], run: _Run) -> None:
    assert run.resolved is not None
    lineage.delete(conn, run.resolved.all)


def _step_graph_support(conn: psycopg.Connection[Any], run: _Run) -> None:
    assert run.resolved is not None
    graph.delete_support(conn, run.resolved.all)


def _step_memories(conn: psycopg.Connection[Any], run: _Run) -> None:
    assert run.resolved is not None
    memory_store.delete(conn, run.resolved.all)


def _step_graph_orphans(conn: psycopg.Connection[Any], run: _Run) -> None:
    run.removed_nodes, run.removed_edges = graph.delete_orphans(conn, run.nodes, run.edges)


def _step_vault(conn: psycopg.Connection[Any], run: _Run, pii: PiiVault | None,
                named: list[str]) -> None:
    if pii is None:
        return
    unused = [n for n in run.removed_nodes if PLACEHOLDER_RE.fullmatch(n)]
    run.shredded = pii.shred(conn, sorted({*unused, *named}))


def _step_audit(conn: psycopg.Connection[Any], run: _Run, *, actor: str, agent: str | None,
                trigger: str, request_id: str | None, query_hash: str | None,
                query_placeholders: list[str]) -> int:
    assert run.resolved is not None
    r = run.resolved
    deleted = r.all
    details: dict[str, Any] = {
        "count": len(deleted), "requested": len(run.ids), "not_found": len(r.not_found),
        "derived": len(r.derived), "versions": len(r.versions),
        "graph_nodes_removed": len(run.removed_nodes),
        "graph_edges_removed": run.removed_edges, "shredded": run.shredded,
    }
    if query_hash is not None:
        details["query_hash"] = query_hash
        details["query_placeholders"] = sorted(set(query_placeholders))
    return audit.append(conn, tenant=run.tenant, operation="FORGET", actor=actor, agent=agent,
                        memory_ids=[str(i) for i in deleted[:10]], trigger=trigger,
                        request_id=request_id, details=details)
