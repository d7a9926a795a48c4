"""The PII vault: placeholders for personal values, encrypted originals, reveal, shred.

Placeholders are ``{kind:p_<10 hex>}`` where the hex is the first 5 bytes of
``HMAC-SHA256(k_ph, counter || kind || identity)`` and ``k_ph`` is derived from
the tenant's secret (HKDF-SHA256, RFC 5869): the same value gives the same placeholder
within a tenant, another tenant gets another one, and the value cannot be computed back
from it. Values are recognised again by a keyed fingerprint ``HMAC-SHA256(k_fp,
identity)`` (unique per tenant). If a candidate placeholder is taken by another
value (a 40-bit collision) or by a shredded value's tombstone, the counter moves on: a
deterministic choice that never merges two values, and gives a value seen again after
its shred a new placeholder while the old one stays ``[erased]``.

A value's *identity* is what stays the same however it is written
(:attr:`mnemovault.pii.detect.Finding.identity`): a card's digits, a phone number in
E.164, an IBAN compact in upper case, an email address case-folded, an IP address
compressed; for names and other known entities (and whenever no detector gives one) the
:func:`normalise` form. So ``4111 1111 1111 1111``, ``4111-1111-1111-1111`` and
``4111111111111111`` are one vault entry with one placeholder, and shredding it erases
every record that held any of the three. What is encrypted is the value as it was first
written (the exact original text of its first occurrence, invisible characters included):
reveal shows that form wherever the placeholder stands, also in a record that wrote the
value another way.

Entries written before identities existed keep the fingerprint of their normalised
written form (the known-entity index still finds that form where it wins the overlap); a
structured value seen again can get a second entry under its identity, so shred both.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from mnemovault.pii.crypto import (
    KekUnavailable,
    KeyRing,
    Sealed,
    dek_aad,
    open_sealed,
    seal,
    secret_aad,
    value_aad,
)
from mnemovault.pii.detect import KnownEntity, KnownEntityIndex, fingerprint, normalise
from mnemovault.store import pii as store
from mnemovault.store.db import tenant_of, transaction_memo

PLACEHOLDER_RE = re.compile(r"\{([a-z][a-z_]{0,31}):p_([0-9a-f]{10})\}")
ERASED = "[erased]"


def embedding_view(text: str) -> str:
    """What the embedder reads of a stored text: each placeholder cut to its kind as a
    plain word (``{person:p_a970874a8a}`` -> ``person``, ``{phone_number:…}`` -> ``phone
    number``). A placeholder is 13-15 word pieces of hex noise to a sentence embedder, ~50%
    more tokens per turn and no meaning; the kind word is one or two and reveals less (not
    even which value it was). Text without placeholders comes back as it is."""
    if "{" not in text:
        return text
    return PLACEHOLDER_RE.sub(lambda m: m.group(1).replace("_", " "), text)


@dataclass(frozen=True)
class TenantKeys:
    """Keys derived from the tenant's secret: one for placeholders, one for fingerprints
    (the known-entity index runs under the fingerprint key)."""

    placeholder_key: bytes
    fingerprint_key: bytes

    def fingerprint(self, value: str, *, identity: str | None = None) -> bytes:
        """The value's fingerprint: of ``identity`` if given, else of ``normalise(value)``."""
        return fingerprint(value, self.fingerprint_key, identity=identity)

    def candidate(self, kind: str, value: str, counter: int, *,
                  identity: str | None = None) -> str:
        """The ``counter``-th candidate placeholder of the value (derived from ``identity``
        if given, else from ``normalise(value)``)."""
        ident = normalise(value) if identity is None else identity
        msg = counter.to_bytes(4, "big") + kind.encode() + b"\x00" + ident.encode()
        digest = hmac.new(self.placeholder_key, msg, hashlib.sha256).hexdigest()
        return f"{{{kind}:p_{digest[:10]}}}"


def _derive(secret: bytes, label: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=b"mnemovault/pii/" + label).derive(secret)


@dataclass
class NewEntry:
    placeholder: str
    kind: str
    created: bool


class PiiVault:
    """Vault operations inside a transaction handed in by the caller (tenant already set).

    A live KEK rotation (:mod:`mnemovault.pii.rotation`) may run in another process at any
    time: a new data key or tenant secret is wrapped under the key file's newest version,
    picked after the transaction took the wrap lock in share mode
    (:func:`mnemovault.store.pii.lock_wrap`), so a rotation's retire waits for it and then
    sees it; an unwrap under a version the key ring lacks re-reads the key file and, if the
    version is gone from it, the row once more (a rotation rewrapped it after this
    statement read it)."""

    def __init__(self, keyring: KeyRing) -> None:
        self.keyring = keyring
        # derived keys by (tenant, KEK version, nonce) of the wrapped secret read: a new or
        # re-wrapped secret is a new entry, so the cache never answers for another secret
        self._derived: dict[tuple[str, int, bytes], TenantKeys] = {}

    # -- tenant secret ------------------------------------------------------------------
    def tenant_keys(self, conn: psycopg.Connection[Any], tenant: str) -> TenantKeys:
        """The tenant's HMAC keys, creating (and wrapping) its secret on first use."""
        keys = self.existing_tenant_keys(conn, tenant)
        if keys is None:
            memo = transaction_memo(conn)
            if memo is not None:  # made in this transaction (a savepoint may undo it)
                memo[("tenant_secret_made", tenant)] = True
            secret = secrets.token_bytes(32)
            store.lock_wrap(conn)
            v, kek = self.keyring.wrapping_key()
            sealed = seal(kek, secret, secret_aad(tenant, v))
            store.insert_tenant_secret(conn, tenant, v, sealed.nonce, sealed.ciphertext)
            keys = self.existing_tenant_keys(conn, tenant)
            assert keys is not None
        return keys

    def existing_tenant_keys(self, conn: psycopg.Connection[Any],
                             tenant: str) -> TenantKeys | None:
        """The tenant's HMAC keys, or None if its vault was never used (reads create
        nothing). Read once per transaction (:func:`~mnemovault.store.db.transaction_memo`):
        the secret a transaction found stays its secret (a rotation rewraps the same
        secret, and the keys derived from it are kept by wrap); not when this transaction
        made it, which a savepoint's rollback could undo."""
        memo = transaction_memo(conn)
        if memo is not None:
            hit = memo.get(("tenant_keys", tenant))
            if hit is not None:
                return hit
        row = store.tenant_secret(conn, tenant)
        if row is None:
            return None
        cache_key = (tenant, int(row["kek_version"]), bytes(row["nonce"]))
        cached = self._derived.get(cache_key)
        if cached is not None:
            if memo is not None and ("tenant_secret_made", tenant) not in memo:
                memo[("tenant_keys", tenant)] = cached
            return cached
        try:
            secret = self._open_secret(tenant, row)
        except KekUnavailable:  # rewrapped and retired since this statement read it?
            row = store.tenant_secret(conn, tenant)
            if row is None:
                return None
            secret = self._open_secret(tenant, row)
        keys = TenantKeys(_derive(secret, b"placeholder"), _derive(secret, b"fingerprint"))
        if len(self._derived) > 10_000:
            self._derived.clear()
        self._derived[cache_key] = keys
        if memo is not None and ("tenant_secret_made", tenant) not in memo:
            memo[("tenant_keys", tenant)] = keys
        return keys

    def _open_secret(self, tenant: str, row: dict[str, Any]) -> bytes:
        v = row["kek_version"]
        return open_sealed(self.keyring.kek(v),
                           Sealed(bytes(row["nonce"]), bytes(row["wrapped_secret"])),
                           secret_aad(tenant, v))

    # -- entries --------------------------------------------------------------------------
    def lookup(self, conn: psycopg.Connection[Any], keys: TenantKeys,
               value: str, *, identity: str | None = None) -> str | None:
        """The live placeholder of ``value`` (of its ``identity`` if given), if the vault
        holds it (no write)."""
        row = store.placeholder_by_fingerprint(conn, tenant_of(conn),
                                               keys.fingerprint(value, identity=identity))
        return row["placeholder"] if row else None

    def get_or_create(self, conn: psycopg.Connection[Any], tenant: str, keys: TenantKeys,
                      kind: str, value: str, index: KnownEntityIndex, *,
                      identity: str | None = None) -> NewEntry:
        """The placeholder for ``value``: the existing one, or a new vault entry with its own
        DEK (value and wrapped DEK in separate tables). ``identity`` (a finding's
        :attr:`~mnemovault.pii.detect.Finding.identity`; default ``normalise(value)``)
        decides which values are one entry: the fingerprint and the placeholder derive
        from it, while ``value`` as written is what gets encrypted. ``index`` (under the
        tenant's fingerprint key) gives the fingerprint, token count and first-token
        digest kept for known-entity matching; a new value is added to it."""
        entity = index.entity(kind, value, identity=identity)
        fp = entity.fingerprint
        for counter in range(1000):
            # FOR SHARE: a concurrent shred of this value waits for this write (and then
            # erases it too) instead of slipping in between the lookup and the commit
            row = store.placeholder_by_fingerprint(conn, tenant, fp, lock=True)
            if row is not None:
                return NewEntry(row["placeholder"], row["kind"], False)
            placeholder = keys.candidate(kind, value, counter, identity=identity)
            dek = secrets.token_bytes(32)
            sealed_value = seal(dek, value.encode("utf-8"), value_aad(tenant, placeholder))
            inserted = store.insert_value(
                conn, tenant=tenant, placeholder=placeholder, kind=kind, fp=fp,
                ntokens=entity.n_tokens, head=entity.head, nonce=sealed_value.nonce,
                ciphertext=sealed_value.ciphertext)
            if not inserted:
                continue  # taken: same value by a concurrent writer (seen above), or another
            store.lock_wrap(conn)
            v, kek = self.keyring.wrapping_key()
            wrapped = seal(kek, dek, dek_aad(tenant, placeholder, v))
            store.insert_dek(conn, tenant=tenant, placeholder=placeholder, kek_version=v,
                             nonce=wrapped.nonce, wrapped=wrapped.ciphertext)
            index.add_fingerprint(kind, fp, entity.n_tokens, entity.head)
            return NewEntry(placeholder, kind, True)
        raise RuntimeError("vault: no free placeholder after 1000 candidates")

    def get_or_create_many(self, conn: psycopg.Connection[Any], tenant: str, keys: TenantKeys,
                           wanted: Sequence[tuple[KnownEntity, str, str | None]],
                           index: KnownEntityIndex) -> dict[bytes, NewEntry]:
        """:meth:`get_or_create` for many values in a few statements: ``wanted`` holds
        ``(entity, value, identity)`` with ``entity = index.entity(kind, value,
        identity=identity)``; a fingerprint listed twice is one value, its first listing
        (kind and written form) the one stored. The live ones are read in one statement
        (locked ``FOR SHARE``), the others inserted in one (each with its own DEK, at
        placeholder counter 0; their DEKs in one more); a value whose insert was skipped
        (its placeholder taken, or a concurrent writer's) goes through :meth:`get_or_create`.
        Returns ``{fingerprint: NewEntry}``. The index is not updated (the caller's
        pseudonymiser adds new values as it detects them)."""
        first: dict[bytes, tuple[KnownEntity, str, str | None]] = {}
        for w in wanted:
            first.setdefault(w[0].fingerprint, w)
        found = store.placeholders_by_fingerprints(conn, tenant, list(first))
        out = {fp: NewEntry(r["placeholder"], r["kind"], False) for fp, r in found.items()}
        new = sorted(fp for fp in first if fp not in out)
        rows, deks = [], {}
        for fp in new:
            entity, value, identity = first[fp]
            placeholder = keys.candidate(entity.kind, value, 0, identity=identity)
            dek = secrets.token_bytes(32)
            sealed_value = seal(dek, value.encode("utf-8"), value_aad(tenant, placeholder))
            rows.append((placeholder, entity.kind, fp, entity.n_tokens, entity.head,
                         sealed_value.nonce, sealed_value.ciphertext))
            deks[fp] = dek
        inserted = store.insert_values(conn, tenant, rows)
        if inserted:
            store.lock_wrap(conn)
        v, kek = self.keyring.wrapping_key()
        wrapped_rows = []
        for fp in new:
            entity, value, identity = first[fp]
            taken = inserted.get(fp)
            if taken is None:
                out[fp] = self.get_or_create(conn, tenant, keys, entity.kind, value, index,
                                             identity=identity)
                continue
            wrapped = seal(kek, deks[fp], dek_aad(tenant, taken, v))
            wrapped_rows.append((taken, v, wrapped.nonce, wrapped.ciphertext))
            out[fp] = NewEntry(taken, entity.kind, True)
        store.insert_deks(conn, tenant, wrapped_rows)
        return out

    def known_index(self, conn: psycopg.Connection[Any], keys: TenantKeys, *,
                    fingerprints: set[bytes] | None = None) -> KnownEntityIndex:
        """The tenant's known-entity index, rebuilt from stored fingerprints (nothing is
        decrypted); each fingerprint is also added to ``fingerprints`` when given."""
        index = KnownEntityIndex(keys.fingerprint_key)
        for r in store.fingerprints(conn, tenant_of(conn)):
            fp = bytes(r["fingerprint"])
            index.add_fingerprint(r["kind"], fp, r["ntokens"] or 1,
                                  bytes(r["head"]) if r["head"] is not None else None)
            if fingerprints is not None:
                fingerprints.add(fp)
        return index

    # -- reveal and shred ----------------------------------------------------------------------
    def reveal_values(self, conn: psycopg.Connection[Any], tenant: str,
                      placeholders: Iterable[str]) -> dict[str, str]:
        """placeholder -> original value, or ``[erased]`` for shredded ones. Placeholders the
        vault never issued are left out (they stay as typed)."""
        wanted = sorted(set(placeholders))
        if not wanted:
            return {}
        out: dict[str, str] = {}
        again = self._open_values(tenant, store.sealed_values(conn, tenant, wanted), out)
        if again:  # rewrapped and retired since the statement read them? read them again
            again = self._open_values(tenant, store.sealed_values(conn, tenant, sorted(again)),
                                       out)
            if again:
                self.keyring.kek(min(again.values()))  # raises KekUnavailable
        return out

    def _open_values(self, tenant: str, rows: list[dict[str, Any]],
                     out: dict[str, str]) -> dict[str, int]:
        """Decrypt ``rows`` (of :func:`~mnemovault.store.pii.sealed_values`) into ``out``;
        returns ``{placeholder: kek_version}`` of those whose KEK version is unavailable."""
        missing: dict[str, int] = {}
        for r in rows:
            ph = r["placeholder"]
            if r["ciphertext"] is None or r["wrapped_dek"] is None:
                out[ph] = ERASED
                continue
            v = r["kek_version"]
            try:
                kek = self.keyring.kek(v)
            except KekUnavailable:
                missing[ph] = v
                continue
            dek = open_sealed(kek, Sealed(bytes(r["dnonce"]), bytes(r["wrapped_dek"])),
                              dek_aad(tenant, ph, v))
            out[ph] = open_sealed(dek, Sealed(bytes(r["nonce"]), bytes(r["ciphertext"])),
                                  value_aad(tenant, ph)).decode("utf-8")
        return missing

    def erased_placeholders(self, conn: psycopg.Connection[Any],
                            placeholders: Iterable[str]) -> set[str]:
        wanted = sorted(set(placeholders))
        if not wanted:
            return set()
        return store.shredded_among(conn, tenant_of(conn), wanted)

    def shred(self, conn: psycopg.Connection[Any], placeholders: Iterable[str]) -> list[str]:
        """Crypto-shred: destroy each value's DEK and ciphertext (and its fingerprint),
        keeping a tombstone. Returns the placeholders shredded (live ones only)."""
        wanted = sorted(set(placeholders))
        if not wanted:
            return []
        return store.shred(conn, tenant_of(conn), wanted)


def render(text: str, values: dict[str, str], erased: set[str] | None = None) -> str:
    """Replace placeholders in ``text``: by their value where ``values`` has one, by
    ``[erased]`` where ``erased`` names them; others stay as they are."""
    erased = erased or set()

    def sub(m: re.Match[str]) -> str:
        ph = m.group(0)
        if ph in values:
            return values[ph]
        return ERASED if ph in erased else ph

    return PLACEHOLDER_RE.sub(sub, text)


class StreamRevealer:
    """De-anonymises a stream of text chunks: a placeholder split across chunks is held back
    until it is complete, so neither half a placeholder nor half a value is ever emitted.

    ``resolve`` maps a complete placeholder to its output (value, ``[erased]``, or itself).
    """

    _PARTIAL = re.compile(r"\{[a-z_]{0,32}(?::(?:p(?:_[0-9a-f]{0,10})?)?)?")

    def __init__(self, resolve: Any) -> None:
        self._resolve = resolve
        self._buf = ""

    def feed(self, chunk: str) -> str:
        """Return what can be emitted after ``chunk``; a trailing partial placeholder waits."""
        text = self._buf + chunk
        self._buf = ""
        start = text.rfind("{")
        if start != -1 and self._PARTIAL.fullmatch(text, start):
            self._buf, text = text[start:], text[:start]
        return PLACEHOLDER_RE.sub(lambda m: str(self._resolve(m.group(0))), text)

    def flush(self) -> str:
        """The end of the stream: whatever was held back is emitted as typed."""
        rest, self._buf = self._buf, ""
        return rest
