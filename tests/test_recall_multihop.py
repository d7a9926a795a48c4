"""Recall's second step (``recall_multihop``, :mod:`mnemovault.recall.multihop`) against
the real PostgreSQL: a bridge memory names the query's entity and a term that only the
answer holds; the first step ranks the bridge, the second reaches the answer. Off, recall
is exactly the one-step recall and the second step is never called; on, it reads through
the first step's filters (another scope's memory holding the term stays out)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mnemovault.recall import multihop
from mnemovault.vault import MemoryVault

BRIDGE = "Caroline's mentor at the art school is a woman called Zenobia"
ANSWER = "Zenobia restores antique harpsichords in her workshop"
FILLER = [
    "Caroline's mentor at the art school gave her a reading list",
    "the art school mentor programme pairs students with alumni",
    "Caroline painted a lake at sunrise for her mentor",
    "Melanie took the kids camping near the mountains",
    "a mentor at work helped Melanie with her charity race",
    "the school library closes early on Sundays",
    "Melanie's pottery class meets on Saturday mornings",
    "the mentor told Caroline to keep a sketchbook",
    "Zenobia was the name of a queen of Palmyra",  # the term elsewhere, unrelated
]
QUERY = "what does Caroline's mentor at the art school do in her workshop"
OTHER_SCOPE = "Zenobia keeps harpsichord keys in a drawer (another scope)"


@pytest.fixture
def who(vault: MemoryVault, tenant: str) -> Iterator[Any]:
    principal = vault.principal(tenant)
    docs = {"bridge": BRIDGE, "answer": ANSWER} | {f"f{i}": t for i, t in enumerate(FILLER)}
    vault.remember_many([{"content": t, "scope": "hop", "provenance": {"doc": d}}
                         for d, t in docs.items()], principal=principal)
    vault.remember_many([{"content": OTHER_SCOPE, "scope": "elsewhere",
                          "provenance": {"doc": "other"}}], principal=principal)
    saved = vault.settings
    yield principal
    vault.settings = saved


def _texts(vault: MemoryVault, who: Any, k: int) -> list[str]:
    return [h.memory.provenance["doc"] for h in vault.recall(QUERY, scope="hop", k=k,
                                                             touch=False, principal=who)]


def _on(vault: MemoryVault) -> None:
    vault.settings = vault.settings.model_copy(update={
        "recall_multihop": True, "recall_multihop_hits": 2, "recall_multihop_terms": 8,
        "recall_multihop_weight": 0.5})


def test_second_step_reaches_the_answer_through_the_bridge(vault: MemoryVault,
                                                           who: Any) -> None:
    vault.settings = vault.settings.model_copy(update={"recall_multihop": False})
    first = _texts(vault, who, 5)  # one step: the answer is 6th (below four fillers)
    assert "bridge" in first and "answer" not in first
    _on(vault)
    second = _texts(vault, who, 3)  # the bridge's rare term, the hits' mean vector: 3rd
    assert "bridge" in second and "answer" in second
    assert "other" not in _texts(vault, who, 20)  # the first step's filters hold


def test_off_is_the_one_step_recall(vault: MemoryVault, who: Any,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    vault.settings = vault.settings.model_copy(update={"recall_multihop": False})
    before = vault.recall(QUERY, scope="hop", k=10, touch=False, principal=who)

    def boom(*a: Any, **kw: Any) -> Any:
        raise AssertionError("the second step ran with the setting off")

    monkeypatch.setattr(multihop, "second_step", boom)
    after = vault.recall(QUERY, scope="hop", k=10, touch=False, principal=who)
    assert [h.memory.id for h in before] == [h.memory.id for h in after]
    assert [h.score for h in before] == pytest.approx([h.score for h in after], abs=1e-5)


def test_expansion_terms_skip_what_only_the_hits_hold() -> None:
    rows = [{"lexeme": "q", "hits": 1, "df": 5, "doc_count": 100},  # in the query
            {"lexeme": "only", "hits": 2, "df": 2, "doc_count": 100},  # nowhere else
            {"lexeme": "rare", "hits": 1, "df": 2, "doc_count": 100},
            {"lexeme": "common", "hits": 1, "df": 60, "doc_count": 100}]
    assert multihop.expansion_terms(rows, ["q"], 1) == ["rare"]
    assert multihop.expansion_terms(rows, ["q"], 5) == ["rare", "common"]
    assert multihop.expansion_terms(rows, ["q"], 0) == []
