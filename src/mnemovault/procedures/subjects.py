"""What subject rights (SPEC section 10: access, export, erase) need from procedural
memory, for :mod:`mnemovault.subjects`. Every function runs in the caller's transaction
and takes the scope and subject *as stored* (pseudonymised: what
:class:`mnemovault.pii.service.Translator` gives for the caller's values).

- A subject's own procedures are ``memories`` rows (type ``procedure``, ``subject_id``):
  the subject listing and the forget path cover them, and their ``procedures`` rows and
  runs go with them by ``ON DELETE CASCADE``. :func:`subject_procedures` lists them with
  their steps and counters (no embedding).
- A subject's runs on *other owners'* procedures are not the subject's memories:
  :func:`subject_runs` lists every run of the subject, :func:`erase_subject_runs` deletes
  those on other owners' procedures and takes them out of those procedures' counters
  exactly (runs, successes, judged runs, judged successes; first and last use recomputed
  from the runs that remain), and releases the graph support those runs gave, shredding
  the vault values nothing uses any more when given the vault. The erase names the runs
  it deleted to the erasure ledger; :func:`reapply_runs` deletes them again by id (and
  adjusts the counters again) when a backup restore brought them back.

Wiring into erase (one transaction): ``erase_subject_runs`` first, then the forget path
over the subject's memories (which takes their own procedures and runs).
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from mnemovault.governance import graph
from mnemovault.pii.vault import PLACEHOLDER_RE, PiiVault
from mnemovault.store import procedures as store
from mnemovault.store.db import tenant_of

Conn = psycopg.Connection[Any]


def subject_runs(conn: Conn, *, scope: str, subject: str, after: uuid.UUID | None = None,
                 limit: int = 100) -> list[dict[str, Any]]:
    """The subject's runs in ``scope`` (on any procedure), oldest id first after
    ``after``, at most ``limit``; JSON-ready dicts (ids and times as strings)."""
    rows = store.subject_runs(conn, tenant_of(conn), scope=scope, subject=subject, after=after,
                              limit=limit)
    return [_jsonable(r) for r in rows]


def subject_procedures(conn: Conn, *, scope: str, subject: str,
                       after: uuid.UUID | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """The subject's procedures in ``scope`` (every status), oldest id first after
    ``after``, at most ``limit``: memory fields, name, intent, steps and counters, no
    embedding; JSON-ready dicts."""
    rows = store.subject_procedures(conn, tenant_of(conn), scope=scope, subject=subject,
                                    after=after, limit=limit)
    return [_jsonable(r) for r in rows]


# how a row is sealed (mnemovault.pii.sealing: the row factory has opened it already)
_SEALING = frozenset({"key_id", "content_sealed", "key_sealed", "erased"})


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        if k in _SEALING:
            continue
        out["subject" if k == "subject_id" else k] = (
            str(v) if isinstance(v, uuid.UUID) else v.isoformat() if hasattr(v, "isoformat")
            else v)
    return out


def erase_subject_runs(conn: Conn, tenant: str, scope: str, subject: str, *,
                       pii: PiiVault | None = None) -> dict[str, int]:
    """Delete the subject's runs on other owners' procedures in ``scope`` and adjust
    those procedures' counters exactly (module docstring). With ``pii``, vault values
    that only those runs used are crypto-shredded. (The erase does not call this: it uses
    :func:`erase_contributor`, which leaves the graph and the vault to the forget path.)

    Returns:
        ``runs_deleted``, ``procedures_adjusted``, ``graph_nodes_removed``, ``shredded``.
    """
    counts, ends, edges = _release_subject_runs(conn, scope, subject)
    removed: list[str] = []
    shredded: list[str] = []
    if ends:
        removed, _ = graph.delete_orphans(conn, sorted(ends), sorted(edges))
        if pii is not None:
            shredded = pii.shred(conn, sorted(n for n in removed if PLACEHOLDER_RE.fullmatch(n)))
    return {**counts, "graph_nodes_removed": len(removed), "shredded": len(shredded)}


def erase_contributor(conn: Conn, reach: Any) -> dict[str, int]:
    """The forget path's contributor (:data:`mnemovault.governance.forget.CONTRIBUTORS`):
    for an erase of a subject, delete the subject's runs on procedures that stay (other
    owners'), adjust their counters, hand the graph nodes and edges those runs alone
    supported to the forget path (``reach.nodes``/``reach.edges``), which removes the
    orphans and shreds their vault values with everything else, and name the runs deleted
    in ``reach.removed["procedure_runs"]`` (the erasure ledger records them, so a
    reapplication after a backup restore deletes them again: :func:`reapply_runs`). The
    subject's own procedures, and every run on them, go with their ``memories`` rows (ON
    DELETE CASCADE), as they do for a forget by ids or an erase of a whole scope."""
    target = reach.target
    if target is None or target.subject is None:
        return {}
    tenant = tenant_of(conn)
    adjusted = store.delete_subject_runs(conn, tenant, scope=target.scope,
                                         subject=target.subject)
    return _hand_over(conn, reach, adjusted)


def existing_runs(conn: Conn, run_ids: list[uuid.UUID]) -> list[uuid.UUID]:
    """Those of ``run_ids`` that exist, sorted."""
    return store.existing_runs(conn, tenant_of(conn), run_ids)


def reapply_runs(conn: Conn, run_ids: list[uuid.UUID], reach: Any) -> dict[str, int]:
    """The forget path's remover of kind ``procedure_runs``
    (:data:`mnemovault.governance.forget.REMOVERS`), for a reapplication of the erasure
    ledger: delete those of ``run_ids`` that exist again (a backup restore brought them
    back), take them out of their procedures' counters again, and release the graph
    support they gave, as :func:`erase_contributor` does."""
    adjusted = store.delete_runs(conn, tenant_of(conn), run_ids)
    return _hand_over(conn, reach, adjusted)


def _hand_over(conn: Conn, reach: Any, adjusted: list[dict[str, Any]]) -> dict[str, int]:
    counts, ends, edges = _release(conn, adjusted)
    reach.nodes.extend(sorted(ends))
    reach.edges.extend(sorted(edges))
    gone = sorted({i for r in adjusted for i in r["run_ids"]})
    if gone:
        reach.removed.setdefault("procedure_runs", []).extend(gone)
    return {"procedure_runs": counts["runs_deleted"],
            "procedures_adjusted": counts["procedures_adjusted"]}


def _release_subject_runs(conn: Conn, scope: str, subject: str
                          ) -> tuple[dict[str, int], set[str], set[tuple[str, str]]]:
    """Delete the runs, adjust the counters, release the graph support only those runs
    gave their procedure: (counts, node ends to check, edges to check)."""
    return _release(conn, store.delete_subject_runs(conn, tenant_of(conn), scope=scope,
                                                    subject=subject))


def _release(conn: Conn, adjusted: list[dict[str, Any]]
             ) -> tuple[dict[str, int], set[str], set[tuple[str, str]]]:
    """After runs were deleted (``adjusted``: one row per procedure), release the graph
    support only those runs gave their procedure: (counts, node ends to check, edges to
    check)."""
    tenant = tenant_of(conn)
    ids = [r["procedure_id"] for r in adjusted]
    released: set[str] = set()
    edges: set[tuple[str, str]] = set()
    if ids:
        texts = store.stored_texts(conn, tenant, ids)
        for pid in ids:
            still = {m.group(0) for m in PLACEHOLDER_RE.finditer(texts.get(pid, ""))}
            gone = [n for n in store.supported_nodes(conn, tenant, pid)
                    if PLACEHOLDER_RE.fullmatch(n) and n not in still]
            if gone:
                _, supported = graph.supported_by(conn, [pid])
                edges.update(e for e in supported if e[0] in gone or e[1] in gone)
                store.release_nodes(conn, tenant, pid, gone)
                released.update(gone)
    ends = released | {n for e in edges for n in e}
    return ({"runs_deleted": sum(int(r["runs"]) for r in adjusted),
             "procedures_adjusted": len(adjusted)}, ends, edges)
