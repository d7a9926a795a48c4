"""bench/embedders.py's rule for changing the default embedder (issue 27, item 3)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench():  # type: ignore[no-untyped-def]
    env = dict(os.environ)  # the bench sets OMP_NUM_THREADS and offline flags for itself
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("embedders")
    finally:
        sys.path.remove(str(BENCH))
        os.environ.clear()
        os.environ.update(env)


def _q(at5: float, at10: float) -> dict[str, float]:
    return {"@1": 0.0, "@5": at5, "@10": at10}


def test_a_candidate_must_win_every_set_within_the_cost_bound() -> None:
    decide = _bench().decide
    quality = {
        "minilm": {"a": _q(0.5, 0.6), "b": _q(0.4, 0.5)},
        "wins_all": {"a": _q(0.5, 0.7), "b": _q(0.45, 0.55)},
        "loses_one": {"a": _q(0.6, 0.8), "b": _q(0.4, 0.5)},  # b@10 only equal
        "too_dear": {"a": _q(0.6, 0.8), "b": _q(0.5, 0.6)},
    }
    cost = {"minilm": {"query_cost_x": 1.0, "doc_cost_x": 1.0},
            "wins_all": {"query_cost_x": 1.2, "doc_cost_x": 1.5},
            "loses_one": {"query_cost_x": 0.5, "doc_cost_x": 0.5},
            "too_dear": {"query_cost_x": 1.0, "doc_cost_x": 1.6}}
    out = decide(quality, cost)
    rows = out["candidates"]
    assert rows["wins_all"]["qualifies"]
    assert not rows["loses_one"]["qualifies"] and rows["loses_one"]["loses_on"] == ["b"]
    assert not rows["too_dear"]["qualifies"] and rows["too_dear"]["cost_x"] == 1.6
    assert out["default"] == "wins_all" and out["changes"]
    del quality["wins_all"]
    assert decide(quality, cost)["default"] == "minilm"
