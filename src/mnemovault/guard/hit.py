"""A sanitiser detector's finding (:class:`Hit`), apart so that every detector module can
import it without importing the sanitiser (:mod:`mnemovault.guard.sanitise` re-exports it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Hit:
    """One detection: ``text[start:end]`` looks like ``family``."""

    start: int
    end: int
    family: str
