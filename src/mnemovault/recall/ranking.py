"""Score fusion for recall.

Two candidate lists come in: the nearest memories by cosine similarity and the best by
BM25 (:mod:`mnemovault.store.search`). Three ways to fuse them:

- ``gated`` (default): the convex combination below, with the lexical side's weight
  scaled by how much of the query the best text match covers. ``q = bm25_best /
  bm25_max(query)``, where ``bm25_max = Σ_t idf(t) · (k1 + 1)`` over all the query's
  terms (one the scope lacks counts with the highest idf) is the score of a document
  holding every term with saturated frequency: roughly the share of the query's IDF mass
  the best match reaches
  (the theoretical-maximum normaliser of Bruch, Gai and Ingber, ACM TOIS 2023). The text
  weight becomes ``text · s(q)`` with ``s`` rising linearly from 0 at ``gate_low`` to 1 at
  ``gate_high``, and the vector side gets the rest: a query whose rare terms are matched
  (a name, a place) keeps its lexical evidence, while one whose best lexical match is a
  long message sharing a common word with it (a paraphrase, the last turn of a dialogue)
  is ranked by meaning. The min-max / divide-by-best normalisation inside each list stays;
  the gate is what keeps a weak best match from counting as a full one.
- ``convex``: cosine similarities min-max normalised over the candidates, BM25 divided by
  the best one, ``w_v · sim' + w_t · bm25'`` (the default before the gated one).
- ``rrf``: weighted reciprocal rank, ``w / (k + rank)`` per list (Cormack, Clarke and
  Büttcher, SIGIR 2009), scaled to [0, 1] by its maximum.

Conversation context (``neighbours``, on by default): the answer to a question is often
the turn next to the one that matches it (the question a speaker was asked, the reply to
what they said). Each of the ``context_anchors`` best fused memories (``a``, fused score
``s_a`` without recency and pin) lends to the turns just before and after it in *its
conversation*: the memories of the same scope whose provenance names the same ``run_id``
(the conversation or session id the writer gives: the LoCoMo importer sets
``"<sample>/session_<n>"``, a JSON Lines record's ``run_id`` field, the OpenAI Agents and
LlamaIndex integrations their session id), in turn order ``(created_at, id)`` (UUIDv7 ids
keep the order of one batch), at most ``context_window`` each way and within
``recall_context_gap_seconds`` of it (a conversation resumed later is another sitting). A
memory without a ``run_id`` neither lends nor borrows. Why a conversation id and not write
times (the rule before): write times say when a record reached the vault, not what it
was said next to. A bulk import gives every record one write time, so unrelated records
(a person's preference and the filler around it, separate events) fell into one
"conversation" window and borrowed from each other; two agents writing at the same time
would interleave. Strict adjacency of one ``remember_many`` call was the other candidate
and is no better: a batch is a transport unit (an importer cuts a file into batches of
256 whatever its conversations), and a chat writes each turn in a call of its own. The
writer is the only one who knows which turns belong together, so the stage asks for that
and is off otherwise; the one place it is decided is :func:`mnemovault.store.neighbours.
adjacent`, which walks the index ``memories_conversation`` over the clear column's keyed
hash of the run id (:func:`mnemovault.pii.sealing.run_id_hash`). A neighbour at offset
``o`` gets ``+ g · λ_o · s_a · context_decay^(|o| − 1)``, with ``λ = context_after`` for
the turns that follow and ``context_before`` for those before, and ``g`` the lexical
gate's share ``s(q)`` of the ``gated`` fusion (1 otherwise): the loan is as strong as the
evidence that the query names something said at that point of the conversation (a rare
term matched), and fades when the ranking is by meaning alone (a paraphrase, the last turn
of a dialogue), where the best hits' timeline neighbours are as likely unrelated events of
the same sitting; a memory next to several anchors takes the largest loan. This is score
propagation over the document sequence, the neighbourhood smoothing of cluster- and
passage-based retrieval (Kurland and Lee, "Corpus structure, language models, and ad
hoc information retrieval", SIGIR 2004; Diaz,
"Regularizing ad hoc retrieval scores", CIKM 2005), applied to a dialogue's turns; the
30-minute gap within one run is the usual sessionisation cut of interaction logs (Catledge
and Pitkow, "Characterizing browsing strategies in the World-Wide Web", 1995, 25.5 min;
30 min since). The neighbours come from :mod:`mnemovault.store.neighbours`; without them
(or with ``context_after = context_before = 0``) the ranking is the plain fusion. Rows
sealed before migration 0021 hold no run-id hash and so take no part.

The hold (``context_hold``, on): a loan may reorder turns, but it may not cost another
conversation its place. The first hit of each conversation in the plain fusion
(``conversations``: the candidates' conversation keys, a memory without one a conversation
of its own) keeps its place against the turns of *other* conversations that took a loan
while it is among the ``context_anchors`` best, and gives up at most one place to them
below: the lent turns are placed strongest first, and one that would pass a first hit with
no place left to give stays just below it. A lent turn passes freely the turns of its own
conversation and the second and later hits of a conversation already represented higher
up. So every conversation the plain fusion reaches in its top ``j`` is still reached in the
top ``j`` for ``j`` up to ``context_anchors`` (session recall@5 is the plain fusion's), and
in the top ``j + 1`` below. Why: without the hold the neighbours of five anchors (up to four
each) flood the head of the ranking with turns of conversations already in it and push the
first hits of others down, so the ranking reached fewer conversations than its own parts
did: on LoCoMo (where a conversation is a session) session recall@5 / @10 fell to 0.815 /
0.879 against 0.845 / 0.905 without the context stage and 0.845 / 0.897 for the lexical
side alone, while turn recall@10 rose from 0.680 to 0.763. The rule was chosen among
structural variants (no hold; the strict hold for every lent turn; only the reply of each
anchor, or of the lead, or every neighbour of the lead, let past first hits, below the
anchors or everywhere; at most one, two or three places given up by a first hit below the
anchors, or anywhere; at most one or two lent turns per conversation), compared by
replaying this function on the bench's captured candidate lists
(``bench/_hold_variants.py`` prints each), on LoCoMo half A (the
first five conversations: the largest turn recall@10 with fused at least the best of no
context, vector and text minus 0.01 at @5 and @10, turn and session level) and reported on
half B: B turn 0.589 / 0.713 (@5 / @10; no context 0.592 / 0.664, text 0.558 / 0.634,
vector 0.457 / 0.573), session 0.844 / 0.889 (no context 0.844 / 0.894, text 0.837 /
0.891, vector 0.762 / 0.843); on A turn 0.603 / 0.753, session 0.847 / 0.908 (no context
0.847 / 0.917, text 0.853 / 0.902). Two places below the anchors would gain turn recall
(A 0.766, B 0.730 at @10) and lose session recall (A 0.903, B 0.883 at @10: both more than
a point under the best part). Chosen on B instead, the rule would let every neighbour of
the lead past the first hits below the anchors (turn@10 0.729 on B), which on A falls 0.006
short at session@10 (0.901 against 0.917 - 0.01). The price is turn recall: LoCoMo
turn@10 0.733 (0.763 without the hold), turn@5 0.596 (0.649): most of what the loans gained
at the very head was bought with other sessions' places. MADial-Bench and the preference
set carry no ``run_id``, so neither the loans nor the hold touch them
(``bench/results/recall_eval.json``: ``locomo_split.half_A`` / ``half_B``,
``never_loses_to_parts``).

Then a recency term ``w_r · 2^(-age / half_life)`` and a pin bonus are added; last, a
librarian fact (:mod:`mnemovault.librarian`) is lifted to the best score of its ranked
sources plus its stored ``rank_boost``, so it ranks above them until it fades. The defaults
(0.3 : 0.7, gate from 0.05 to 0.2) were chosen with ``bench/recall_eval.py`` as the
setting that loses to neither of its own sides on any of its sets (LoCoMo, MADial-Bench
with both query protocols, the preference set) by more than a point at k = 5 and 10;
LoCoMo alone prefers the gate open wider (its split halves pick ``gate_low = 0``,
``gate_high = 0.15``), which costs the preference set. The context defaults (after 0.6,
before 0.4, two turns each way, decay 0.7, five anchors) were chosen the same way: on
LoCoMo's held-out halves they added about 9 points of turn recall@10 before the hold and
add about 5 with it (0.680 to 0.733 overall), and with the gate closed they leave
MADial-Bench and the preference set as they were (``bench/results/recall_eval.json``).

An optional :class:`Reranker` (for example a cross-encoder the deployer has on disk) can
re-score the fused head; none is loaded by default and nothing is downloaded.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable


@dataclass(frozen=True)
class FusionWeights:
    method: Literal["gated", "convex", "rrf"] = "gated"
    vector: float = 0.3
    text: float = 0.7
    rrf_k: int = 5
    recency: float = 0.05
    half_life_days: float = 30.0
    pin: float = 0.05
    gate_low: float = 0.05
    gate_high: float = 0.2
    context_after: float = 0.6
    context_before: float = 0.4
    context_window: int = 2
    context_decay: float = 0.7
    context_anchors: int = 5
    context_hold: bool = True  # the loans cost no conversation its place (docstring)

    @property
    def context(self) -> bool:
        """Whether the conversation-context stage lends anything (module docstring)."""
        return self.context_anchors > 0 and self.context_window > 0 and (
            self.context_after > 0 or self.context_before > 0)


@dataclass
class Fused:
    id: uuid.UUID
    score: float
    vector_rank: int | None
    text_rank: int | None
    similarity: float | None


@runtime_checkable
class Reranker(Protocol):
    """Re-scores the head of a fused ranking (e.g. a local cross-encoder).

    ``rerank(query, texts)`` returns one relevance score per text (higher is better), in
    the order given; the texts are the stored (pseudonymised) contents. It must not reach
    the network."""

    def rerank(self, query: str, texts: Sequence[str]) -> Sequence[float]: ...


def _minmax(values: list[float], lo: float | None = None) -> list[float]:
    """Scale to [0, 1] between ``lo`` (default: the minimum) and the maximum."""
    if not values:
        return []
    hi = max(values)
    lo = min(values) if lo is None else lo
    if hi <= lo:
        return [1.0] * len(values)
    return [(v - lo) / (hi - lo) for v in values]


def text_share(best: float, text_max: float | None, w: FusionWeights) -> float:
    """The gate ``s(q)`` of the ``gated`` fusion for a query whose best BM25 score is
    ``best`` and whose attainable maximum is ``text_max`` (module docstring); 1 without a
    maximum."""
    if text_max is None or text_max <= 0:
        return 1.0
    q = best / text_max
    if w.gate_high <= w.gate_low:
        return 1.0 if q >= w.gate_high else 0.0
    return min(max((q - w.gate_low) / (w.gate_high - w.gate_low), 0.0), 1.0)


def fuse(
    vector_hits: list[tuple[uuid.UUID, float]],
    text_hits: list[tuple[uuid.UUID, float]],
    meta: dict[uuid.UUID, tuple[datetime, bool]],
    now: datetime,
    w: FusionWeights,
    *,
    text_max: float | None = None,
    neighbours: Mapping[uuid.UUID, Sequence[tuple[uuid.UUID, int]]] | None = None,
    conversations: Mapping[uuid.UUID, Hashable] | None = None,
    boosts: Mapping[uuid.UUID, tuple[float, Sequence[uuid.UUID]]] | None = None,
) -> list[Fused]:
    """Fuse the two candidate lists into one ranking, best first (ties broken by id).

    Args:
        vector_hits: (id, cosine similarity), best first.
        text_hits: (id, BM25 score), best first.
        meta: id -> (created_at, pinned) for every candidate.
        now: the reference time for recency.
        text_max: the query's highest attainable BM25 score (``qmax`` of
            :func:`mnemovault.store.search.text_candidates`), for the ``gated`` share
            (without it the gate is open).
        neighbours: memory id -> [(neighbour id, signed offset in its conversation's
            turn order: -1 the turn just before, +1 just after, ...)], for at least the
            first ``w.context_anchors`` of the plain fusion; their neighbours join the ranking
            with the conversation-context loan (module docstring; ``meta`` should hold
            them too, else they count as created ``now``). None: no context stage.
        conversations: memory id -> its conversation (any key equal for the memories of
            one conversation: the ``conversation`` column, the run id) for the candidates
            and neighbours that have one, for the hold of the context stage (module
            docstring); a memory missing from it is a conversation of its own. None: an
            anchor and its ``neighbours`` are one conversation, every other memory one of
            its own.
        boosts: id -> (the memory's stored ``rank_boost``, the memories it was derived
            from): the librarian's consolidated facts (:mod:`mnemovault.librarian`). Such
            a fact scores the best of its own score and its ranked sources' scores, plus
            its boost: above its sources while the boost is positive, just under the best
            of them once it faded (a negative boost).
    """
    out: dict[uuid.UUID, Fused] = {}
    best = 1.0
    share = 1.0
    if w.method in ("gated", "convex"):
        share = (text_share(max((x for _, x in text_hits), default=0.0), text_max, w)
                 if w.method == "gated" and w.vector > 0 else 1.0)
        wt = w.text * share
        wv = w.vector + w.text - wt if w.vector > 0 else 0.0
        vparts = [wv * x for x in _minmax([s for _, s in vector_hits])]
        tparts = [wt * x for x in _minmax([s for _, s in text_hits], lo=0.0)]
    else:
        vparts = [w.vector / (w.rrf_k + r) for r in range(1, len(vector_hits) + 1)]
        tparts = [w.text / (w.rrf_k + r) for r in range(1, len(text_hits) + 1)]
        best = (w.vector + w.text) / (w.rrf_k + 1) or 1.0
    for rank, ((mid, sim), part) in enumerate(zip(vector_hits, vparts, strict=True), start=1):
        out[mid] = Fused(mid, part, rank, None, sim)
    for rank, ((mid, _), part) in enumerate(zip(text_hits, tparts, strict=True), start=1):
        f = out.get(mid)
        if f is None:
            out[mid] = Fused(mid, part, None, rank, None)
        else:
            f.score += part
            f.text_rank = rank
    for f in out.values():
        f.score /= best

    def extra(mid: uuid.UUID) -> float:  # the recency and pin terms
        created, pinned = meta.get(mid, (now, False))
        age_days = max((now - created).total_seconds() / 86400.0, 0.0)
        r = w.recency * math.pow(2.0, -age_days / w.half_life_days) if w.recency else 0.0
        return r + (w.pin if pinned else 0.0)

    extras = {mid: extra(mid) for mid in out}
    lent: dict[uuid.UUID, float] = {}
    plain_ids: list[uuid.UUID] = []
    if neighbours is not None and w.context:
        plain = sorted(out.values(), key=lambda f: (-(f.score + extras[f.id]), f.id))
        plain_ids = [f.id for f in plain]
        lent = _loans(plain[:w.context_anchors], neighbours, w, share)
        for nid, loan in lent.items():
            f = out.get(nid)
            if f is None:
                out[nid] = Fused(nid, loan, None, None, None)
                extras[nid] = extra(nid)
            else:
                f.score += loan
    for f in out.values():
        f.score += extras[f.id]
    if lent and w.context_hold and neighbours is not None:
        _hold(out, plain_ids, lent, neighbours, conversations, w)
    if boosts:
        _lift(out, boosts)
    return sorted(out.values(), key=lambda f: (-f.score, f.id))


def _lift(out: dict[uuid.UUID, Fused],
          boosts: Mapping[uuid.UUID, tuple[float, Sequence[uuid.UUID]]]) -> None:
    """The librarian facts' rank (``boosts`` of :func:`fuse`): each scores the best of its
    own score and its ranked sources' (as they were before any lift), plus its boost."""
    base = {mid: f.score for mid, f in out.items()}
    for mid, (boost, sources) in boosts.items():
        f = out.get(mid)
        if f is not None:
            f.score = max([base[mid], *(base[s] for s in sources if s in base)]) + boost


def _loans(anchors: Sequence[Fused],
           neighbours: Mapping[uuid.UUID, Sequence[tuple[uuid.UUID, int]]],
           w: FusionWeights, share: float) -> dict[uuid.UUID, float]:
    """The conversation-context loans (module docstring): neighbour id -> the largest
    ``g · λ_o · s_a · decay^(|o| − 1)`` over the ``anchors`` next to it, ``s_a`` the
    anchor's fused score without recency and pin, ``g`` the lexical gate's ``share``."""
    loans: dict[uuid.UUID, float] = {}
    for a in anchors:
        for nid, offset in neighbours.get(a.id, ()):
            d = abs(offset)
            if d == 0 or d > w.context_window:
                continue
            lam = w.context_after if offset > 0 else w.context_before
            loan = share * lam * a.score * w.context_decay ** (d - 1)
            if loan > loans.get(nid, 0.0):
                loans[nid] = loan
    return loans


def _hold(out: dict[uuid.UUID, Fused], plain: Sequence[uuid.UUID],
          lent: Mapping[uuid.UUID, float],
          neighbours: Mapping[uuid.UUID, Sequence[tuple[uuid.UUID, int]]],
          conversations: Mapping[uuid.UUID, Hashable] | None, w: FusionWeights) -> None:
    """The hold of the context stage (module docstring), on the final scores in ``out``.
    The first hit of each conversation in the plain fusion (``plain``, its ids best first)
    may be passed by no memory of another conversation that took a loan (``lent``) while it
    is among the first ``w.context_anchors``, and by at most one below them. The lent
    memories are placed strongest first; one that would pass a first hit with no place left
    to give stays just below it. A memory never in ``plain`` counts as ranked last."""
    if conversations is None:  # what the neighbours say: an anchor and its turns
        conv: dict[uuid.UUID, Hashable] = {}
        for a, near in neighbours.items():
            key = conv.setdefault(a, ("anchor", a))
            for nid, _ in near:
                conv.setdefault(nid, key)
        conversations = conv

    def of(mid: uuid.UUID) -> Hashable:
        c = conversations.get(mid)
        return ("memory", mid) if c is None else ("conversation", c)

    pos = {mid: i for i, mid in enumerate(plain)}
    firsts: list[tuple[int, uuid.UUID, Hashable]] = []  # each conversation's first hit
    seen: set[Hashable] = set()
    for i, mid in enumerate(plain):
        c = of(mid)
        if c not in seen:
            seen.add(c)
            firsts.append((i, mid, c))
    places = {r: (0 if i < w.context_anchors else 1) for i, r, _ in firsts}
    last = len(plain)
    for mid in sorted(lent, key=lambda m: (-out[m].score, m)):  # strongest first
        at, mine = pos.get(mid, last), of(mid)
        others = [r for i, r, c in firsts if i < at and c != mine]
        bound = min((out[r].score for r in others if places[r] <= 0), default=math.inf)
        if out[mid].score >= bound:
            out[mid].score = math.nextafter(bound, -math.inf)
        for r in others:
            if out[r].score < out[mid].score:
                places[r] -= 1


def rerank(fused: list[Fused], texts: dict[uuid.UUID, str], query: str,
           reranker: Reranker, *, depth: int, weight: float = 1.0) -> list[Fused]:
    """Re-order the first ``depth`` of ``fused`` by ``reranker`` (min-max scaled scores,
    mixed with the fused score as ``weight · rerank' + (1 − weight) · fused``); the rest
    keep their order after them. Texts missing from ``texts`` keep their fused score."""
    head, tail = fused[:depth], fused[depth:]
    known = [f for f in head if f.id in texts]
    if not known:
        return fused
    scores = _minmax([float(s) for s in reranker.rerank(query, [texts[f.id] for f in known])])
    by_id = dict(zip((f.id for f in known), scores, strict=True))
    for f in head:
        if f.id in by_id:
            f.score = weight * by_id[f.id] + (1.0 - weight) * f.score
    head.sort(key=lambda f: (-f.score, f.id))
    return head + tail
