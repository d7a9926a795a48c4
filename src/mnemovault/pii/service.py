"""The PII capability (SPEC section 3): what callers do with personal values.

- read-side pseudonymisation (:func:`translate`, :func:`redact`): text as it would have
  been stored, lookups only;
- output rendering (:func:`render`, :func:`placeholder_outputs`): shredded placeholders
  become ``[erased]`` for everyone; with ``reveal`` (``pii:reveal``) the others become
  their values, audited as ``REVEAL``;
- the vault's entries (:func:`entries`, :func:`entry`, :func:`export`), crypto-shredding
  (:func:`shred`); KEK rotation is :mod:`mnemovault.pii.rotation`.

The write path's pseudonymisation step is :func:`mnemovault.memories.write.pseudonymise`;
detection is :mod:`mnemovault.pii.detect`; the encryption recipes :mod:`mnemovault.pii.
vault`; the SQL :mod:`mnemovault.store.pii`.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from mnemovault import validation as checked
from mnemovault.audit import log as audit
from mnemovault.auth import Principal
from mnemovault.errors import Forbidden, NotFound, ValidationError
from mnemovault.models import Memory
from mnemovault.pii.detect import KnownEntityIndex
from mnemovault.pii.detect.base import _norm_gap, _norm_token, _spans, fold
from mnemovault.pii.pseudonymise import Pseudonymiser
from mnemovault.pii.vault import ERASED, PLACEHOLDER_RE
from mnemovault.pii.vault import render as render_text
from mnemovault.runtime import Runtime
from mnemovault.store import ledger as ledger_store
from mnemovault.store import pii as store
from mnemovault.store import subjects as subject_store

MAX_PLACEHOLDER_CHARS = 64

Conn = psycopg.Connection[Any]


def pseudonymiser(rt: Runtime, conn: Conn, tenant: str, read_only: bool = False) -> Pseudonymiser:
    """A pseudonymiser over the tenant's vault in ``conn``'s transaction."""
    return Pseudonymiser(rt.pii, rt.detectors, conn, tenant, read_only=read_only)


class Translator:
    """Read-side pseudonymisation in one transaction: each call gives the text a value would
    have been stored as (placeholders; lookups only, nothing is written). The tenant's
    known-entity index is built once, on the first value that needs it, however many values
    one operation translates (query, scope, subject, chat history...).

    With ``names`` (short values: a subject, a scope, a key's limits) the index is never
    loaded: each value gets an index of just the known values among the fingerprints of
    its word n-grams (every n-gram the index's ``detect`` could look up, found through the
    vault's fingerprint index), which finds in the value what the whole index would. A
    value of more than :data:`NAME_TOKENS` word tokens goes through the whole index."""

    def __init__(self, rt: Runtime, conn: Conn, tenant: str, *, names: bool = False) -> None:
        self._rt, self._conn, self._tenant = rt, conn, tenant
        self._ps: Pseudonymiser | None = None
        self._names = names

    @property
    def pseudonymiser(self) -> Pseudonymiser:
        if self._ps is None:
            self._ps = pseudonymiser(self._rt, self._conn, self._tenant, read_only=True)
        return self._ps

    def __call__(self, value: str | None) -> str | None:
        if value is None or not self._rt.settings.pii_pseudonymize:
            return value
        if self._names and self._ps is None:
            ps = self._name_pseudonymiser(value)
            if ps is not None:
                return ps.rewrite(value, create=False).text
        return self.pseudonymiser.rewrite(value, create=False).text

    def _name_pseudonymiser(self, value: str) -> Pseudonymiser | None:
        """A read-only pseudonymiser for ``value`` alone (class docstring), or None past
        :data:`NAME_TOKENS` tokens."""
        keys = self._rt.pii.existing_tenant_keys(self._conn, self._tenant)
        if keys is None:  # an empty vault knows nothing: no index to load
            return pseudonymiser(self._rt, self._conn, self._tenant, read_only=True)
        fps = ngram_fingerprints(value, keys.fingerprint_key)
        if fps is None:
            return None
        known = KnownEntityIndex(keys.fingerprint_key)
        for r in subject_store.known_fingerprints(self._conn, self._tenant, fps):
            known.add_fingerprint(r["kind"], bytes(r["fingerprint"]), r["ntokens"] or 1,
                                  bytes(r["head"]) if r["head"] is not None else None)
        return Pseudonymiser(self._rt.pii, self._rt.detectors, self._conn, self._tenant,
                             read_only=True, known=known)


NAME_TOKENS = 64
"""Word tokens up to which a :class:`Translator` with ``names`` looks values up by n-gram."""


def ngram_fingerprints(value: str, secret: bytes) -> set[bytes] | None:
    """Every fingerprint :meth:`mnemovault.pii.detect.KnownEntityIndex.detect` could look up
    in ``value`` (as :func:`mnemovault.pii.detect.detect_all` shows it to the detectors:
    folded), i.e. of each word n-gram in its normal form under ``secret``; None past
    :data:`NAME_TOKENS` tokens."""
    view, _ = fold(value)
    spans = _spans(view)
    if len(spans) > NAME_TOKENS:
        return None
    toks = [_norm_token(view[s:e]) for s, e in spans]
    gaps = [_norm_gap(view[spans[j][1]:spans[j + 1][0]]) for j in range(len(spans) - 1)]
    out: set[bytes] = set()
    for i in range(len(spans)):
        norm = toks[i]
        out.add(hmac.digest(secret, norm.encode("utf-8"), hashlib.sha256))
        for j in range(i + 1, len(spans)):
            norm = norm + gaps[j - 1] + toks[j]
            out.add(hmac.digest(secret, norm.encode("utf-8"), hashlib.sha256))
    return out


def translate(rt: Runtime, conn: Conn, tenant: str, value: str | None) -> str | None:
    """One value through a :class:`Translator` (use one Translator for several)."""
    return Translator(rt, conn, tenant)(value)


def redact(rt: Runtime, who: Principal, texts: Sequence[str]) -> list[str]:
    """``texts`` as a model may see them: personal values the detectors or the vault know
    replaced by placeholders (an unknown value by the placeholder it would get). Lookups
    only: nothing is written."""
    if not rt.settings.pii_pseudonymize or not texts:
        return list(texts)
    with rt.db.transaction(who.tenant) as conn:
        tr = Translator(rt, conn, who.tenant)
        return [tr(t) or t for t in texts]


def stored_limits(rt: Runtime, conn: Conn, who: Principal,
                  tr: Translator | None = None) -> tuple[str | None, str | None]:
    """The principal's scope and subject limits as stored (pseudonymised), or None."""
    tr = tr or Translator(rt, conn, who.tenant)
    return tr(who.scope), tr(who.subject)


def within_limits(rt: Runtime, conn: Conn, who: Principal, row: dict[str, Any]) -> bool:
    """Whether a stored memory row (``scope``, ``subject_id``) lies within the key's
    limits (always, for an unlimited key)."""
    if not who.limited:
        return True
    scope, subject = stored_limits(rt, conn, who)
    return ((scope is None or row["scope"] == scope)
            and (subject is None or row["subject_id"] == subject))


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


def render(rt: Runtime, conn: Conn, who: Principal, memories: list[Memory], *,
           reveal: bool, request_id: str | None = None) -> list[Memory]:
    """Output rendering (SPEC section 3): shredded placeholders become ``[erased]`` for
    every caller; with ``reveal`` (needs ``pii:reveal``) the others become their original
    values, and a ``REVEAL`` audit row names the placeholders and memories."""
    fields = ("content", "subject", "key", "scope")
    found = {m.group(0) for mem in memories for fld in fields
             for m in PLACEHOLDER_RE.finditer(getattr(mem, fld) or "")}
    if not found:
        return memories
    if reveal:
        who.require("pii:reveal")
        values = rt.pii.reveal_values(conn, who.tenant, found)
        erased: set[str] = set()
        audit.append(conn, tenant=who.tenant, operation="REVEAL", actor=who.actor,
                     agent=who.agent, memory_ids=[str(m.id) for m in memories],
                     request_id=request_id,
                     details={"placeholders": sorted(values), "count": len(values)})
    else:
        values, erased = {}, rt.pii.erased_placeholders(conn, found)
        if not erased:
            return memories
    return [m.model_copy(update={fld: render_text(getattr(m, fld), values, erased)
                                 for fld in fields if getattr(m, fld)})
            for m in memories]


def placeholder_outputs(rt: Runtime, who: Principal, placeholders: Iterable[str], *,
                        reveal: bool = False, request_id: str | None = None) -> dict[str, str]:
    """How each placeholder is shown to this caller: ``[erased]`` when shredded (for
    everyone), its original value with ``reveal`` (``pii:reveal``; a ``REVEAL`` audit row
    names the placeholders), else absent (it stays as it is)."""
    wanted = sorted(set(placeholders))
    if reveal:
        who.require("pii:reveal")
    if not wanted:
        return {}
    with rt.db.transaction(who.tenant) as conn:
        if reveal:
            values = rt.pii.reveal_values(conn, who.tenant, wanted)
            if values:
                audit.append(conn, tenant=who.tenant, operation="REVEAL", actor=who.actor,
                             agent=who.agent, request_id=request_id, trigger="chat",
                             details={"placeholders": sorted(values), "count": len(values)})
            return values
        return {p: ERASED for p in rt.pii.erased_placeholders(conn, wanted)}


# -- the vault's entries -------------------------------------------------------------------
def _entry_within(rt: Runtime, conn: Conn, who: Principal, placeholder: str) -> bool:
    if not who.limited:
        return True
    scope, subject = stored_limits(rt, conn, who)
    return bool(store.used_within(conn, who.tenant, [placeholder], scope=scope,
                                  subject=subject))


def entries(rt: Runtime, who: Principal, *, limit: int = 50,
            cursor: str | None = None) -> list[dict[str, Any]]:
    """Vault entries, metadata only (placeholder, kind, created, shredded), ordered by
    placeholder; ``cursor`` = the last placeholder seen. Needs ``memory:read``. A key
    limited to a scope or subject sees the entries its memories use."""
    who.require("memory:read")
    if not isinstance(limit, int) or not 1 <= limit <= 100:
        raise ValidationError("limit: must be an integer in 1..100", field="limit")
    after = checked.optional_name(cursor, "cursor", max_len=MAX_PLACEHOLDER_CHARS) or ""
    with rt.db.transaction(who.tenant) as conn:
        scope, subject = stored_limits(rt, conn, who)
        return store.entries(conn, who.tenant, after=after, limit=limit, limited=who.limited,
                             scope=scope, subject=subject)


def entry(rt: Runtime, who: Principal, placeholder: str, *, reveal: bool = False,
          request_id: str | None = None) -> dict[str, Any]:
    """One entry; with ``reveal`` (``pii:reveal``) its value too, audited.

    Raises:
        NotFound: no such placeholder in this tenant.
    """
    who.require("memory:read")
    placeholder = checked.name(placeholder, "placeholder", max_len=MAX_PLACEHOLDER_CHARS)
    if reveal:
        who.require("pii:reveal")
    with rt.db.transaction(who.tenant) as conn:
        row = store.entry(conn, who.tenant, placeholder)
        if row is None or not _entry_within(rt, conn, who, placeholder):
            raise NotFound("placeholder: no such vault entry", field="placeholder")
        if reveal:
            row["value"] = rt.pii.reveal_values(conn, who.tenant, [placeholder])[placeholder]
            audit.append(conn, tenant=who.tenant, operation="REVEAL", actor=who.actor,
                         agent=who.agent, request_id=request_id, trigger="vault",
                         details={"placeholders": [placeholder], "count": 1})
        return dict(row)


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
            scope, subject = stored_limits(rt, conn, who)
            inside = store.used_within(conn, who.tenant, wanted, scope=scope, subject=subject)
            if inside != set(wanted):
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
