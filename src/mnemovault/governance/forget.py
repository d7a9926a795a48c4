"""The one forget path (SPEC sections 4 and 10). Delete on every interface calls
:func:`forget`; a subject's or a scope's erase calls :func:`erase`: the same steps, only
the first one differs.

In one transaction (the caller's), in this order; each step is a module-level function
``_step_<name>(conn, run)`` named in :data:`STEPS`, so a test can inject a failure after
any of them:

1. ``resolve``: for :func:`forget`, the named memories (limited to a scope, and a subject,
   when given); for :func:`erase`, every memory of the :class:`Target` (all of a subject's
   memories in a scope as stored, or every memory of a scope), whatever their status. Then
   every version of them (a memory with a ``key`` takes its superseded versions along:
   versions link by ``parent_id`` and share scope and key), and, transitively, every memory
   derived from any of them through ``memory_lineage`` (a fact carries information from
   each of its sources) with their versions too. All of them are locked ``FOR UPDATE``.
   For an erase by subject a version link is followed only to a row of the same subject:
   ``key`` is unique per scope, so another subject's later write of the same key became a
   version (``parent_id``) of the subject's row, and it is not the subject's data. That
   row stays, its ``parent_id`` naming a deleted row: acceptable, as nothing needs the
   parent to exist (no foreign key; a review reject of that row marks it rejected and
   finds no parent to restore).
2. ``collect``: the graph nodes and edges those memories support.
3. ``lineage``: their lineage rows.
4. ``graph_support``: their node and edge support rows.
5. ``contribute``: every registered :data:`CONTRIBUTORS` function removes its own rows that
   go with these memories (see "Extending the erase" below).
6. ``memories``: the memories themselves.
7. ``graph_orphans``: nodes and edges no remaining memory supports.
8. ``vault``: crypto-shred the vault values no remaining record uses (their node went in
   step 7) and, when the caller may, the values the forget query named.
9. ``audit``: one row (``FORGET``, ``ERASE`` or ``REAPPLY``): count, first ten ids, a Merkle
   root over every id removed, derived count, graph counts, shredded placeholders, the
   contributors' counts; for a forget query a keyed hash of it and the placeholders it
   names; for an erase the keyed fingerprints of the subject and the scope. Never content,
   never the query's text, never a subject or scope as written.
10. ``ledger``: one ``erasure_ledger`` row keyed by that audit row's seq, listing every id
   and placeholder removed, and the contributors' ids by kind (``Reach.removed``)
   (:mod:`mnemovault.store.ledger`); after commit it is appended to the ledger file outside
   the database (:mod:`mnemovault.subjects.ledger`). :func:`reapply` runs the same steps
   for the ledger's entries after a backup restore (``REAPPLY``).

A concurrent writer that derives from what is being forgotten makes the delete fail with a
foreign-key violation (see migration ``0003_lineage``) instead of leaving an orphan fact
behind; the caller maps it to a retryable conflict. A writer that mentions an entity
whose node forget may remove is serialised with it by row locks
(:mod:`mnemovault.governance.graph`). A write for the subject (or scope) an erase is
removing conflicts with it through an advisory lock (:func:`mnemovault.store.subjects.
lock_for_erase`), taken by the caller before :func:`erase`.

Extending the erase (issue 12: procedure runs and feedback). A capability that keeps rows
hanging off memories is named in :data:`CONTRIBUTORS` (here, so no process can erase
without it; :func:`register_contributor` adds one in tests). ``fn(conn, reach)`` gets a
:class:`Reach` (tenant, every memory id being removed, the erase :class:`Target` or None
for a forget by ids) and runs inside the same transaction before the memories go (so a
foreign key from its rows to ``memories`` is fine); it deletes its rows, may hand graph
nodes and edges it released to ``reach.nodes``/``reach.edges`` (removed if orphaned,
their vault values shredded, by steps 7 and 8), and returns ``{kind: count}``, which lands
in the audit row's ``contributed`` details and in the erasure receipt's counts. It raises
to abort the whole forget. A contributor that removes rows a backup restore would bring
back names their ids in ``reach.removed[kind]`` and a function of :data:`REMOVERS` for that
kind, which :func:`reapply` calls with the ids the ledger recorded.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from mnemovault.audit import log as audit
from mnemovault.audit.merkle import root as merkle_root
from mnemovault.governance import graph, lineage
from mnemovault.pii.vault import PLACEHOLDER_RE, PiiVault, TenantKeys, normalise
from mnemovault.procedures import subjects as procedure_subjects
from mnemovault.store import ledger as ledger_store
from mnemovault.store import memories as memory_store
from mnemovault.store import procedures as procedure_store
from mnemovault.store import subjects as subject_store
from mnemovault.store.db import tenant_of

STEPS = ("resolve", "collect", "lineage", "graph_support", "contribute", "memories",
         "graph_orphans", "vault", "audit", "ledger")
"""Step names; step ``s`` is the function ``_step_<s>(conn, run)`` of this module."""

EXCERPT_CHARS = 180

Conn = psycopg.Connection[Any]


@dataclass(frozen=True)
class Target:
    """What an erase removes: every memory of ``subject`` in ``scope`` (both as stored,
    i.e. pseudonymised), or with ``subject`` None every memory of ``scope``. The keyed
    fingerprints name them in the audit row and the ledger."""

    scope: str
    subject: str | None = None
    scope_fp: str | None = None
    subject_fp: str | None = None


@dataclass(frozen=True)
class Reach:
    """What a contributor sees: the tenant, every memory id being removed (sorted) and the
    erase target (None for a forget by ids)."""

    tenant: str
    memory_ids: list[uuid.UUID]
    target: Target | None
    nodes: list[str] = field(default_factory=list)
    """Graph nodes a contributor released: step ``graph_orphans`` removes them if no
    record supports them any more, and step ``vault`` shreds their values."""
    edges: list[tuple[str, str]] = field(default_factory=list)
    """Edges a contributor released (as ``nodes``)."""
    removed: dict[str, list[uuid.UUID]] = field(default_factory=dict)
    """Ids a contributor removed that are not memories, by kind (``procedure_runs``):
    step ``ledger`` records them, so a reapplication after a backup restore removes them
    again through the kind's :data:`REMOVERS` function."""


Contributor = Callable[[Conn, Reach], dict[str, int]]
CONTRIBUTORS: dict[str, Contributor] = {
    # the subject's runs on procedures that stay, and those procedures' counters
    "procedure_runs": procedure_subjects.erase_contributor,
}
"""Run in step ``contribute`` in name order; named here, not registered at import time,
so no process can erase without them. :func:`register_contributor` adds one (tests)."""


@dataclass(frozen=True)
class Remover:
    """How :func:`reapply` removes again ids of one kind of ``Reach.removed``:
    ``existing(conn, ids)`` those of ``ids`` that exist (a backup restore brought them
    back); ``remove(conn, ids, reach)`` removes them with whatever goes with them
    (counters), hands released graph nodes and edges to ``reach`` and the ids it removed
    to ``reach.removed``, and returns ``{kind: count}``."""

    existing: Callable[[Conn, list[uuid.UUID]], list[uuid.UUID]]
    remove: Callable[[Conn, list[uuid.UUID], Reach], dict[str, int]]


CONTENT_KEYS = "content_keys"
"""The ledger's kind for destroyed content keys: :func:`reapply` removes the memories
sealed under them (with the named ones), so nothing else is left for a remover."""

REMOVERS: dict[str, Remover] = {
    "procedure_runs": Remover(procedure_subjects.existing_runs,
                              procedure_subjects.reapply_runs),
    CONTENT_KEYS: Remover(lambda conn, ids: [], lambda conn, ids, reach: {}),
}
"""For a reapplication of the erasure ledger (:func:`reapply`), by kind of
``Reach.removed``. Every contributor that records ids names its remover here."""


def register_contributor(name: str, fn: Contributor) -> None:
    """Have ``fn`` remove its rows in every forget and erase (module docstring)."""
    CONTRIBUTORS[name] = fn


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
    """The result of :func:`forget` and :func:`erase`. ``ids_root``: hex RFC 9162 Merkle
    root over the removed ids (:func:`ids_root`)."""

    deleted: list[uuid.UUID]
    not_found: list[uuid.UUID]
    derived: list[uuid.UUID] = field(default_factory=list)
    versions: list[uuid.UUID] = field(default_factory=list)
    shredded: list[str] = field(default_factory=list)
    graph_nodes_removed: int = 0
    graph_edges_removed: int = 0
    contributed: dict[str, int] = field(default_factory=dict)
    audit_seq: int | None = None
    ids_root: str = ""
    removed: dict[str, list[uuid.UUID]] = field(default_factory=dict)
    """The contributors' removed ids by kind (``Reach.removed``), as the ledger records."""


@dataclass
class _Run:
    """State passed from step to step."""

    tenant: str
    ids: list[uuid.UUID]
    scope: str | None
    lock: bool
    subject: str | None = None
    target: Target | None = None
    pii: PiiVault | None = None
    shred_values: list[str] = field(default_factory=list)
    operation: str = "FORGET"
    reapply: dict[str, list[uuid.UUID]] = field(default_factory=dict)
    marker: bool = False
    content_keys: list[uuid.UUID] = field(default_factory=list)
    removed: dict[str, list[uuid.UUID]] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    actor: str | None = None
    agent: str | None = None
    trigger: str = "api"
    request_id: str | None = None
    query_hash: str | None = None
    query_placeholders: list[str] = field(default_factory=list)
    resolved: Resolved | None = None
    nodes: list[str] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)
    removed_nodes: list[str] = field(default_factory=list)
    removed_edges: int = 0
    shredded: list[str] = field(default_factory=list)
    contributed: dict[str, int] = field(default_factory=dict)
    audit_seq: int | None = None
    ids_root: str = ""


def ids_root(ids: Sequence[uuid.UUID]) -> str:
    """Hex RFC 9162 Merkle tree head over ``ids`` sorted, each leaf the id's canonical
    text (36 ASCII characters); the empty tree's root for none. A receipt's holder can
    check that a given id was (or was not) among those removed."""
    return merkle_root(str(i).encode("ascii") for i in sorted(ids)).hex()


def _closure(conn: Conn, res: Resolved, lock: bool) -> Resolved:
    named = res.named
    locked: set[uuid.UUID] = set(named)
    tenant = tenant_of(conn)
    while True:
        versions = memory_store.versions_closure(conn, tenant, set(named))
        everything = memory_store.versions_and_derived_closure(conn, tenant, versions)
        res.versions = sorted(versions - set(named))
        res.derived = sorted(everything - versions)
        if not lock or everything <= locked:
            return res
        memory_store.lock(conn, tenant, sorted(everything - locked))
        locked |= everything


def resolve(conn: Conn, ids: Sequence[uuid.UUID], *,
            scope: str | None = None, subject: str | None = None,
            lock: bool = False) -> Resolved:
    """The memories a forget of ``ids`` would delete (see the module docstring); ``scope``
    and ``subject`` (as stored), when given, limit the named ids. With
    ``lock`` every one is locked ``FOR UPDATE``, repeating the walk until nothing new turns
    up (a derivation committed meanwhile is found)."""
    wanted = list(dict.fromkeys(ids))
    found = memory_store.existing(conn, tenant_of(conn), wanted, scope=scope, subject=subject,
                                  lock=lock)
    named = [i for i in wanted if i in found]
    res = Resolved(named=named, not_found=[i for i in wanted if i not in found])
    if not named:
        return res
    return _closure(conn, res, lock)


def resolve_target(conn: Conn, target: Target, *, lock: bool = False) -> Resolved:
    """The memories an erase of ``target`` would delete: every memory of the target
    (any status, archived and pending included), with their versions and, transitively,
    what was derived from them. ``named`` are the target's own, in id order; ``versions``
    and ``derived`` those outside it (:func:`extras`). With ``lock`` all are locked ``FOR
    UPDATE`` (the target's own first)."""
    named = subject_store.target_ids(conn, tenant_of(conn), target.scope, target.subject,
                                     lock=lock)
    res = Resolved(named=named, not_found=[])
    if named:
        res.versions, res.derived = extras(conn, target, lock=lock)
    return res


def extras(conn: Conn, target: Target, *,
           lock: bool = False) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """The memories outside ``target`` an erase of it reaches: (other versions of its
    memories, memories derived from it or from those, with their versions), each sorted.
    The same set as walking from every target memory, found without sending the target's
    ids around: every path out of the target starts with a link the server finds in one
    statement (:func:`mnemovault.store.subjects.neighbours`), and the walk goes on from
    there (a target memory it meets again adds nothing new). With ``lock`` the extras are
    locked ``FOR UPDATE``, repeating the walk until nothing new turns up. An erase by
    subject follows version links only between rows of one subject (never into another
    subject's later version of the same ``key``); a forget by ids takes every version."""
    v0, d0 = subject_store.neighbours(conn, tenant_of(conn), target.scope, target.subject)
    locked: set[uuid.UUID] = set()
    tenant = tenant_of(conn)
    same = target.subject is not None
    while v0 or d0:
        versions = (memory_store.versions_closure(conn, tenant, v0, same_subject=same)
                    if v0 else set())
        everything = memory_store.versions_and_derived_closure(conn, tenant, versions | d0,
                                                               same_subject=same)
        own = subject_store.in_target(conn, tenant, sorted(everything), target.scope,
                                      target.subject)
        versions -= own
        everything -= own
        if not lock or everything <= locked:
            return sorted(versions), sorted(everything - versions)
        memory_store.lock(conn, tenant, sorted(everything - locked))
        locked |= everything
    return [], []


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


def preview(conn: Conn, ids: Sequence[uuid.UUID], *,
            scope: str | None = None,
            subject: str | None = None) -> tuple[list[dict[str, Any]], list[uuid.UUID]]:
    """What a forget of ``ids`` would delete, deleting nothing: rows of ``id``, ``scope``,
    ``type``, ``archived``, ``status``, ``created_at``, ``reason`` (named, version,
    derived) and ``content`` (as stored, at most 1000 characters: the caller renders and
    cuts it to an excerpt), ordered by id; and the ids not found (or not visible)."""
    res = resolve(conn, ids, scope=scope, subject=subject)
    if not res.named:
        return [], res.not_found
    rows = memory_store.preview_rows(conn, tenant_of(conn), res.all)
    reasons = res.reasons()
    return [{**r, "reason": reasons[r["id"]]} for r in rows], res.not_found


def forget(
    conn: Conn,
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
    operation: str = "FORGET",
) -> ForgetOutcome:
    """Forget ``ids`` with everything that goes with them (module docstring), in ``conn``'s
    transaction. ``scope`` (and ``subject``), when given, limit the named ids (ids elsewhere
    count as not found). ``pii`` enables vault shredding (None when pseudonymisation is
    off). ``query_hash`` and ``query_placeholders`` describe the forget query, if any, for
    the audit row; ``shred_values`` names placeholders to shred even if other records still
    use them (the values the forget query named, when the caller may erase them).
    ``operation`` names the audit row (``REAPPLY`` for a ledger's reapplication).

    Nothing is written (not even an audit row) when no id exists.

    Raises:
        psycopg.errors.ForeignKeyViolation: a concurrent write derived from what is
            being forgotten (retrying is safe).
    """
    run = _Run(tenant=tenant, ids=list(ids), scope=scope, lock=True, subject=subject,
               pii=pii, shred_values=list(shred_values), operation=operation, actor=actor,
               agent=agent, trigger=trigger, request_id=request_id, query_hash=query_hash,
               query_placeholders=list(query_placeholders))
    _step_resolve(conn, run)
    assert run.resolved is not None
    if not run.resolved.named:
        return ForgetOutcome(deleted=[], not_found=run.resolved.not_found)
    return _rest(conn, run)


def erase(conn: Conn, *, tenant: str, target: Target, actor: str, agent: str | None = None,
          trigger: str = "api", request_id: str | None = None,
          pii: PiiVault | None = None,
          content_keys: Sequence[uuid.UUID] = ()) -> ForgetOutcome:
    """Erase ``target`` (every memory of a subject in a scope, or of a whole scope) with
    everything that goes with it: the steps of :func:`forget` from a different first step.
    Always writes its ``ERASE`` audit row (an erase that finds nothing, e.g. a retry, is
    recorded too, with zero counts). The caller holds the target's advisory lock
    (:func:`mnemovault.store.subjects.lock_for_erase`). ``content_keys``: the target's
    content keys (:mod:`mnemovault.pii.keystore`), which the caller destroys before it
    commits; the ledger lists them (kind ``content_keys``), so a restored database's rows
    under them are removed again.

    Raises:
        psycopg.errors.ForeignKeyViolation: a concurrent write derived from what is
            being erased (retrying is safe).
    """
    run = _Run(tenant=tenant, ids=[], scope=target.scope, lock=True, subject=target.subject,
               target=target, pii=pii, operation="ERASE", actor=actor, agent=agent,
               trigger=trigger, request_id=request_id,
               content_keys=sorted(set(content_keys)))
    _step_resolve(conn, run)
    return _rest(conn, run)


def reapply(conn: Conn, *, tenant: str, ids: Sequence[uuid.UUID],
            contributed: dict[str, list[uuid.UUID]], shred_values: Sequence[str],
            actor: str, agent: str | None = None, trigger: str = "reapply",
            request_id: str | None = None, pii: PiiVault | None = None,
            marker: bool = False, details: dict[str, Any] | None = None) -> ForgetOutcome:
    """Remove again what erasure-ledger entries list and exists again, through the steps
    of :func:`forget` (audited as ``REAPPLY``): the memories ``ids`` that exist (with their
    versions and what was derived from them), the contributors' ids ``contributed`` that
    exist (by kind, through :data:`REMOVERS`) and the live placeholders ``shred_values``. With
    nothing to remove nothing is written, unless ``marker``: then the ``REAPPLY`` audit row
    and a ``reapply`` ledger row are written anyway (the record that this database was
    compared with the ledger and brought level, :mod:`mnemovault.subjects.ledger`).
    ``details`` are added to the audit row's (counts and ids only).

    Raises:
        psycopg.errors.ForeignKeyViolation: as :func:`forget`.
    """
    unknown = sorted(set(contributed) - set(REMOVERS))
    if unknown:
        raise ValueError(f"reapply: no remover for {unknown} (forget.REMOVERS)")
    # rows sealed under a destroyed content key (a restored backup): removed with the rest
    destroyed = sorted(contributed.get(CONTENT_KEYS, []))
    ids = sorted({*ids, *memory_store.under_keys(conn, tenant, destroyed)})
    runs = procedure_store.runs_under_keys(conn, tenant, destroyed) if destroyed else []
    if runs:  # a subject's runs on another's procedure, sealed under the subject's key
        contributed = {**contributed, "procedure_runs": sorted(
            {*contributed.get("procedure_runs", []), *runs})}
    back = {k: REMOVERS[k].existing(conn, sorted(v)) for k, v in sorted(contributed.items())
            if v}
    run = _Run(tenant=tenant, ids=list(ids), scope=None, lock=True, pii=pii,
               shred_values=list(shred_values), operation="REAPPLY", actor=actor,
               agent=agent, trigger=trigger, request_id=request_id,
               reapply={k: v for k, v in back.items() if v}, marker=marker,
               details=dict(details or {}))
    _step_resolve(conn, run)
    assert run.resolved is not None
    if not (run.resolved.named or run.reapply or run.shred_values or marker):
        return ForgetOutcome(deleted=[], not_found=run.resolved.not_found)
    return _rest(conn, run)


def _rest(conn: Conn, run: _Run) -> ForgetOutcome:
    """Steps 2.. of :data:`STEPS`, looked up by name at call time (so a test's
    replacement runs)."""
    for name in STEPS[1:]:
        globals()[f"_step_{name}"](conn, run)
    r = run.resolved
    assert r is not None
    return ForgetOutcome(deleted=r.all, not_found=r.not_found, derived=r.derived,
                         versions=r.versions, shredded=run.shredded,
                         graph_nodes_removed=len(run.removed_nodes),
                         graph_edges_removed=run.removed_edges, contributed=run.contributed,
                         audit_seq=run.audit_seq, ids_root=run.ids_root,
                         removed=run.removed)


# -- steps ------------------------------------------------------------------------------------
def _step_resolve(conn: Conn, run: _Run) -> None:
    if run.target is not None:
        run.resolved = resolve_target(conn, run.target, lock=run.lock)
    else:
        run.resolved = resolve(conn, run.ids, scope=run.scope, subject=run.subject,
                               lock=run.lock)


def _step_collect(conn: Conn, run: _Run) -> None:
    assert run.resolved is not None
    run.nodes, run.edges = graph.supported_by(conn, run.resolved.all)


def _step_lineage(conn: Conn, run: _Run) -> None:
    assert run.resolved is not None
    lineage.delete(conn, run.resolved.all)


def _step_graph_support(conn: Conn, run: _Run) -> None:
    assert run.resolved is not None
    graph.delete_support(conn, run.resolved.all)


def _step_contribute(conn: Conn, run: _Run) -> None:
    assert run.resolved is not None
    reach = Reach(tenant=run.tenant, memory_ids=run.resolved.all, target=run.target)
    for name in sorted(CONTRIBUTORS):
        for kind, n in CONTRIBUTORS[name](conn, reach).items():
            run.contributed[kind] = run.contributed.get(kind, 0) + int(n)
    for kind, listed in sorted(run.reapply.items()):
        for k, n in REMOVERS[kind].remove(conn, listed, reach).items():
            run.contributed[k] = run.contributed.get(k, 0) + int(n)
    run.nodes = sorted({*run.nodes, *reach.nodes})
    run.edges = sorted({*run.edges, *reach.edges})
    if run.content_keys:
        reach.removed.setdefault(CONTENT_KEYS, []).extend(run.content_keys)
    run.removed = {k: sorted(set(v)) for k, v in sorted(reach.removed.items()) if v}


def _step_memories(conn: Conn, run: _Run) -> None:
    assert run.resolved is not None
    memory_store.delete(conn, run.tenant, run.resolved.all)


def _step_graph_orphans(conn: Conn, run: _Run) -> None:
    run.removed_nodes, run.removed_edges = graph.delete_orphans(conn, run.nodes, run.edges)


def _step_vault(conn: Conn, run: _Run) -> None:
    if run.pii is None:
        return
    unused = [n for n in run.removed_nodes if PLACEHOLDER_RE.fullmatch(n)]
    run.shredded = run.pii.shred(conn, sorted({*unused, *run.shred_values}))


def _step_audit(conn: Conn, run: _Run) -> None:
    assert run.resolved is not None
    r = run.resolved
    deleted = r.all
    run.ids_root = ids_root(deleted)
    details: dict[str, Any] = {
        "count": len(deleted), "requested": len(run.ids), "not_found": len(r.not_found),
        "derived": len(r.derived), "versions": len(r.versions),
        "graph_nodes_removed": len(run.removed_nodes),
        "graph_edges_removed": run.removed_edges, "shredded": run.shredded,
        "ids_root": run.ids_root,
    }
    if run.contributed:
        details["contributed"] = dict(sorted(run.contributed.items()))
    if run.target is not None:
        details["scope_fp"] = run.target.scope_fp
        details["subject_fp"] = run.target.subject_fp
        details["whole_scope"] = run.target.subject is None
    details.update(run.details)
    if run.query_hash is not None:
        details["query_hash"] = run.query_hash
        details["query_placeholders"] = sorted(set(run.query_placeholders))
    run.audit_seq = audit.append(
        conn, tenant=run.tenant, operation=run.operation, actor=run.actor, agent=run.agent,
        memory_ids=[str(i) for i in deleted[:10]], trigger=run.trigger,
        request_id=run.request_id, details=details)


def _step_ledger(conn: Conn, run: _Run) -> None:
    assert run.resolved is not None and run.audit_seq is not None
    deleted = run.resolved.all
    if not deleted and not run.shredded and not run.removed and not run.marker:
        return
    kind = {"ERASE": "erase", "REAPPLY": "reapply"}.get(run.operation, "forget")
    target = run.target
    ledger_store.insert(conn, tenant=run.tenant, audit_seq=run.audit_seq, kind=kind,
                        request_id=run.request_id,
                        subject_fp=target.subject_fp if target else None,
                        scope_fp=target.scope_fp if target else None,
                        memory_ids=deleted, placeholders=run.shredded,
                        contributed=dict(run.removed))
