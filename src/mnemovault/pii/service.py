"""The PII capability (SPEC section 3): what callers do with personal values.

- read-side pseudonymisation (:func:`translate`, :func:`redact`; the translator is
  :mod:`mnemovault.pii.translate`): text as it would have been stored, lookups only;
- output rendering is the visibility rule's (:mod:`mnemovault.visibility`: who may see
  and reveal what); :func:`placeholder_outputs` asks it in a transaction of its own;
- the vault's entries (:func:`entries`, :func:`entry`, :func:`export`), crypto-shredding
  (:func:`shred`); KEK rotation is :mod:`mnemovault.pii.rotation`.

The write path's pseudonymisation step is :func:`mnemovault.memories.write.pseudonymise`;
detection is :mod:`mnemovault.pii.detect`; the encryption recipes :mod:`mnemovault.pii.
vault`; the SQL :mod:`mnemovault.store.pii`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from mnemovault import validation as checked
from mnemovault import visibility
from mnemovault.audit import log as audit
from mnemovault.auth import Principal
from mnemovault.errors import Forbidden, NotFound, ValidationError
from mnemovault.pii.sealing import SealWriter, key_hash, tag_hash
from mnemovault.pii.translate import (  # noqa: F401 (the read side, re-exported)
    NAME_TOKENS,
    Translator,
    ngram_fingerprints,
    pseudonymiser,
    translate,
)
from mnemovault.pii.vault import PLACEHOLDER_RE
from mnemovault.runtime import Runtime
from mnemovault.store import ledger as ledger_store
from mnemovault.store import pii as store

MAX_PLACEHOLDER_CHARS = 64


def stored_key(rt: Runtime, conn: Conn, tenant: str, key: str) -> str | None:
    """How a memory's upsert key ``key`` (as stored: placeholders) is kept in
    ``memories.key``: its keyed hash (:func:`mnemovault.pii.sealing.key_hash`), what SQL
    compares; None for a tenant that has stored nothing yet (no secret: no key matches, and
    a read creates nothing)."""
    keys = rt.pii.existing_tenant_keys(conn, tenant)
    return None if keys is None else key_hash(keys.fingerprint_key, key)


def stored_tags(rt: Runtime, conn: Conn, tenant: str, tags: Sequence[str]) -> list[str]:
    """Tags (as stored: placeholders) as a sealed row's clear ``provenance.tags`` holds
    them: their keyed hashes (:func:`mnemovault.pii.sealing.tag_hash`), what a tag filter
    compares. A tenant that has stored nothing yet has no secret: a value no hash equals
    (the filter then matches nothing, and a read creates nothing)."""
    keys = rt.pii.existing_tenant_keys(conn, tenant)
    if keys is None:
        return ["t1:none"] if tags else []
    return [tag_hash(keys.fingerprint_key, t) for t in tags]


def content_writer(rt: Runtime, conn: Conn, tenant: str) -> SealWriter:
    """What seals the stored texts of one write transaction under their owners' content
    keys (:mod:`mnemovault.pii.sealing`): the wrap lock is taken in share mode first, as
    for a vault data key, so a KEK retire sees a content key created here."""
    fp_key = rt.pii.tenant_keys(conn, tenant).fingerprint_key
    store.lock_wrap(conn)
    return rt.sealer.writer(tenant, fp_key)

Conn = psycopg.Connection[Any]


def redact(rt: Runtime, who: Principal, texts: Sequence[str]) -> list[str]:
    """``texts`` as a model may see them: personal values the detectors or the vault know
    replaced by placeholders (an unknown value by the placeholder it would get). Lookups
    only: nothing is written."""
    if not rt.settings.pii_pseudonymize or not texts:
        return list(texts)
    with rt.db.transaction(who.tenant) as conn:
        tr = Translator(rt, conn, who.tenant)
        return [tr(t) or t for t in texts]


def query_placeholders(rt: Runtime, conn: Conn, tenant: str, query: str,
                       tr: Translator | None = None) -> tuple[list[str], list[str]]:
    """The live vault placeholders a query names: (values whose original appears in it,
    placeholders typed in it). Lookups only: nothing is written."""
    if not rt.settings.pii_pseudonymize:
        return [], []
    tr = tr or Translator(rt, conn, tenant)
    detected = tr.pseudonymiser.rewrite(query, create=False).placeholders
    typed = [m.group(0) for m in PLACEHOLDER_RE.finditer(query)]
    wanted = sorted({*detected, *typed})
    if not wanted:
        return [], []
    live = store.live_among(conn, tenant, wanted)
    return (sorted(live & set(detected)), sorted(live & set(typed)))


def placeholder_outputs(rt: Runtime, who: Principal, placeholders: Iterable[str], *,
                        reveal: bool = False, request_id: str | None = None,
                        trigger: str = "chat") -> dict[str, str]:
    """How each placeholder is shown to this caller, in a transaction of its own
    (:meth:`mnemovault.visibility.View.outputs`: ``[erased]`` when shredded, the value
    with ``reveal`` when the caller may reveal it, else absent)."""
    if reveal:
        who.require("pii:reveal")
    wanted = sorted(set(placeholders))
    if not wanted:
        return {}
    with rt.db.transaction(who.tenant) as conn:
        return visibility.view(rt, conn, who).outputs(wanted, reveal=reveal,
                                                       request_id=request_id,
                                                       trigger=trigger)


# -- the vault's entries -------------------------------------------------------------------
def entries(rt: Runtime, who: Principal, *, limit: int = 50,
            cursor: str | None = None) -> list[dict[str, Any]]:
    """Vault entries, metadata only (placeholder, kind, created, shredded), ordered by
    placeholder; ``cursor`` = the last placeholder seen. Needs ``memory:read``. A key
    limited to a scope or subject sees the entries records it may see carry
    (:meth:`mnemovault.visibility.View.entry_page`)."""
    who.require("memory:read")
    if not isinstance(limit, int) or not 1 <= limit <= 100:
        raise ValidationError("limit: must be an integer in 1..100", field="limit")
    after = checked.optional_name(cursor, "cursor", max_len=MAX_PLACEHOLDER_CHARS) or ""
    with rt.db.transaction(who.tenant) as conn:
        return visibility.view(rt, conn, who).entry_page(after=after, limit=limit)


def entry(rt: Runtime, who: Principal, placeholder: str, *, reveal: bool = False,
          request_id: str | None = None) -> dict[str, Any]:
    """One entry; with ``reveal`` (``pii:reveal``) its ``value`` too, audited, when the
    caller may reveal it (:meth:`mnemovault.visibility.View.revealable`: a limited key
    only through a record within its limits that carries the value); otherwise the entry
    comes without a value, as for a caller who did not ask.

    Raises:
        NotFound: no such placeholder in this tenant (or, for a limited key, no record it
            may see carries it: :meth:`mnemovault.visibility.View.entries_shown`).
    """
    who.require("memory:read")
    placeholder = checked.name(placeholder, "placeholder", max_len=MAX_PLACEHOLDER_CHARS)
    if reveal:
        who.require("pii:reveal")
    with rt.db.transaction(who.tenant) as conn:
        row = store.entry(conn, who.tenant, placeholder)
        v = visibility.view(rt, conn, who)
        if row is None or placeholder not in v.entries_shown([placeholder]):
            raise NotFound("placeholder: no such vault entry", field="placeholder")
        out = v.entry_rows([dict(row)])[0]
        if reveal:
            shown = v.outputs([placeholder], reveal=True, request_id=request_id,
                              trigger="vault")
            if placeholder in shown:
                out["value"] = shown[placeholder]
        return out


def shred(rt: Runtime, who: Principal, placeholders: Sequence[str], *,
          request_id: str | None = None, trigger: str = "api") -> list[str]:
    """Crypto-shred vault values: their DEKs and ciphertexts are destroyed in one
    transaction with a ``SHRED`` audit row; every record using them renders ``[erased]``
    from now on, for every caller. Needs ``subject:erase``.

    Returns the placeholders shredded (already-shredded or unknown ones are skipped).
    """
    who.require("subject:erase")
    wanted = [p for p in placeholders if isinstance(p, str) and PLACEHOLDER_RE.fullmatch(p)]
    if len(wanted) != len(placeholders) or not wanted:
        raise ValidationError("placeholders: each must look like {kind:p_<10 hex>}",
                              field="placeholders")
    with rt.db.transaction(who.tenant) as conn:
        if who.limited:
            v = visibility.view(rt, conn, who)
            scope, subject = v.scope, v.subject
            if v.entries_shown(wanted) != set(wanted):  # as entry(): quoting is not enough
                raise NotFound("placeholders: no such vault entry within this key's limits",
                               field="placeholders")
            if store.used_outside(conn, who.tenant, wanted, scope=scope, subject=subject):
                raise Forbidden("placeholders: a value is also used outside this key's "
                                "limits; shredding it needs an unlimited key",
                                permission="unlimited", field="placeholders")
        done = rt.pii.shred(conn, wanted)
        if done:
            seq = audit.append(conn, tenant=who.tenant, operation="SHRED", actor=who.actor,
                               agent=who.agent, request_id=request_id, trigger=trigger,
                               details={"placeholders": done, "count": len(done)})
            ledger_store.insert(conn, tenant=who.tenant, audit_seq=seq, kind="shred",
                                request_id=request_id, subject_fp=None, scope_fp=None,
                                memory_ids=[], placeholders=done)  # the erasure ledger
    return done


def export(rt: Runtime, who: Principal, *,
           request_id: str | None = None) -> list[dict[str, Any]]:
    """Every live entry with its value (owner only: ``pii:reveal`` and ``admin:export``),
    audited as ``VAULT_EXPORT``."""
    who.require("admin:export")
    who.require("pii:reveal")
    with rt.db.transaction(who.tenant) as conn:
        rows = store.live_entries(conn, who.tenant)
        values = rt.pii.reveal_values(conn, who.tenant, [r["placeholder"] for r in rows])
        audit.append(conn, tenant=who.tenant, operation="VAULT_EXPORT", actor=who.actor,
                     agent=who.agent, request_id=request_id, details={"count": len(rows)})
    return [{**r, "value": values[r["placeholder"]]} for r in rows]
