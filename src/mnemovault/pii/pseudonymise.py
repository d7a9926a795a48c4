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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from mnemovault.pii.detect import Detector, KnownEntityIndex, detect_all, normalise
from mnemovault.pii.vault import PLACEHOLDER_RE, PiiVault, TenantKeys


@dataclass
class Pseudonymised:
    """The rewritten text, the placeholders it now holds (in order) and those created."""

    text: str
    placeholders: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)


class Pseudonymiser:
    """Rewrites texts with placeholders inside one transaction of one tenant."""

    def __init__(self, vault: PiiVault, detectors: Sequence[Detector],
                 conn: psycopg.Connection[Any], tenant: str, *, read_only: bool = False) -> None:
        self.vault = vault
        self.conn = conn
        self.tenant = tenant
        self.detectors: list[Detector] = list(detectors)
        keys = (vault.existing_tenant_keys(conn, tenant) if read_only
                else vault.tenant_keys(conn, tenant))
        self.keys: TenantKeys | None = keys
        self.known: KnownEntityIndex | None = None
        if keys is not None:
            self.known = vault.known_index(conn, keys)
            self.detectors.insert(0, self.known)

    def _keys(self) -> TenantKeys:
        if self.keys is None:
            raise RuntimeError("pseudonymiser: opened read-only")
        return self.keys

    def register(self, kind: str, value: str) -> tuple[str, bool]:
        """Put a caller-named entity in the vault (so later text is recognised)."""
        assert self.known is not None
        entry = self.vault.get_or_create(self.conn, self.tenant, self._keys(), kind, value,
                                         self.known, identity=self._identity(value))
        return entry.placeholder, entry.created

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
        protected = [(m.start(), m.end()) for m in PLACEHOLDER_RE.finditer(text)]
        findings = [f for f in detect_all(text, self.detectors)
                    if not any(f.start < e and s < f.end for s, e in protected)]
        out = Pseudonymised(text)
        for f in sorted(findings, key=lambda f: f.start, reverse=True):
            if not create:
                if self.keys is None:  # an empty vault: the value is unknown
                    ph = f"{{{f.kind}}}"
                else:
                    ph = (self.vault.lookup(self.conn, self.keys, f.value, identity=f.identity)
                          or self.keys.candidate(f.kind, f.value, 0, identity=f.identity))
                out.placeholders.append(ph)
                out.text = out.text[: f.start] + ph + out.text[f.end :]
                continue
            assert self.known is not None
            entry = self.vault.get_or_create(self.conn, self.tenant, self._keys(), f.kind,
                                             f.value, self.known, identity=f.identity)
            if entry.created:
                out.created.append(entry.placeholder)
            out.placeholders.append(entry.placeholder)
            out.text = out.text[: f.start] + entry.placeholder + out.text[f.end :]
        out.placeholders.reverse()
        out.created.reverse()
        return out
