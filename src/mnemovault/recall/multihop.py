"""Recall's second step (``recall_multihop``, off by default; issue 27 item 4).

A multi-hop question names one thing and asks about another that only a memory it does not
match names ("what did Caroline's friend from the support group paint?": one turn links
Caroline to a friend's name, another holds the painting and the name alone). The first
step finds the link; the second asks again with what the link adds. It is pseudo-relevance
feedback (Rocchio, "Relevance feedback in information retrieval", 1971, for the vector;
Lavrenko and Croft's relevance models, SIGIR 2001, and RM3 for the expansion terms),
restricted to what the first step's best hits carry:

1. the ``recall_multihop_hits`` best memories of the first step's ranking (after its
   conversation-context stage) are read again through the same filters (``where``/
   ``params``) on the same connection (:func:`mnemovault.store.search.hop_sources`):
   their stored embeddings and their keyed lexemes with each lexeme's document frequency;
2. expansion terms: the lexemes of those hits the query lacks that some *other* memory of
   the scope also holds (``df`` above the number of hits holding it: a term only the hits
   hold cannot lead anywhere new), the ``recall_multihop_terms`` rarest (highest idf,
   ties by how many hits hold it); a name, a place, an object;
3. the lexical side again with those terms alone (BM25 as in the first step: the
   query's own terms would rank the first step's hits again, and a memory holding only the
   bridge's term would stay below them), and the dense side again with the unit query
   vector plus the mean of the hits' unit embeddings (normalised); both through the same
   ``where``;
4. the two new lists fused as the first step fuses its lists (:func:`~mnemovault.recall.
   ranking.fuse`, the plain fusion, no context stage), and added to the first ranking
   with weight ``recall_multihop_weight``: ``s = s_1 + β · s_2`` (``s_1 = 0`` for a memory
   the first step did not rank). The first ranking stays the main evidence; a memory both
   steps like rises, one only the second step finds enters if it is strong there.
   ``β`` is ``recall_multihop_weight`` times the first step's lexical gate ``s(q)`` (the
   share the ``gated`` fusion gives its text side, as the context stage's loans): a bridge
   is a named thing (a rare term the best hit shares with the query); when the first
   ranking is by meaning alone (a paraphrase, a preference the question never names) its
   best hits name nothing the question needs, and without the gate the second step cost
   MADial-Bench and the preference set recall (``bench/results/multihop_ungated.json``).

Nothing else is read: no text leaves the database, the terms stay keyed hashes, and every
row comes through the first step's filters, so the visibility and tenant rules are the
first step's. With the setting off, :func:`second_step` is not called.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import psycopg

from mnemovault.recall.ranking import Fused, FusionWeights, fuse, text_share
from mnemovault.store.search import hop_sources, text_candidates, vector_candidates


def gate(text_hits: Sequence[tuple[Any, float]], text_max: float | None,
         w: FusionWeights) -> float:
    """The share of ``recall_multihop_weight`` the second step gets: the first step's
    lexical gate ``s(q)`` (:func:`~mnemovault.recall.ranking.text_share`) under the
    ``gated`` fusion, 1 otherwise (module docstring)."""
    if w.method != "gated" or w.vector <= 0:
        return 1.0
    return text_share(max((x for _, x in text_hits), default=0.0), text_max, w)


def expansion_terms(lexemes: Sequence[dict[str, Any]], query_terms: Sequence[str],
                    limit: int) -> list[str]:
    """Step 2 of the module docstring: the ``limit`` rarest lexemes of the hits that the
    query lacks and another memory holds, from :func:`~mnemovault.store.search.hop_sources`
    rows (``lexeme``, ``hits``, ``df``, ``doc_count``)."""
    if limit <= 0 or not lexemes:
        return []
    have = set(query_terms)
    docs = float(lexemes[0]["doc_count"] or 0)
    picks = []
    for r in lexemes:
        df, hits = int(r["df"] or 0), int(r["hits"])
        if r["lexeme"] in have or df <= hits:
            continue
        idf = math.log(1 + (docs - df + 0.5) / (df + 0.5))
        picks.append((-idf, -hits, r["lexeme"]))
    picks.sort()
    return [lx for _, _, lx in picks[:limit]]


def hop_vector(qvec: Any, embeddings: Sequence[Any]) -> np.ndarray[Any, Any] | None:
    """The second dense query: the unit query vector plus the mean of the hits' unit
    embeddings, normalised (None without embeddings)."""
    vs = [np.asarray(e.to_numpy() if hasattr(e, "to_numpy") else e, dtype=np.float32)
          for e in embeddings if e is not None]
    if not vs:
        return None

    def unit(v: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        norm = float(np.linalg.norm(v))
        return v / norm if norm > 0 else v

    mean = np.mean([unit(v) for v in vs], axis=0)
    return unit(unit(np.asarray(qvec, dtype=np.float32)) + mean).astype(np.float32)


def second_step(conn: psycopg.Connection[Any], fused: list[Fused], qvec: Any,
                terms: Sequence[str] | None, where: str, params: dict[str, Any], n: int,
                now: datetime, w: FusionWeights, *, hits: int, expand: int,
                weight: float, ef_search: int) -> list[Fused]:
    """The first ranking ``fused`` with the second step added (module docstring)."""
    head = [f.id for f in fused[:hits]]
    if not head or weight <= 0:
        return fused
    vecs, lexemes = hop_sources(conn, head, where, params)
    extra = expansion_terms(lexemes, terms or [], expand) if terms is not None else []
    hvec = hop_vector(qvec, [r["embedding"] for r in vecs])
    trows = text_candidates(conn, extra, where, params, n) if extra else []
    vrows = (vector_candidates(conn, hvec, where, params, n, ef_search=ef_search)
             if hvec is not None else [])
    if not trows and not vrows:
        return fused
    meta = {r["id"]: (r["created_at"], r["pinned"]) for r in (*vrows, *trows)}
    second = fuse([(r["id"], 1.0 - float(r["distance"])) for r in vrows],
                  [(r["id"], float(r["score"])) for r in trows], meta, now, w,
                  text_max=float(trows[0]["qmax"]) if trows else None)
    out: dict[uuid.UUID, Fused] = {f.id: f for f in fused}
    for f in second:
        have = out.get(f.id)
        if have is None:
            out[f.id] = Fused(f.id, weight * f.score, None, None, None)
        else:
            have.score += weight * f.score
    return sorted(out.values(), key=lambda f: (-f.score, f.id))
