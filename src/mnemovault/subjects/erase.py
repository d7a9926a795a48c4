"""Erase a subject within a scope, or a whole scope (SPEC section 10; issue 10, item 1).

One transaction, through the one forget path (:func:`mnemovault.governance.forget.erase`):
every memory of the subject in the scope (any status: active, pending review, superseded,
archived), every version of them, everything derived from them (transitively), their
lineage, graph support and the graph nodes and edges nothing else supports, the vault
values no remaining record uses (crypto-shredded: they render ``[erased]`` everywhere),
rows of registered contributors (issue 12: procedure runs and feedback), one ``ERASE``
audit row (counts, first ten ids, a Merkle root over all ids, keyed fingerprints of the
subject and the scope; never content) and one erasure-ledger row. Then a receipt signed
with the audit log's Ed25519 key (:mod:`mnemovault.subjects.receipt`).

Content keys (issue 21): the subject's content key in the scope (every content key of the
scope, for a whole-scope erase) is destroyed in the key store as the last step before the
commit, and listed in the ledger entry (kind ``content_keys``). Every copy of the subject's
rows anywhere (WAL, replicas, backups, exports) is unreadable from then on. A crash
between the destroy and the commit leaves rows under a destroyed key: they read as
``[erased]`` on every path, and the next start deletes them (audited,
:func:`mnemovault.subjects.keys.sweep`).

Race: the erase takes the exclusive advisory lock of (tenant, scope, subject) (of the scope
for a whole-scope erase) first; a write of that subject takes it shared
(:func:`mnemovault.store.subjects.lock_for_write`). A write that comes second fails at once
with :class:`~mnemovault.errors.Conflict`; an erase that comes second waits for the writes
under way, up to ``MNEMOVAULT_ERASE_LOCK_TIMEOUT_SECONDS`` (default 5; new writes of the
subject fail meanwhile), and fails with Conflict only after that; nothing it did is kept.
Retrying the erase is idempotent: what is gone stays gone, and a retry that finds nothing
still returns a receipt (zero counts) for its own audit row.

A key limited to a subject (or scope) never reads or changes rows outside its limits. When
the erase of its subject would also remove memories outside them (another subject's fact
derived from one of the subject's memories, or a version of another subject's in a
version chain), the erase is refused with :class:`~mnemovault.errors.Forbidden`
(``permission`` ``subject``) and nothing is erased: such an erase needs a key that is not
limited (which sees, lists and erases all of it). So what a limited key lists
(:mod:`mnemovault.subjects.access`) is always exactly what its erase removes. The check
resolves the erase set locked ``FOR UPDATE`` before the erase proper, so no derivation can
slip in between (a writer's foreign-key check waits on the locked source rows).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg

from mnemovault import validation as checked
from mnemovault import visibility
from mnemovault.audit import log as audit_log
from mnemovault.audit.chain import format_ts, keyed_fingerprint
from mnemovault.auth import Principal
from mnemovault.errors import ConfigError, Conflict, Forbidden
from mnemovault.governance import forget as forget_mod
from mnemovault.governance import scrub as scrub_mod
from mnemovault.pii import service as pii
from mnemovault.pii.vault import TenantKeys
from mnemovault.runtime import Runtime
from mnemovault.store import subjects as subject_store
from mnemovault.store.db import caused_by
from mnemovault.subjects import receipt as receipts
from mnemovault.subjects.models import Erasure


def fingerprint(keys: TenantKeys, value: str, purpose: str) -> str:
    """The keyed fingerprint naming a stored subject (``purpose`` ``subject``) or scope
    (``scope``) in the audit log, the ledger and receipts: ``hmac-sha256:<32 hex>`` of the
    value as stored (its placeholder when it is a personal value) under the tenant's
    fingerprint key (:func:`mnemovault.audit.chain.keyed_fingerprint`)."""
    return keyed_fingerprint(keys.fingerprint_key, value, purpose=f"mnemovault/{purpose}")


def target_of(scope: str, subject: str | None, tr: pii.Translator,
              keys: TenantKeys) -> forget_mod.Target:
    """The erase target as stored, with its fingerprints."""
    s_scope = tr(scope) or scope
    s_subject = tr(subject)
    return forget_mod.Target(
        scope=s_scope, subject=s_subject, scope_fp=fingerprint(keys, s_scope, "scope"),
        subject_fp=fingerprint(keys, s_subject, "subject") if s_subject is not None else None)


def check_target(who: Principal, scope: str, subject: str | None) -> tuple[str, str | None]:
    """Validate and authorise a subject (or scope) target: (scope, subject).

    Raises:
        ValidationError: a blank or malformed scope or subject.
        Forbidden: outside the key's scope or subject; a subject-limited key erasing a
            whole scope.
    """
    scope = checked.name(scope, "scope")
    subject = checked.optional_name(subject, "subject")
    who.check_scope(scope)
    if subject is None and who.subject is not None:
        raise Forbidden("subject: this key is limited to one subject; a whole-scope erase "
                        "needs a key that is not", permission="subject", field="subject")
    who.check_subject(subject)
    return scope, subject


def erase(rt: Runtime, who: Principal, *, scope: str, subject: str | None = None,
          trigger: str = "api", request_id: str | None = None,
          scrub: bool = False) -> Erasure:
    """Erase every memory of ``subject`` in ``scope`` (``subject`` None: every memory of
    the scope) with everything that goes with it (module docstring). Needs
    ``subject:erase``.

    Returns:
        :class:`~mnemovault.subjects.models.Erasure`: the signed receipt, the ids removed
        and the placeholders shredded; with ``scrub``, the report of
        :func:`mnemovault.governance.scrub.scrub` run after the erase committed, on every
        table but the audit log's (not only those the erase deleted from: derived data such
        as the lexical statistics holds words too, and a table added later is covered); it
        takes an ACCESS EXCLUSIVE lock table by table (see there).
    Raises:
        ValidationError: blank scope or subject (names the field).
        Forbidden: missing ``subject:erase``, or outside the key's limits, or (a limited
            key) the erase would remove memories outside the key's limits.
        Conflict: writes for this subject (or scope) kept it busy for
            ``erase_lock_timeout_seconds``, or a concurrent write derived from what was
            being erased; nothing was erased and retrying is safe.
        ConfigError: no audit signing key is configured (nothing was erased).
    """
    who.require("subject:erase")
    if scrub:  # checked before anything is erased, not after
        who.require_unlimited("scrub")
    scope, subject = check_target(who, scope, subject)
    key = audit_log.config.signing_key()
    if key is None:
        raise ConfigError("audit_signing_key: erasure receipts are signed with the audit "
                          "log's key; none is configured", field="audit_signing_key")
    request_id = request_id or str(uuid.uuid4())
    try:
        with rt.db.transaction(who.tenant) as conn:
            tr = pii.Translator(rt, conn, who.tenant, names=True)
            target = target_of(scope, subject, tr, rt.pii.tenant_keys(conn, who.tenant))
            subject_store.lock_for_erase(conn, who.tenant, target.scope, target.subject,
                                         timeout=rt.settings.erase_lock_timeout_seconds)
            if who.limited:
                _check_reach(rt, conn, who, target)
            keys = rt.sealer.store.owned(who.tenant, target.scope_fp or "",
                                         target.subject_fp)
            out = forget_mod.erase(conn, tenant=who.tenant, target=target, actor=who.actor,
                                   agent=who.agent, trigger=trigger, request_id=request_id,
                                   pii=rt.pii if rt.settings.pii_pseudonymize else None,
                                   content_keys=[uuid.UUID(k) for k in keys])
            # last before the commit: a crash from here on leaves rows under destroyed
            # keys, which read as erased and which the next start deletes
            # (mnemovault.subjects.keys.sweep); a crash before it leaves everything
            destroy_keys(rt, who.tenant, keys)
    except Conflict as exc:
        if caused_by(exc, psycopg.errors.ForeignKeyViolation):
            raise Conflict("subject: a concurrent write refers to a memory being erased; "
                           "nothing was erased and retrying is safe", field="subject") from None
        raise
    assert out.audit_seq is not None
    # the erased memories' lexemes leave the BM25 statistics' deltas now, not at the next
    # fold (migration 0016)
    if out.deleted:
        rt.db.fold_lexical(who.tenant, [target.scope], wait=True)
    counts = {"memories": len(out.deleted), "named": len(out.deleted) - len(out.versions)
              - len(out.derived), "versions": len(out.versions), "derived": len(out.derived),
              "vault_values": len(out.shredded), "graph_nodes": out.graph_nodes_removed,
              "graph_edges": out.graph_edges_removed, **out.contributed}
    body = {"request_id": request_id, "tenant": who.tenant, "scope": target.scope,
            "scope_fingerprint": target.scope_fp, "subject_fingerprint": target.subject_fp,
            "counts": counts, "removed_root": out.ids_root,
            "erased_at": format_ts(datetime.now(UTC)), "audit_seq": out.audit_seq}
    signed = receipts.sign(body, key, audit_log.config.origin)
    done = Erasure(receipt=signed, deleted=out.deleted, shredded=out.shredded)
    if scrub:
        report = scrub_mod.scrub(rt, who, tenants=[who.tenant], request_id=request_id)
        done.scrub = report.as_dict()
    return done


def destroy_keys(rt: Runtime, tenant: str, key_ids: list[str]) -> None:
    """Destroy content keys in the key store and drop them from this process's cache (the
    erase's last step before its commit)."""
    if key_ids:
        rt.sealer.store.destroy(tenant, key_ids)
        rt.sealer.cache.evict(tenant, key_ids)


def _check_reach(rt: Runtime, conn: psycopg.Connection[Any], who: Principal,
                 target: forget_mod.Target) -> None:
    """For a limited key: refuse an erase that reaches memories outside its limits
    (module docstring). The erase set is locked ``FOR UPDATE`` by the walk.

    Raises:
        Forbidden: names the rule (``permission`` ``subject``), not the memories.
    """
    res = forget_mod.resolve_target(conn, target, lock=True)
    extra = [*res.versions, *res.derived]
    view = visibility.view(rt, conn, who, "subject")
    if extra and not all(view.within(r)
                         for r in subject_store.rows(conn, who.tenant, extra)):
        raise Forbidden("subject: this erase would also remove memories outside this key's "
                        "limits (derived from or versions of the subject's memories); it "
                        "needs a key that is not limited", permission="subject",
                        field="subject")
