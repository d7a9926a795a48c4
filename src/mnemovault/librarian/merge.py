"""Near-duplicate episodes -> one fact (issue 23, item 1).

Two episodes of one subject (or both without one) in one scope are near-duplicates when
the cosine similarity of their stored embeddings (the pgvector column recall searches,
``<=>`` is ``1 - cosine``) is at least ``librarian_merge_similarity`` *and* the Jaccard
overlap of their word tokens is at least ``librarian_merge_lexical``: the embedding alone
joins paraphrases that differ in what matters (``I moved to Paris`` / ``I moved to Rome``
score ~0.8), the tokens alone join texts that share words but not meaning. Groups are the
connected components of that relation (union-find), so three restatements of one thing
make one fact. The similarities are computed blockwise in memory from the stored vectors
(one read of the scope, ``O(n²)`` multiply-adds in blocks of :data:`BLOCK` rows), which is
faster than one index query per episode for the scopes a run sees (see
``bench/librarian.py``).

The fact's text is the group's medoid (the member most similar to all the others; ties by
the oldest), followed by when it was said: ``I love hiking. (said on 8 May 2023 and 9 June
2023)``. The sources stay; the fact ranks above them (:mod:`mnemovault.librarian.fade`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mnemovault.librarian.common import Draft, Episode, days, jaccard, tokens

BLOCK = 1024


def groups(episodes: list[Episode], *, similarity: float,
           lexical: float) -> list[list[Episode]]:
    """The near-duplicate groups (two members or more) of ``episodes``, each in
    remembered order, groups by their oldest member."""
    out: list[list[Episode]] = []
    by_subject: dict[str | None, list[Episode]] = {}
    for e in episodes:
        by_subject.setdefault(e.subject, []).append(e)
    for eps in by_subject.values():
        if len(eps) < 2:
            continue
        parent = list(range(len(eps)))
        vecs = np.stack([e.vector for e in eps]).astype(np.float32)
        toks = [tokens(e.content) for e in eps]
        for start in range(0, len(eps), BLOCK):
            sims = vecs[start:start + BLOCK] @ vecs.T
            rows, cols = np.nonzero(sims >= similarity)
            for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
                i = start + r
                if c <= i or jaccard(toks[i], toks[c]) < lexical:
                    continue
                a, b = _find(parent, i), _find(parent, c)
                if a != b:
                    parent[max(a, b)] = min(a, b)
        comps: dict[int, list[Episode]] = {}
        for i, e in enumerate(eps):
            comps.setdefault(_find(parent, i), []).append(e)
        out.extend(g for g in comps.values() if len(g) > 1)
    out.sort(key=lambda g: (g[0].created_at, g[0].id))
    return out


def _find(parent: list[int], i: int) -> int:
    """The union-find root of ``i`` (path halving)."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def medoid(group: list[Episode]) -> Episode:
    """The member with the highest summed cosine similarity to the group (oldest on ties)."""
    vecs = np.stack([e.vector for e in group])
    score: Any = (vecs @ vecs.T).sum(axis=1)
    best = max(range(len(group)), key=lambda i: (round(float(score[i]), 6), -i))
    return group[best]


def drafts(episodes: list[Episode], *, similarity: float, lexical: float) -> list[Draft]:
    """One ``merge`` draft per near-duplicate group (module docstring)."""
    out = []
    for g in groups(episodes, similarity=similarity, lexical=lexical):
        rep = medoid(g)
        text = f"{rep.content.strip()} (said on {days([e.created_at for e in g])})"
        out.append(Draft(kind="merge", content=text, sources=g, subject=g[0].subject,
                         notes={"representative": str(rep.id)}))
    return out
