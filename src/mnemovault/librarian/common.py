"""What the librarian's steps share: an episode as read, a planned fact (:class:`Draft`),
tokens for the lexical check, and dates as facts render them."""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

_TOKEN = re.compile(r"\{[a-z0-9_]+:p_[0-9a-f]{10}\}|[^\W_]+", re.UNICODE)


@dataclass(frozen=True)
class Episode:
    """One live episode as stored: its content holds placeholders for personal values;
    ``vector`` is its stored embedding, scaled to unit length."""

    id: uuid.UUID
    subject: str | None
    created_at: datetime
    content: str
    vector: np.ndarray[Any, Any]


@dataclass
class Draft:
    """A fact the librarian means to write: ``kind`` (``merge``, ``distil`` or
    ``attribute``), its text,
    the episodes it comes from (lineage to each), the subject they share."""

    kind: str
    content: str
    sources: list[Episode]
    subject: str | None
    via: str = "extractive"  # or "model"
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def source_ids(self) -> list[uuid.UUID]:
        return sorted(e.id for e in self.sources)

    @property
    def digest(self) -> str:
        """A fingerprint of the kind and the set of sources (ids only): the same group
        planned again is recognised and not written twice (a rerun is idempotent)."""
        h = hashlib.sha256(self.kind.encode())
        if "attribute" in self.notes:  # one episode can state several attributes
            h.update(b"\x00" + str(self.notes["attribute"]).encode())
        for i in self.source_ids:
            h.update(i.bytes)
        return _letters(h.digest()[:12])

    @property
    def key(self) -> str:
        """The fact's upsert key: its kind and its oldest source. A group that grows
        (a newer episode joins it) keeps its oldest source, so its new fact becomes a
        new version of the old one (:mod:`mnemovault.memories.write` key versioning). An
        attribute's fact has its subject's attribute key instead
        (:func:`mnemovault.librarian.attributes.key_of`): each value a version."""
        if "key" in self.notes:
            return str(self.notes["key"])
        return f"librarian {self.kind} {_letters(self.source_ids[0].bytes)}"

    @property
    def span(self) -> tuple[datetime, datetime]:
        times = [e.created_at for e in self.sources]
        return min(times), max(times)


def _letters(raw: bytes) -> str:
    """Bytes as letters a-p only: no digit run a detector could read as a number."""
    return "".join("abcdefghijklmnop"[b >> 4] + "abcdefghijklmnop"[b & 15] for b in raw)


def tokens(text: str) -> set[str]:
    """Lower-case word tokens of ``text`` (a placeholder is one token)."""
    return {t.lower() for t in _TOKEN.findall(text)}


def jaccard(a: set[str], b: set[str]) -> float:
    """``|a ∩ b| / |a ∪ b|`` (0 for two empty sets)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def day(t: datetime) -> str:
    """A date as facts render it: ``8 May 2023`` (no digit run a detector reads as a
    phone number, and the form people ask about)."""
    return f"{t.day} {t.strftime('%B')} {t.year}"


def days(times: list[datetime]) -> str:
    """Distinct dates in order, ``8 May 2023, 9 June 2023 and 1 July 2023``."""
    seen = list(dict.fromkeys(day(t) for t in sorted(times)))
    return seen[0] if len(seen) == 1 else ", ".join(seen[:-1]) + " and " + seen[-1]


def unit(rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Rows scaled to unit length (a zero row stays zero)."""
    n = np.linalg.norm(rows, axis=-1, keepdims=True)
    return np.divide(rows, n, out=np.zeros_like(rows), where=n > 0)
