"""Read-side pseudonymisation: the text a value would have been stored as (placeholders;
lookups only, nothing is written). :class:`Translator` keeps one transaction's known-entity
index; :func:`pseudonymiser` opens the vault's pseudonymiser over a transaction (the write
path's step 4 uses it read-write).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import psycopg

from mnemovault.pii.detect import KnownEntityIndex
from mnemovault.pii.detect.base import _norm_gap, _norm_token, _spans, fold
from mnemovault.pii.pseudonymise import Pseudonymiser
from mnemovault.runtime import Runtime
from mnemovault.store import subjects as subject_store

Conn = psycopg.Connection[Any]


def pseudonymiser(rt: Runtime, conn: Conn, tenant: str, read_only: bool = False, *,
                  known: KnownEntityIndex | None = None) -> Pseudonymiser:
    """A pseudonymiser over the tenant's vault in ``conn``'s transaction; ``known``: the
    known-entity index to use instead of the tenant's whole one."""
    return Pseudonymiser(rt.pii, rt.detectors, conn, tenant, read_only=read_only,
                         known=known)


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
