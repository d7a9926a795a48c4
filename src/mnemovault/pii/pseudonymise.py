"""Step 4 of the write path: detected personal values become placeholders (SPEC section 3).

Runs inside the write transaction: each finding gets its placeholder from the vault
(created with its own DEK if new), and the text is rewritten right to left so offsets hold.
Known entities are found by keyed fingerprints of normalised word n-grams
(:class:`mnemovault.pii.detect.KnownEntityIndex`, rebuilt from the vault's stored
fingerprints), so no plaintext list of names is kept outside the vault.

A finding's vault entry is chosen by its identity (:attr:`~mnemovault.pii.detect.Finding.
identity`: a card's digits, a phone's E.164...), so every written form of one value shares
one placeholder; the span replaced is the finding's span of the original text, which
covers any invisible characters written inside the value. A caller-named entity whose
whole value a structured detector reads as one value (an ``account`` that is a card
number) takes that value's identity too, so its other written forms find its entry.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from mnemovault.pii.detect import (
    Detector,
    KnownEntity,
    KnownEntityIndex,
    detect_all,
    normalise,
)
from mnemovault.pii.vault import PLACEHOLDER_RE, PiiVault, TenantKeys
from mnemovault.store import pii as pii_store


@dataclass
class Pseudonymised:
    """The rewritten text, the placeholders it now holds (in order) and those created."""

    text: str
    placeholders: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)


class Pseudonymiser:
    """Rewrites texts with placeholders inside one transaction of one tenant. ``known``: a
    known-entity index to use instead of loading the tenant's (the read side's partial
    index for short names, :class:`mnemovault.pii.service.Translator`)."""

    def __init__(self, vault: PiiVault, detectors: Sequence[Detector],
                 conn: psycopg.Connection[Any], tenant: str, *, read_only: bool = False,
                 known: KnownEntityIndex | None = None) -> None:
        self.vault = vault
        self.conn = conn
        self.tenant = tenant
        self.detectors: list[Detector] = list(detectors)
        keys = (vault.existing_tenant_keys(conn, tenant) if read_only
                else vault.tenant_keys(conn, tenant))
        self.keys: TenantKeys | None = keys
        self.known: KnownEntityIndex | None = None
        self._known_fps: set[bytes] = set()  # what self.known holds (when loaded here)
        if keys is not None:
            self.known = known if known is not None else vault.known_index(
                conn, keys, fingerprints=self._known_fps)
            self.detectors.insert(0, self.known)

    def _keys(self) -> TenantKeys:
        if self.keys is None:
            raise RuntimeError("pseudonymiser: opened read-only")
        return self.keys

    def register(self, kind: str, value: str) -> tuple[str, bool]:
        """Put a caller-named entity in the vault (so later text is recognised)."""
        return self.rewrite_many([(kind, value)], [])[0][0]

    def _identity(self, value: str) -> str | None:
        """The identity of ``value`` if the structured detectors read all of it as one
        value (``4111 1111 1111 1111`` -> its digits), else ``None`` (its normal form)."""
        structured = [d for d in self.detectors if d is not self.known]
        found = detect_all(value, structured)
        if len(found) != 1:
            return None
        f = found[0]
        whole = not normalise(value[: f.start]) and not normalise(value[f.end :])
        return f.identity if whole else None

    def rewrite(self, text: str, *, create: bool = True) -> Pseudonymised:
        """``text`` with every finding replaced by its placeholder. Text that already looks
        like a placeholder is left alone (it is text).

        With ``create=False`` (reads: queries, filters) nothing is written: a value the vault
        holds becomes its placeholder, an unknown one becomes the placeholder it would get
        (which matches nothing stored), so no personal value reaches the embedder."""
        if create:
            return self.rewrite_many([], [text])[1][0]
        protected = [(m.start(), m.end()) for m in PLACEHOLDER_RE.finditer(text)]
        findings = [f for f in detect_all(text, self.detectors)
                    if not any(f.start < e and s < f.end for s, e in protected)]
        out = Pseudonymised(text)
        for f in sorted(findings, key=lambda f: f.start, reverse=True):
            if self.keys is None:  # an empty vault: the value is unknown
                ph = f"{{{f.kind}}}"
            else:
                ph = (self.vault.lookup(self.conn, self.keys, f.value, identity=f.identity)
                      or self.keys.candidate(f.kind, f.value, 0, identity=f.identity))
            out.placeholders.append(ph)
            out.text = out.text[: f.start] + ph + out.text[f.end :]
        out.placeholders.reverse()
        return out

    def rewrite_many(self, entities: Sequence[tuple[str, str]], texts: Sequence[str]
                     ) -> tuple[list[tuple[str, bool]], list[Pseudonymised]]:
        """A write's pseudonymisation in a few statements, with the outcome of
        :meth:`register` on each of the caller-named ``entities`` (``(kind, value)``) and
        then :meth:`rewrite` on each of ``texts``, in that order: a value new to the
        vault is known to the known-entity index in every later text; one fingerprint is
        one vault entry, stored with the kind and written form of its first occurrence
        (within a text occurrences count from the right, as the rewrite replaces them),
        and reported created once, where it first occurs.

        Detection runs first, over every text (no database work); then
        :meth:`~mnemovault.pii.vault.PiiVault.get_or_create_many` reads the values the vault
        holds and inserts the new ones (each with its own DEK) in one statement each,
        instead of a lookup and an insert per value.

        Returns ``([(placeholder, created)] per entity, [Pseudonymised] per text)``.
        """
        known, keys = self.known, self._keys()
        assert known is not None
        wanted: list[tuple[KnownEntity, str, str | None]] = []

        def want(kind: str, value: str, identity: str | None) -> bytes:
            entity = known.entity(kind, value, identity=identity)
            fp = entity.fingerprint
            wanted.append((entity, value, identity))
            if fp not in self._known_fps:  # new to the vault: recognised from here on
                self._known_fps.add(fp)
                known.add_fingerprint(kind, fp, entity.n_tokens, entity.head)
            return fp

        entity_fps = [want(kind, value, self._identity(value)) for kind, value in entities]
        sites: list[list[tuple[int, int, bytes]]] = []  # per text, right to left
        for text in texts:
            protected = [(m.start(), m.end()) for m in PLACEHOLDER_RE.finditer(text)]
            findings = [f for f in detect_all(text, self.detectors)
                        if not any(f.start < e and s < f.end for s, e in protected)]
            sites.append([(f.start, f.end, want(f.kind, f.value, f.identity))
                          for f in sorted(findings, key=lambda f: f.start, reverse=True)])
        entries = (self.vault.get_or_create_many(self.conn, self.tenant, keys, wanted, known)
                   if wanted else {})
        reported: set[bytes] = set()

        def created(fp: bytes) -> bool:
            if fp in reported:
                return False
            reported.add(fp)
            return entries[fp].created

        registered = [(entries[fp].placeholder, created(fp)) for fp in entity_fps]
        out: list[Pseudonymised] = []
        for text, row in zip(texts, sites, strict=True):
            r = Pseudonymised(text)
            for start, end, fp in row:
                placeholder = entries[fp].placeholder
                if created(fp):
                    r.created.append(placeholder)
                r.placeholders.append(placeholder)
                r.text = r.text[:start] + placeholder + r.text[end:]
            r.placeholders.reverse()
            r.created.reverse()
            out.append(r)
        return registered, out

    def predict_many(self, entities: Sequence[tuple[str, str]],
                     texts: Sequence[str]) -> list[str]:
        """The texts :meth:`rewrite_many` would give for ``entities`` and ``texts`` if the
        vault stayed as it is now, writing nothing (a write embeds its text before its
        transaction: :func:`mnemovault.memories.write.remember_many`): the same detection
        (a caller-named entity, and a value new to the vault, is recognised in every later
        text), each value the vault holds as its placeholder (one plain read, no lock),
        each new one as the placeholder it would be created with (counter 0). Works on a
        read-only pseudonymiser; with no tenant keys yet, new values get placeholders of
        throw-away keys (their kind, which is what the embedder reads, is right). The
        pseudonymiser's own index learns the values it saw, as in :meth:`rewrite_many`: use
        a fresh one for each prediction.

        A prediction is a guess: a concurrent write may create a value meanwhile, or a
        placeholder counter may be taken, so the caller compares it with what its
        transaction stores and redoes what differs."""
        if self.keys is not None:
            keys, known = self.keys, self.known
            assert known is not None
        else:
            keys = TenantKeys(os.urandom(32), os.urandom(32))
            known = KnownEntityIndex(keys.fingerprint_key)
        structured = [d for d in self.detectors if d is not self.known]
        detectors = [known, *structured]
        added: set[bytes] = set()
        wanted: dict[bytes, tuple[str, str, str | None]] = {}

        def want(kind: str, value: str, identity: str | None) -> bytes:
            entity = known.entity(kind, value, identity=identity)
            fp = entity.fingerprint
            wanted.setdefault(fp, (kind, value, identity))
            if fp not in self._known_fps and fp not in added:
                added.add(fp)
                known.add_fingerprint(kind, fp, entity.n_tokens, entity.head)
            return fp

        for kind, value in entities:
            want(kind, value, self._identity(value))
        sites: list[list[tuple[int, int, bytes]]] = []
        for text in texts:
            protected = [(m.start(), m.end()) for m in PLACEHOLDER_RE.finditer(text)]
            findings = [f for f in detect_all(text, detectors)
                        if not any(f.start < e and s < f.end for s, e in protected)]
            sites.append([(f.start, f.end, want(f.kind, f.value, f.identity))
                          for f in sorted(findings, key=lambda f: f.start, reverse=True)])
        held = (pii_store.placeholders_by_fingerprints(self.conn, self.tenant, list(wanted),
                                                       lock=False)
                if wanted and self.keys is not None else {})
        placeholder = {fp: (held[fp]["placeholder"] if fp in held else
                            keys.candidate(kind, value, 0, identity=identity))
                       for fp, (kind, value, identity) in wanted.items()}
        out = []
        for text, row in zip(texts, sites, strict=True):
            for start, end, fp in row:
                text = text[:start] + placeholder[fp] + text[end:]
            out.append(text)
        return out
