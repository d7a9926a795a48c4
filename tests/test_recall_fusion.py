"""The gated fusion, the optional re-ranker and the candidate cap: unit tests on the fusion
itself, then recall against the real PostgreSQL."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from mnemovault.recall import rerankers
from mnemovault.recall.ranking import FusionWeights, fuse, rerank, text_share
from mnemovault.recall.service import HNSW_MAX_CANDIDATES, candidate_count
from mnemovault.vault import MemoryVault

NOW = datetime(2026, 1, 1, tzinfo=UTC)
IDS = [uuid.UUID(int=i + 1) for i in range(6)]
META = {i: (NOW - timedelta(days=400), False) for i in IDS}
VEC = [(IDS[0], 0.62), (IDS[1], 0.55), (IDS[2], 0.40)]     # semantic order 0, 1, 2
TXT = [(IDS[3], 9.0), (IDS[2], 6.0), (IDS[4], 2.0)]        # lexical order 3, 2, 4
W = FusionWeights(recency=0.0)


def _order(w: FusionWeights, text_max: float | None) -> list[uuid.UUID]:
    return [f.id for f in fuse(VEC, TXT, META, NOW, w, text_max=text_max)]


def test_gate_closed_is_the_vector_ranking() -> None:
    # the best text match reaches 9 of an attainable 900: 1% of the query's IDF mass
    order = _order(W, text_max=900.0)
    assert order[:3] == [IDS[0], IDS[1], IDS[2]]
    assert text_share(9.0, 900.0, W) == 0.0


def test_gate_open_is_the_convex_combination() -> None:
    gated = fuse(VEC, TXT, META, NOW, W, text_max=20.0)  # q = 0.45 >= gate_high
    convex = fuse(VEC, TXT, META, NOW, dataclasses.replace(W, method="convex"))
    assert [(f.id, round(f.score, 12)) for f in gated] == \
        [(f.id, round(f.score, 12)) for f in convex]
    assert gated[0].id == IDS[3]  # the strong lexical match leads


def test_gate_interpolates_and_keeps_the_total_weight() -> None:
    w = dataclasses.replace(W, gate_low=0.1, gate_high=0.3)
    assert text_share(9.0, 45.0, w) == pytest.approx(0.5)  # q = 0.2: half way
    fused = {f.id: f.score for f in fuse(VEC, TXT, META, NOW, w, text_max=45.0)}
    wt = w.text * 0.5
    wv = w.vector + w.text - wt
    assert fused[IDS[3]] == pytest.approx(wt * 1.0)        # text only, best text match
    assert fused[IDS[0]] == pytest.approx(wv * 1.0)        # vector only, best vector
    assert fused[IDS[2]] == pytest.approx(wv * 0.0 + wt * 6.0 / 9.0)


def test_one_sided_variants_ignore_the_gate() -> None:
    vec_only = dataclasses.replace(W, text=0.0)
    text_only = dataclasses.replace(W, vector=0.0)
    assert _order(vec_only, 900.0)[:3] == [IDS[0], IDS[1], IDS[2]]
    assert _order(text_only, 900.0)[:3] == [IDS[3], IDS[2], IDS[4]]


def test_without_a_maximum_the_gate_is_open() -> None:
    assert text_share(9.0, None, W) == 1.0
    assert _order(W, None) == _order(W, 20.0)


class Reverse:
    """A re-ranker that prefers what the fusion put last."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def rerank(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        self.seen = list(texts)
        return [float(i) for i in range(len(texts))]


def test_rerank_reorders_the_head_only() -> None:
    fused = fuse(VEC, TXT, META, NOW, W, text_max=20.0)
    before = [f.id for f in fused]
    texts = {f.id: f"text {f.id}" for f in fused}
    r = Reverse()
    after = [f.id for f in rerank(fused, texts, "q", r, depth=3)]
    assert after[:3] == before[:3][::-1]
    assert after[3:] == before[3:]
    assert r.seen == [texts[i] for i in before[:3]]


def test_candidate_count_is_capped_by_the_index() -> None:
    assert candidate_count(100, 10) == 100
    assert candidate_count(5, 20) == 20
    assert candidate_count(50_000, 10) == HNSW_MAX_CANDIDATES == 1000


def test_recall_with_more_candidates_than_hnsw_can_return(vault: MemoryVault,
                                                           tenant: str) -> None:
    who = vault.principal(tenant)
    vault.remember_many([{"content": f"note {i} about the garden", "scope": "cap"}
                         for i in range(12)], principal=who)
    before = vault.settings
    vault.settings = before.model_copy(update={"recall_candidates": 50_000})
    try:
        hits = vault.recall("garden", scope="cap", k=5, principal=who)
    finally:
        vault.settings = before
    assert len(hits) == 5


def test_installed_reranker_orders_recall(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    vault.remember_many([{"content": c, "scope": "rr"} for c in
                         ("the red kite flew high", "a red bicycle", "red wine at dinner")],
                        principal=who)

    class ByLength:
        def rerank(self, query: str, texts: Sequence[str]) -> Sequence[float]:
            return [-float(len(t)) for t in texts]  # shortest first

    rerankers.install(ByLength())
    try:
        hits = vault.recall("red", scope="rr", k=3, principal=who)
    finally:
        rerankers.install(None)
    assert [h.memory.content for h in hits] == ["a red bicycle", "red wine at dinner",
                                                 "the red kite flew high"]


def test_missing_reranker_directory_is_a_config_error(tmp_path: object) -> None:
    from mnemovault.errors import ConfigError

    with pytest.raises(ConfigError, match="recall_reranker"):
        rerankers.CrossEncoderReranker(f"{tmp_path}/nowhere")


def test_the_gate_thresholds_are_settings(vault: MemoryVault) -> None:
    s = vault.settings.model_copy(update={"recall_gate_low": 0.1, "recall_gate_high": 0.3})
    mv = MemoryVault(vault.db, vault.embedder, s, vault.keyring)
    assert (mv.weights.gate_low, mv.weights.gate_high) == (0.1, 0.3)
    assert (vault.weights.gate_low, vault.weights.gate_high) == (0.05, 0.2)  # defaults


# -- conversation context (neighbours in remembered order) ----------------------------------

CTX = FusionWeights(recency=0.0)
# every candidate and neighbour of these tests in one conversation: the loans themselves,
# with no other conversation for the hold to keep in place
ONE = {i: "chat-1" for i in (*IDS, uuid.UUID(int=98), uuid.UUID(int=99))}


def test_context_lends_to_the_turn_after_a_strong_hit() -> None:
    after = uuid.UUID(int=99)  # not a candidate at all
    meta = {**META, after: (NOW - timedelta(days=400), False)}
    plain = fuse(VEC, TXT, meta, NOW, CTX, text_max=20.0)
    top = plain[0]
    fused = fuse(VEC, TXT, meta, NOW, CTX, text_max=20.0,
                 neighbours={top.id: [(after, 1)]}, conversations=ONE)
    got = {f.id: f for f in fused}
    assert got[after].score == pytest.approx(CTX.context_after * top.score)
    assert got[after].vector_rank is None and got[after].text_rank is None
    assert [f.id for f in fused].index(after) < len(plain)  # joined, above the weak tail
    # the others keep their plain scores
    assert {f.id: f.score for f in fused if f.id != after} == \
        pytest.approx({f.id: f.score for f in plain})


def test_context_offsets_decay_and_the_largest_loan_wins() -> None:
    a, b = uuid.UUID(int=98), uuid.UUID(int=99)
    plain = fuse(VEC, TXT, META, NOW, CTX, text_max=20.0)
    s0, s1 = plain[0].score, plain[1].score
    near = {plain[0].id: [(a, -2), (b, 1)], plain[1].id: [(b, -1)]}
    got = {f.id: f.score for f in fuse(VEC, TXT, META, NOW, CTX, text_max=20.0,
                                       neighbours=near, conversations=ONE)}
    assert got[a] == pytest.approx(CTX.context_before * s0 * CTX.context_decay)
    assert got[b] == pytest.approx(max(CTX.context_after * s0, CTX.context_before * s1))


def test_context_only_from_anchors_and_within_the_window() -> None:
    far, late = uuid.UUID(int=98), uuid.UUID(int=99)
    plain = fuse(VEC, TXT, META, NOW, CTX, text_max=20.0)
    w = dataclasses.replace(CTX, context_anchors=1)
    near = {plain[0].id: [(far, CTX.context_window + 1)], plain[1].id: [(late, 1)]}
    ids = {f.id for f in fuse(VEC, TXT, META, NOW, w, text_max=20.0, neighbours=near)}
    assert far not in ids and late not in ids  # beyond the window; not an anchor
    off = dataclasses.replace(CTX, context_after=0.0, context_before=0.0)
    assert not off.context
    assert [(f.id, f.score) for f in fuse(VEC, TXT, META, NOW, off, text_max=20.0,
                                          neighbours={plain[0].id: [(late, 1)]})] == \
        [(f.id, f.score) for f in plain]


def _conversation(vault: MemoryVault, who: object, scope: str,
                  run_id: str | None = "chat-1") -> list[str]:
    turns = [
        "Ben: Did you go anywhere nice over the long weekend?",
        "Ana: What was that place you kept talking about, the one with the lighthouse?",
        "Ben: Oh, Skagen! We drove up on Friday and stayed in a tiny fisherman's cottage.",
        "Ana: Lovely. I mostly stayed home and caught up on reading.",
        "Ben: Work has been hectic, the release slipped again.",
        "Ana: Same here, we have an audit next month.",
    ]
    prov = {"run_id": run_id} if run_id is not None else {}
    vault.remember_many([{"content": t, "scope": scope, "provenance": prov} for t in turns],
                        principal=who)  # type: ignore[arg-type]
    return turns


def test_recall_raises_the_reply_next_to_a_strong_hit(vault: MemoryVault,
                                                      tenant: str) -> None:
    who = vault.principal(tenant)
    turns = _conversation(vault, who, "ctx")
    # filler the query's words also reach, remembered long before (another session)
    old = datetime.now(UTC) - timedelta(days=30)
    vault.remember_many([{"content": f"Note {i}: the lighthouse tour brochure, page {i}.",
                          "scope": "ctx", "created_at": old + timedelta(hours=2 * i)}
                         for i in range(8)], principal=who)
    q = "Which place with a lighthouse did Ana ask about?"
    off = vault.settings.model_copy(update={"recall_context": False})
    plain = MemoryVault(vault.db, vault.embedder, off, vault.keyring)
    # k = 6: the notes are hits of their own (no conversation); the reply to the lead may
    # pass those below the five anchors, not the anchors (the hold, ranking.py)
    before = [h.memory.content for h in plain.recall(q, scope="ctx", k=6, principal=who)]
    after_hits = vault.recall(q, scope="ctx", k=6, principal=who)
    after = [h.memory.content for h in after_hits]
    assert before[0] == after[0] == turns[1]          # the lexical hit
    assert turns[2] not in before                      # its reply: no shared words
    assert turns[2] in after                           # lent by its neighbour
    reply = next(h for h in after_hits if h.memory.content == turns[2])
    assert reply.score < after_hits[0].score
    # the hold: the notes among the plain top five (each a conversation of its own) keep
    # their places above the lent reply
    notes = [c for c in before[:5] if c not in turns]
    assert notes
    assert all(after.index(c) <= before.index(c) < after.index(turns[2]) for c in notes)


def test_context_off_restores_the_plain_ranking(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    _conversation(vault, who, "ctx-off")
    q = "Which place with a lighthouse did Ana ask about?"
    off = vault.settings.model_copy(update={"recall_context": False})
    plain = MemoryVault(vault.db, vault.embedder, off, vault.keyring)
    got = plain.recall(q, scope="ctx-off", k=6, principal=who)
    w0 = dataclasses.replace(vault.weights, context_after=0.0, context_before=0.0)
    zero = MemoryVault(vault.db, vault.embedder, vault.settings, vault.keyring)
    zero.weights = w0
    same = zero.recall(q, scope="ctx-off", k=6, principal=who)
    with_ctx = vault.recall(q, scope="ctx-off", k=6, principal=who)
    # (recency moves by microseconds between the calls)
    assert [h.memory.id for h in same] == [h.memory.id for h in got]
    assert [h.score for h in same] == pytest.approx([h.score for h in got], abs=1e-6)
    assert [h.score for h in with_ctx] != pytest.approx([h.score for h in got], abs=1e-3)


def test_context_neighbours_stop_at_the_time_gap_and_the_filters(vault: MemoryVault,
                                                                  tenant: str) -> None:
    from mnemovault.store.neighbours import adjacent
    from mnemovault.store.search import filter_sql

    who = vault.principal(tenant)
    t0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    run = {"run_id": "r-gap"}
    rows = vault.remember_many(
        [{"content": "first", "scope": "gap", "created_at": t0, "provenance": run},
         {"content": "second", "scope": "gap", "created_at": t0 + timedelta(minutes=5),
          "provenance": run},
         {"content": "third", "scope": "gap", "created_at": t0 + timedelta(minutes=6),
          "provenance": run},
         {"content": "next day", "scope": "gap", "created_at": t0 + timedelta(days=1),
          "provenance": run},
         {"content": "elsewhere", "scope": "gap-other", "created_at": t0 + timedelta(minutes=5),
          "provenance": run}],
        principal=who)
    ids = [m.id for m in rows]
    where, params = filter_sql(tenant, "gap")
    with vault.db.transaction(tenant) as conn:
        got = adjacent(conn, where, params, [(ids[1], t0 + timedelta(minutes=5))], window=2,
                       max_gap=timedelta(minutes=30))
        late = adjacent(conn, where, params, [(ids[3], t0 + timedelta(days=1))], window=2,
                        max_gap=timedelta(minutes=30))
    assert sorted((r["id"], r["offset"]) for r in got) == sorted([(ids[0], -1), (ids[2], 1)])
    assert late == []  # the day after is another session


def test_context_neighbours_are_the_same_conversation_not_the_same_write_time(
        vault: MemoryVault, tenant: str) -> None:
    """A bulk import gives every record one write time: only the turns of one run_id are
    neighbours, and a record without a run_id has none."""
    from mnemovault.store.neighbours import adjacent
    from mnemovault.store.search import filter_sql

    who = vault.principal(tenant)
    t0 = datetime(2025, 3, 2, 12, 0, tzinfo=UTC)
    runs = ["a", "b", "a", None, "b", "a", None]
    rows = vault.remember_many(
        [{"content": f"turn {i}", "scope": "bulk", "created_at": t0,
          "provenance": {"run_id": r} if r else {}} for i, r in enumerate(runs)],
        principal=who)
    ids = [m.id for m in rows]
    where, params = filter_sql(tenant, "bulk")
    gap = timedelta(minutes=30)
    with vault.db.transaction(tenant) as conn:
        a = adjacent(conn, where, params, [(ids[2], t0)], window=2, max_gap=gap)
        b = adjacent(conn, where, params, [(ids[1], t0)], window=2, max_gap=gap)
        none = adjacent(conn, where, params, [(ids[3], t0)], window=2, max_gap=gap)
    assert sorted((r["id"], r["offset"]) for r in a) == sorted([(ids[0], -1), (ids[5], 1)])
    assert [(r["id"], r["offset"]) for r in b] == [(ids[4], 1)]
    assert none == []
    # the run id is compared as a keyed hash: the clear column does not show it
    with vault.db.transaction(tenant) as conn:
        clear = conn.execute("SELECT provenance->>'run_id' AS r FROM memories "
                             "WHERE tenant_id = %s AND id = %s", (tenant, ids[0])).fetchone()
    assert clear["r"].startswith("r1:")
    assert vault.get(ids[0], principal=who).provenance["run_id"] == "a"


def test_context_is_off_for_memories_without_a_conversation(vault: MemoryVault,
                                                            tenant: str) -> None:
    who = vault.principal(tenant)
    _conversation(vault, who, "ctx-none", run_id=None)
    q = "Which place with a lighthouse did Ana ask about?"
    off = vault.settings.model_copy(update={"recall_context": False})
    plain = MemoryVault(vault.db, vault.embedder, off, vault.keyring)
    got = plain.recall(q, scope="ctx-none", k=6, principal=who)
    same = vault.recall(q, scope="ctx-none", k=6, principal=who)
    assert [h.memory.id for h in same] == [h.memory.id for h in got]
    assert [h.score for h in same] == pytest.approx([h.score for h in got], abs=1e-6)


def test_context_loans_follow_the_lexical_gate() -> None:
    after = uuid.UUID(int=99)
    meta = {**META, after: (NOW - timedelta(days=400), False)}
    # gate closed (the best text match covers 1% of the query): ranked by meaning, no loans
    closed = fuse(VEC, TXT, meta, NOW, CTX, text_max=900.0)
    lent = fuse(VEC, TXT, meta, NOW, CTX, text_max=900.0,
                neighbours={closed[0].id: [(after, 1)]})
    assert after not in {f.id for f in lent}
    # half open: half the loan
    w = dataclasses.replace(CTX, gate_low=0.1, gate_high=0.3)
    plain = fuse(VEC, TXT, meta, NOW, w, text_max=45.0)
    half = {f.id: f.score for f in fuse(VEC, TXT, meta, NOW, w, text_max=45.0,
                                        neighbours={plain[0].id: [(after, 1)]},
                                        conversations=ONE)}
    assert half[after] == pytest.approx(0.5 * w.context_after * plain[0].score)


# -- the hold: a loan costs no other conversation its place -------------------------------

def _held(w: FusionWeights, conversations: dict[uuid.UUID, str] | None,
          near: dict[uuid.UUID, list[tuple[uuid.UUID, int]]]) -> list[uuid.UUID]:
    meta = {**META, uuid.UUID(int=98): META[IDS[0]], uuid.UUID(int=99): META[IDS[0]]}
    return [f.id for f in fuse(VEC, TXT, meta, NOW, w, text_max=20.0, neighbours=near,
                               conversations=conversations)]


def test_hold_keeps_a_lent_turn_below_other_conversations_first_hits() -> None:
    # plain order 3, 2, 0, 1, 4 (scores 0.70, 0.47, 0.30, 0.20, 0.16); the lead (3) and 1
    # are turns of "a", 2 and 4 of "b", 0 of "c"; the turn before the lead (98, no
    # candidate) borrows 0.4 * 0.7 = 0.28
    before = uuid.UUID(int=98)
    conv = {IDS[3]: "a", IDS[1]: "a", before: "a", IDS[2]: "b", IDS[4]: "b", IDS[0]: "c"}
    near = {IDS[3]: [(before, -1)]}
    free = _held(dataclasses.replace(CTX, context_hold=False), conv, near)
    assert free == [IDS[3], IDS[2], IDS[0], before, IDS[1], IDS[4]]  # the rule before
    # it passes a turn of its own conversation (1) and a second hit of "b" (4)
    assert _held(CTX, conv, near) == free
    # 4 the first hit of a conversation "d": the lent turn stays below it
    held = _held(CTX, {**conv, IDS[4]: "d"}, near)
    assert held == [IDS[3], IDS[2], IDS[0], IDS[1], IDS[4], before]


def test_hold_lets_the_lead_reply_pass_first_hits_below_the_anchors() -> None:
    after, before = uuid.UUID(int=99), uuid.UUID(int=98)
    conv = {IDS[3]: "a", after: "a", before: "a", IDS[2]: "b", IDS[0]: "c", IDS[1]: "e",
            IDS[4]: "d"}
    near = {IDS[3]: [(before, -1), (after, 1)]}
    w = dataclasses.replace(CTX, context_anchors=2)  # anchors 3 and 2 (plain order)
    got = _held(w, conv, near)
    # the reply (0.6 * 0.7 = 0.42) passes 0 and 1, first hits below the anchors, not 2;
    # the turn before (0.28) stays below every other conversation's first hit
    assert got[:3] == [IDS[3], IDS[2], after]
    assert got.index(before) > got.index(IDS[4])
    # with every memory an anchor, the reply stays below them all
    everyone = _held(CTX, conv, near)
    assert everyone.index(after) > everyone.index(IDS[4])


def test_hold_a_first_hit_below_the_anchors_gives_up_one_place() -> None:
    # plain 3, 2, 0, 1, 4 (0.70, 0.47, 0.30, 0.20, 0.16); anchors 3 ("a") and 2 ("b");
    # 98 the turn before 3 borrows 0.4 * 0.70 = 0.28, 99 the turn before 2 borrows
    # 0.4 * 0.47 = 0.19; 0, 1 and 4 are the first hits of "c", "e" and "d", below the anchors
    before3, before2 = uuid.UUID(int=98), uuid.UUID(int=99)
    conv = {IDS[3]: "a", before3: "a", IDS[2]: "b", before2: "b", IDS[0]: "c", IDS[1]: "e",
            IDS[4]: "d"}
    near = {IDS[3]: [(before3, -1)], IDS[2]: [(before2, -1)]}
    w = dataclasses.replace(CTX, context_anchors=2)
    free = _held(dataclasses.replace(w, context_hold=False), conv, near)
    assert free == [IDS[3], IDS[2], IDS[0], before3, IDS[1], before2, IDS[4]]
    # the stronger loan (98) takes the one place that 1 and 4 each give up; 99 would pass
    # 4 too, with no place left: it stays below it
    assert _held(w, conv, near) == [IDS[3], IDS[2], IDS[0], before3, IDS[1], IDS[4], before2]
    # neither passes an anchor: with three anchors 0 keeps its place above both
    w3 = dataclasses.replace(CTX, context_anchors=3)
    assert _held(w3, conv, near)[:3] == [IDS[3], IDS[2], IDS[0]]


def test_hold_without_conversations_trusts_only_the_neighbour_lists() -> None:
    # no conversation map: a candidate that is no listed neighbour is a conversation of its
    # own, so the lent turn stays below all first hits above it
    before = uuid.UUID(int=98)
    got = _held(CTX, None, {IDS[3]: [(before, -1)]})
    assert got[-1] == before
    # with one conversation for all, the loan is the score (no hold)
    assert _held(CTX, ONE, {IDS[3]: [(before, -1)]}).index(before) == 3
