"""Step 4 of the write path: detected personal values become placeholders (SPEC section 3).

Runs inside the write transaction: each finding gets its placeholder from the vault
(created with its own DEK if new), and the text is rewritten right to left so offsets hold.
Known entities are found by keyed fingerprints of normalised word n-grams, so no plaintext
list of names is kept outside the vault.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from mnemovault.pii.detect import Detector, Finding, detect_all
from mnemovault.pii.vault import PLACEHOLDER_RE, PiiVault, TenantKeys

_TOKEN = re.compile(r"\w+(?:['’.\-]\w+)*", re.UNICODE)
KNOWN_CONFIDENCE = 0.99


@dataclass
class Pseudonymised:
    text: str
    placeholders: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)


class KnownEntities:
    """Matches values the tenant's vault already holds (or the caller just passed), by
    fingerprint: every window of 1..max_tokens word tokens is normalised and looked up."""

    name = "known"

    def __init__(self, keys: TenantKeys, known: dict[bytes, tuple[str, int]]) -> None:
        self.keys = keys
        self.known = known
        self.max_tokens = max((n for _, n in known.values()), default=0)

    def add(self, fingerprint: bytes, kind: str, ntokens: int) -> None:
        self.known[fingerprint] = (kind, ntokens)
        self.max_tokens = max(self.max_tokens, ntokens)

    def detect(self, text: str) -> list[Finding]:
        if not self.known:
            return []
        toks = [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
        out: list[Finding] = []
        for i in range(len(toks)):
            for n in range(1, min(self.max_tokens, len(toks) - i) + 1):
                start, end = toks[i][0], toks[i + n - 1][1]
                hit = self.known.get(self.keys.fingerprint(text[start:end]))
                if hit is not None and hit[1] == n:
                    out.append(Finding(start, end, hit[0], text[start:end], KNOWN_CONFIDENCE,
                                       self.name))
        return out


def token_count(value: str) -> int:
    return max(len(_TOKEN.findall(value)), 1)


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
        self.known: KnownEntities | None = None
        if keys is not None:
            self.known = KnownEntities(keys, vault.known_fingerprints(conn))
            self.detectors.append(self.known)

    def _keys(self) -> TenantKeys:
        if self.keys is None:
            raise RuntimeError("pseudonymiser: opened read-only")
        return self.keys

    def register(self, kind: str, value: str) -> tuple[str, bool]:
        """Put a caller-named entity in the vault (so later text is recognised)."""
        n = token_count(value)
        keys = self._keys()
        entry = self.vault.get_or_create(self.conn, self.tenant, keys, kind, value, n)
        assert self.known is not None
        self.known.add(keys.fingerprint(value), entry.kind, n)
        return entry.placeholder, entry.created

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
            n = token_count(f.value)
            if not create:
                if self.keys is None:  # an empty vault: the value is unknown
                    ph = f"{{{f.kind}}}"
                else:
                    ph = (self.vault.lookup(self.conn, self.keys, f.value)
                          or self.keys.candidate(f.kind, f.value, 0))
                out.placeholders.append(ph)
                out.text = out.text[: f.start] + ph + out.text[f.end :]
                continue
            keys = self._keys()
            entry = self.vault.get_or_create(self.conn, self.tenant, keys, f.kind, f.value, n)
            if entry.created and self.known is not None:
                self.known.add(keys.fingerprint(f.value), entry.kind, n)
                out.created.append(entry.placeholder)
            out.placeholders.append(entry.placeholder)
            out.text = out.text[: f.start] + entry.placeholder + out.text[f.end :]
        out.placeholders.reverse()
        out.created.reverse()
        return out
