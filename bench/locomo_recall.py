#!/usr/bin/env python
"""Retrieval recall@k of ``MemoryVault.recall`` on LoCoMo, next to a plain BM25 baseline.

Every turn of every LoCoMo conversation is imported with ``mnemovault.importers.read_file``
and ``MemoryVault.remember_many`` (one memory per turn, scope = the conversation's sample id,
``dia_id`` in provenance) into a fresh embedded PostgreSQL. Each question with at least one
valid evidence id is then recalled in its conversation's scope (k = 20, ``touch=False``).

Metrics, per question, averaged over a group of questions:

- turn recall@k: the fraction of the question's evidence ``dia_id``s among the top k turns;
- session recall@k: the fraction of its evidence sessions (the ``D<n>`` of ``D<n>:<m>``)
  among the sessions of the top k turns.

Groups: categories 1-5, 1-4 (without the adversarial category 5) and each category; k = 1,
5, 10, 20. Variants, each a live ``recall``: ``hybrid`` (the configured fusion with its
conversation-context stage), ``no_context`` (the same fusion, context stage off),
``vector_only`` (text weight 0) and ``text_only`` (vector weight 0), both with the context
stage off (with it a part borrows neighbours and overstates itself); and ``bm25`` (bm25s
over the conversation's turn texts, the content strings the importer passes to
``remember_many``; tokens = lowercase alphanumeric runs, no stop words, no stemming).
``summary`` names where ``hybrid`` is more than 0.01 below the best of its parts
(``vector_only``, ``text_only``, ``no_context``).

Replay check: the inputs of every ``fuse`` call inside each ``hybrid`` recall are recorded;
the last one (the ranking recall returned, with the neighbours and boosts of the context
stage) is re-fused with the real ``fuse`` and its top k compared with the live hits;
``replay_check.mismatches`` counts the questions that differ.

``--sweep`` scores a grid of fusion parameters x candidate counts: reciprocal rank fusion
(vector weight 1, text weight x rrf_k) and, when the fusion has a ``method``, the convex
combination (text share t, vector 1 - t). The candidate lists of each question are fetched
once per candidate count through the real ``recall`` and re-fused with the real
``mnemovault.recall.ranking.fuse`` for every weight setting, without the context stage
(its neighbours depend on the anchors each setting ranks first).

Usage::

    python bench/locomo_recall.py --out bench/results/locomo_recall.json [--sweep]
    python bench/locomo_recall.py --quick          # first conversation, first 50 questions

The JSON result goes to stdout (and ``--out``), progress to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, quiet_logging, stop_embedded

KS = (1, 5, 10, 20)
GROUPS: dict[str, tuple[int, ...]] = {
    "1-5": (1, 2, 3, 4, 5),
    "1-4": (1, 2, 3, 4),
    "1": (1,), "2": (2,), "3": (3,), "4": (4,), "5": (5,),
}
# The category names most LoCoMo evaluations use for the released file's numbers.
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
                  5: "adversarial"}
SWEEP_TEXT_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
SWEEP_RRF_K = (10, 30, 60)
SWEEP_CANDIDATES = (50, 100)
SWEEP_CONVEX_SHARES = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0)
TARGET_TURN_RECALL_AT_10 = 0.65

_DIA_RE = re.compile(r"D:?0*(\d+):0*(\d+)")
_SESSION_RE = re.compile(r"^session_(\d+)$")
_TOKEN_RE = re.compile(r"[a-z0-9]+")

_T0 = time.perf_counter()


def progress(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def default_data_path() -> Path:
    return Path(__file__).resolve().parents[2] / "shared/datasets/locomo/locomo10.json"


# -- evidence normalisation ------------------------------------------------------------------

def conversation_turn_ids(sample: dict[str, Any]) -> list[str]:
    conv = sample["conversation"]
    sessions = sorted((int(m.group(1)), k) for k in conv if (m := _SESSION_RE.match(k)))
    return [t["dia_id"] for _, k in sessions for t in conv[k] or []]


def normalise_questions(samples: list[dict[str, Any]]) -> tuple[list[dict[str, Any]],
                                                                dict[str, Any]]:
    """The questions with at least one valid evidence id, and what normalisation did.

    An evidence entry is split on ``;``, ``,`` and whitespace (``"D8:6; D9:17"``); each
    part is re-formatted as ``D<int>:<int>`` (``D30:05`` -> ``D30:5``, ``D:11:26`` ->
    ``D11:26``); parts that do not parse (``"D"``) or name no turn of the conversation are
    dropped; duplicates are dropped.
    """
    kept: list[dict[str, Any]] = []
    stats: dict[str, Any] = {
        "questions_total": 0, "questions_kept": 0, "questions_dropped": 0,
        "evidence_entries": 0, "evidence_ids_kept": 0,
        "split": [], "reformatted": [], "malformed_dropped": [], "unknown_dropped": [],
        "duplicates_dropped": 0, "dropped_questions": [],
    }
    for sample in samples:
        sid = str(sample["sample_id"])
        known = set(conversation_turn_ids(sample))
        for qi, qa in enumerate(sample.get("qa", [])):
            stats["questions_total"] += 1
            raw = list(qa.get("evidence") or [])
            ids: list[str] = []
            for entry in raw:
                stats["evidence_entries"] += 1
                parts = [p for p in re.split(r"[;,\s]+", str(entry).strip()) if p]
                if len(parts) > 1:
                    stats["split"].append({"sample_id": sid, "question": qi, "entry": entry,
                                           "parts": parts})
                for part in parts:
                    m = _DIA_RE.fullmatch(part)
                    if m is None:
                        stats["malformed_dropped"].append(
                            {"sample_id": sid, "question": qi, "id": part})
                        continue
                    norm = f"D{int(m.group(1))}:{int(m.group(2))}"
                    if norm != part:
                        stats["reformatted"].append(
                            {"sample_id": sid, "question": qi, "id": part, "as": norm})
                    if norm not in known:
                        stats["unknown_dropped"].append(
                            {"sample_id": sid, "question": qi, "id": norm})
                        continue
                    if norm in ids:
                        stats["duplicates_dropped"] += 1
                        continue
                    ids.append(norm)
            if not ids:
                stats["questions_dropped"] += 1
                stats["dropped_questions"].append(
                    {"sample_id": sid, "question": qi, "category": qa.get("category"),
                     "text": qa.get("question"), "evidence": raw})
                continue
            stats["questions_kept"] += 1
            stats["evidence_ids_kept"] += len(ids)
            kept.append({"sample_id": sid, "index": qi, "question": str(qa["question"]),
                         "category": int(qa["category"]), "evidence": ids})
    return kept, stats


# -- metrics ---------------------------------------------------------------------------------

def session_of(dia_id: str) -> str:
    return dia_id.split(":", 1)[0]


def score(questions: list[dict[str, Any]], ranked: list[list[str]]) -> dict[str, Any]:
    """Turn and session recall@k per group. ``ranked[i]`` is the dia_ids of question i's
    hits, best first."""
    out: dict[str, Any] = {"turn_recall": {}, "session_recall": {}}
    for name, cats in GROUPS.items():
        idx = [i for i, q in enumerate(questions) if q["category"] in cats]
        turn: dict[str, Any] = {"n": len(idx)}
        sess: dict[str, Any] = {"n": len(idx)}
        for k in KS:
            if not idx:
                turn[f"@{k}"] = sess[f"@{k}"] = None
                continue
            t_vals, s_vals = [], []
            for i in idx:
                gold = set(questions[i]["evidence"])
                top = ranked[i][:k]
                t_vals.append(len(gold & set(top)) / len(gold))
                gold_s = {session_of(d) for d in gold}
                s_vals.append(len(gold_s & {session_of(d) for d in top}) / len(gold_s))
            turn[f"@{k}"] = round(statistics.fmean(t_vals), 4)
            sess[f"@{k}"] = round(statistics.fmean(s_vals), 4)
        out["turn_recall"][name] = turn
        out["session_recall"][name] = sess
    return out


def latency_summary(seconds: Sequence[float]) -> dict[str, float | int]:
    import numpy as np

    ms = np.asarray(seconds, dtype=float) * 1000.0
    if ms.size == 0:
        return {"n": 0}
    return {"n": int(ms.size), "p50_ms": round(float(np.median(ms)), 2),
            "p95_ms": round(float(np.percentile(ms, 95)), 2),
            "mean_ms": round(float(ms.mean()), 2)}


# -- BM25 baseline ---------------------------------------------------------------------------

def tokenize(text: str) -> list[str]:
    return _TOKEN_RE.findall(text.lower())


class BM25Index:
    """bm25s (Lucene variant, k1=1.5, b=0.75) over one conversation's turn texts."""

    def __init__(self, dia_ids: list[str], texts: list[str]) -> None:
        import bm25s

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs each index at DEBUG
        self.dia_ids = dia_ids
        self.retriever = bm25s.BM25()
        self.retriever.index([tokenize(t) for t in texts], show_progress=False)

    def search(self, query: str, k: int) -> list[str]:
        import numpy as np

        scores = self.retriever.get_scores(tokenize(query))
        order = np.argsort(-scores, kind="stable")[:k]  # ties: conversation order
        return [self.dia_ids[i] for i in order]


# -- the vault -------------------------------------------------------------------------------

class FuseRecorder:
    """Wraps ``mnemovault.recall.service.fuse`` to record the candidate lists of each
    recall, so that other weights can be replayed through the same ``fuse`` without
    querying again."""

    def __init__(self) -> None:
        import mnemovault.recall.service as recall_mod

        self._mod = recall_mod
        self.real = recall_mod.fuse
        self.active = False
        self.calls: list[tuple[Any, ...]] = []
        real = self.real

        def recording_fuse(vector_hits: Any, text_hits: Any, meta: Any, now: Any,
                           w: Any, **kw: Any) -> Any:
            if self.active:
                self.calls.append((list(vector_hits), list(text_hits), dict(meta), now, w,
                                   dict(kw)))
            return real(vector_hits, text_hits, meta, now, w, **kw)

        recall_mod.fuse = recording_fuse

    @contextlib.contextmanager
    def record(self) -> Iterator[list[tuple[Any, ...]]]:
        self.calls = []
        self.active = True
        try:
            yield self.calls
        finally:
            self.active = False






def stored_turns(vault: Any, scopes: list[str]) -> dict[str, list[tuple[Any, str, str]]]:
    """scope -> [(memory id, dia_id, stored content)] in conversation order."""
    out: dict[str, list[tuple[Any, str, str]]] = defaultdict(list)
    with vault.db.transaction(vault.settings.tenant) as conn:
        rows = conn.execute(
            # the sealed columns (0015, 0017): the row factory opens content and provenance
            "SELECT id, scope, content, key_id, content_sealed, provenance, provenance_sealed "
            "FROM memories WHERE scope = ANY(%s) AND status = 'active'", (scopes,)
        ).fetchall()
    for r in rows:
        out[r["scope"]].append((r["id"], (r["provenance"] or {}).get("dia_id"), r["content"]))

    def order(t: tuple[Any, str, str]) -> tuple[int, int]:
        s, n = t[1][1:].split(":")
        return int(s), int(n)

    for turns in out.values():
        turns.sort(key=order)
    return out




def translated_questions(vault: Any, texts: list[str]) -> list[str]:
    """The questions as ``recall`` searches them: rewritten by the vault's read-side
    pseudonymiser (``MemoryVault._translate``) when it has one, else unchanged."""
    translate = getattr(vault, "_translate", None)
    if translate is None:
        return texts
    tenant = vault.settings.tenant
    try:
        with vault.db.transaction(tenant) as conn:
            return [translate(conn, tenant, t) or t for t in texts]
    except TypeError:  # another signature: do not guess
        return texts


def dia_ids_of(hits: list[Any]) -> list[str]:
    return [str(h.memory.provenance.get("dia_id")) for h in hits]


# -- lexical parity --------------------------------------------------------------------------

def lexical_parity(vault: Any, tenant: str, texts: list[str],
                   scopes: list[str]) -> dict[str, Any] | None:
    """How often :func:`mnemovault.recall.terms.analyse` gives exactly PostgreSQL's
    ``to_tsvector('english', ...)`` lexemes with their position counts, over the importer's
    turn strings (``turns``) and the stored, pseudonymised contents (``stored``); with up
    to 20 of the texts that differ and the lexemes (ours, PostgreSQL's) that do. None
    before migration 0014 (no Python analyser)."""
    try:
        from mnemovault.recall import terms
    except ImportError:
        return None
    with vault.db.transaction(tenant) as conn:
        # content_sealed and key_id: the row factory opens the sealed text (0015)
        stored = [r["content"] for r in conn.execute(
            "SELECT id, content, key_id, content_sealed FROM memories WHERE scope = ANY(%s) "
            "ORDER BY id", (scopes,))]
    out: dict[str, Any] = {}
    for name, group in (("turns", texts), ("stored", stored)):
        with vault.db.transaction(tenant) as conn:
            rows = conn.execute(
                "SELECT t, (SELECT coalesce(json_object_agg(lexeme, "
                "coalesce(array_length(positions, 1), 1)), '{}') "
                "FROM unnest(to_tsvector('english', t))) AS pg "
                "FROM unnest(%s::text[]) WITH ORDINALITY u(t, i) ORDER BY i", (group,)
            ).fetchall()
        same, diffs = 0, []
        for r in rows:
            ours = {lx: len(pos) for lx, pos in terms.analyse(r["t"]).items()}
            if ours == r["pg"]:
                same += 1
            elif len(diffs) < 20:
                diffs.append({"text": r["t"][:200],
                              "ours": sorted(set(ours.items()) - set(r["pg"].items())),
                              "postgresql": sorted(set(r["pg"].items()) - set(ours.items()))})
        out[name] = {"texts": len(rows), "identical": same,
                     "share": round(same / max(len(rows), 1), 4), "differing": diffs}
    progress(f"lexical parity with to_tsvector: turns {out['turns']['share']}, stored "
             f"{out['stored']['share']}")
    return out


# -- main ------------------------------------------------------------------------------------

def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=default_data_path(),
                   help="LoCoMo JSON file (default: %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help="first conversation, first 50 questions (for CI)")
    p.add_argument("--conversations", type=int, default=None,
                   help="use only the first N conversations")
    p.add_argument("--questions", type=int, default=None,
                   help="score only the first N questions (after filtering)")
    p.add_argument("--k", type=int, default=20, help="hits per recall (default 20)")
    p.add_argument("--batch", type=int, default=256, help="remember_many batch size")
    p.add_argument("--sweep", action="store_true",
                   help="also score a grid of fusion parameters (turn recall@10)")
    p.add_argument("--text-weights", type=_floats, default=SWEEP_TEXT_WEIGHTS,
                   help="sweep: text weights, comma-separated (default %(default)s)")
    p.add_argument("--rrf-ks", type=_ints, default=SWEEP_RRF_K,
                   help="sweep: rrf_k values (default %(default)s)")
    p.add_argument("--candidate-counts", type=_ints, default=SWEEP_CANDIDATES,
                   help="sweep: recall_candidates values (default %(default)s)")
    p.add_argument("--convex-shares", type=_floats, default=SWEEP_CONVEX_SHARES,
                   help="sweep: text shares t of the convex fusion, vector = 1 - t "
                        "(default %(default)s; only when FusionWeights has a method)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="embedded database directory to use and keep (default: a fresh "
                        "temporary directory, removed afterwards). An existing import of "
                        "the same turns there is reused.")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON result here")
    args = p.parse_args(argv)
    if args.quick:
        args.conversations = args.conversations or 1
        args.questions = args.questions or 50
    if not 1 <= args.k <= 100:
        p.error("--k must be in 1..100")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.data.is_file():
        print(f"locomo_recall: LoCoMo file not found: {args.data}\n"
              "  It is not shipped with mnemovault (CC BY-NC 4.0). Put locomo10.json there "
              "or pass --data PATH."
              + ("\n  --quick: nothing to measure, exit status 0." if args.quick else ""),
              file=sys.stderr)
        if args.quick:  # CI on a machine without ../shared: a skip, not a failure
            print(json.dumps({"benchmark": "locomo_recall", "quick": True, "skipped": True,
                              "reason": f"not found: {args.data}"}))
            return 0
        return 2
    quiet_logging()

    import numpy as np  # noqa: F401  (fail early if the dev extras are missing)

    from mnemovault.config import Settings
    from mnemovault.importers import read_file
    from mnemovault.vault import MemoryVault

    samples = json.loads(args.data.read_text(encoding="utf-8"))
    if args.conversations:
        samples = samples[: args.conversations]
    scopes = [str(s["sample_id"]) for s in samples]
    questions, evidence_stats = normalise_questions(samples)
    if args.questions:
        questions = questions[: args.questions]
    progress(f"{len(samples)} conversations, {evidence_stats['questions_kept']} of "
             f"{evidence_stats['questions_total']} questions have valid evidence; scoring "
             f"{len(questions)}")

    plan = read_file(args.data, fmt="locomo")
    items = [it for it in plan.items if it.scope in set(scopes)]

    keep_dir = args.data_dir is not None
    data_dir = (args.data_dir.resolve() if keep_dir
                else Path(tempfile.mkdtemp(prefix="mv-bench-")))
    base = Settings().model_copy(update={"database_url": None, "data_dir": data_dir})
    result: dict[str, Any] = {
        "benchmark": "locomo_recall", "quick": bool(args.quick), "data": str(args.data),
        "environment": environment(),
    }
    fuse_rec = FuseRecorder()
    t_open = time.perf_counter()
    vault = MemoryVault.open(base)
    try:
        tenant = vault.settings.tenant
        vault.embedder.embed(["warm up"])  # load the model before timing anything
        progress(f"vault open in {time.perf_counter() - t_open:.1f}s at {data_dir} "
                 f"(embedder {vault.embedder.model})")

        # -- import ---------------------------------------------------------------------
        with vault.db.transaction(tenant) as conn:
            have = conn.execute("SELECT count(*) AS n FROM memories WHERE scope = ANY(%s)",
                                (scopes,)).fetchone()["n"]
        if have == len(items):
            progress(f"reusing {have} imported turns in {data_dir}")
            import_info: dict[str, Any] = {"reused": True, "turns": have}
        else:
            if have:
                raise SystemExit(f"locomo_recall: {data_dir} holds {have} turns of these "
                                 f"conversations, expected 0 or {len(items)}; use a fresh "
                                 "--data-dir")
            t0 = time.perf_counter()
            for i in range(0, len(items), args.batch):
                vault.remember_many(items[i: i + args.batch], trigger="import")
                progress(f"imported {min(i + args.batch, len(items))}/{len(items)} turns")
            secs = time.perf_counter() - t0
            import_info = {"reused": False, "turns": len(items), "seconds": round(secs, 2),
                           "turns_per_second": round(len(items) / secs, 1),
                           "batch": args.batch}
        result["import"] = import_info
        result["lexical_parity"] = lexical_parity(vault, tenant, [it.content for it in items],
                                                  scopes)

        turns = stored_turns(vault, scopes)
        id_to_dia = {mid: dia for ts in turns.values() for mid, dia, _ in ts}
        # BM25 reads the turn texts as the importer gives them to remember_many; once the
        # write path rewrites content (pseudonymisation), the stored strings differ: count.
        imported = {(it.scope, str((it.provenance.model_extra or {}).get("dia_id"))):
                    it.content for it in items}
        differs = sum(1 for s, ts in turns.items() for _, d, c in ts
                      if imported.get((s, d)) != c)
        result["corpus"] = {"conversations": len(scopes),
                            "turns": sum(len(t) for t in turns.values()),
                            "questions": len(questions),
                            "stored_content_differs_from_imported": differs}

        # -- BM25 -----------------------------------------------------------------------
        t0 = time.perf_counter()
        bm25 = {s: BM25Index([d for _, d, _ in ts], [imported[(s, d)] for _, d, _ in ts])
                for s, ts in turns.items()}
        bm25_index_s = time.perf_counter() - t0
        bm25_ranked, bm25_times = [], []
        for q in questions:
            t = time.perf_counter()
            bm25_ranked.append(bm25[q["sample_id"]].search(q["question"], args.k))
            bm25_times.append(time.perf_counter() - t)
        # The same over the stored strings, with each question rewritten the way recall
        # rewrites it (placeholders for known personal values); only when they differ.
        bm25_stored_ranked: list[list[str]] | None = None
        if differs:
            stored = {s: BM25Index([d for _, d, _ in ts], [c for _, _, c in ts])
                      for s, ts in turns.items()}
            asked = translated_questions(vault, [q["question"] for q in questions])
            bm25_stored_ranked = [stored[q["sample_id"]].search(text, args.k)
                                  for q, text in zip(questions, asked, strict=True)]
        progress(f"BM25 scored ({bm25_index_s:.1f}s to index)")

        # -- vault variants ---------------------------------------------------------------
        default_w = vault.weights
        default_settings = vault.settings
        # the parts (and no_context) without the conversation-context stage: a part with
        # it would borrow the other side's anchors' neighbours and overstate itself
        plain_w = dataclasses.replace(default_w, context_anchors=0)
        variants = {
            "hybrid": default_w,
            "no_context": plain_w,
            "vector_only": dataclasses.replace(plain_w, text=0.0),
            "text_only": dataclasses.replace(plain_w, vector=0.0),
        }
        assert not any(w.context for n, w in variants.items() if n != "hybrid")
        ranked: dict[str, list[list[str]]] = {v: [] for v in variants}
        times: dict[str, list[float]] = {v: [] for v in variants}
        captured: dict[int, list[tuple[Any, ...] | None]] = {
            default_settings.recall_candidates: []}
        sweep_cands = args.candidate_counts if args.sweep else ()
        for c in sweep_cands:
            captured.setdefault(c, [])
        hybrid_ids: list[list[Any]] = []
        hybrid_calls: list[list[tuple[Any, ...]]] = []  # every fuse call of each hybrid recall
        t_loop = time.perf_counter()
        for qi, q in enumerate(questions):
            for name, w in variants.items():
                vault.weights = w
                with fuse_rec.record() as calls:
                    t = time.perf_counter()
                    hits = vault.recall(q["question"], scope=q["sample_id"], k=args.k,
                                        touch=False)
                    times[name].append(time.perf_counter() - t)
                ranked[name].append(dia_ids_of(hits))
                if name == "hybrid":
                    hybrid_ids.append([h.memory.id for h in hits])
                    hybrid_calls.append(list(calls))
                    # the sweep re-fuses the plain fusion's inputs (the first call)
                    captured[default_settings.recall_candidates].append(
                        calls[0] if calls else None)
            vault.weights = default_w
            for c in sweep_cands:
                if c == default_settings.recall_candidates:
                    continue
                vault.settings = default_settings.model_copy(update={"recall_candidates": c})
                with fuse_rec.record() as calls:
                    vault.recall(q["question"], scope=q["sample_id"], k=args.k, touch=False)
                captured[c].append(calls[0] if calls else None)
                vault.settings = default_settings
            if (qi + 1) % 100 == 0 or qi + 1 == len(questions):
                rate = (qi + 1) / (time.perf_counter() - t_loop)
                progress(f"recalled {qi + 1}/{len(questions)} questions ({rate:.1f} q/s)")

        result["settings"] = {
            f: getattr(default_settings, f) for f in (
                "recall_candidates", "recall_rrf_k", "recall_vector_weight",
                "recall_text_weight", "recall_recency_weight",
                "recall_recency_half_life_days", "hnsw_ef_search")}
        result["settings"]["k"] = args.k
        result["variants"] = {
            **{name: dataclasses.asdict(w) for name, w in variants.items()},
            "context_stage": {
                "recall_context": default_settings.recall_context,
                "recall_context_gap_seconds": default_settings.recall_context_gap_seconds,
                "on_in": [n for n, w in variants.items()
                          if w.context and default_settings.recall_context]},
            "bm25": {"library": "bm25s", "method": "lucene", "k1": 1.5, "b": 0.75,
                     "texts": "the importer's content strings (as passed to remember_many)",
                     "bm25_stored": "the same over the stored content strings, with the "
                                    "question rewritten as recall rewrites it (only when "
                                    "stored content differs from imported)",
                     "tokens": "re.findall('[a-z0-9]+', text.lower())",
                     "stopwords": None, "stemming": None},
        }
        metrics = {name: score(questions, r) for name, r in ranked.items()}
        metrics["bm25"] = score(questions, bm25_ranked)
        if bm25_stored_ranked is not None:
            metrics["bm25_stored"] = score(questions, bm25_stored_ranked)
        result["metrics"] = metrics
        result["latency"] = {name: latency_summary(t) for name, t in times.items()}
        result["latency"]["bm25"] = latency_summary(bm25_times)
        result["latency"]["note"] = ("wall time of one MemoryVault.recall call (query "
                                     "embedding, both candidate queries, fusion, fetch); "
                                     "bm25 = in-process scoring only")

        # -- replay check and sweep ---------------------------------------------------------
        result["replay_check"] = replay_check(fuse_rec, hybrid_calls, hybrid_ids,
                                              default_w, args.k)
        replay_ok = all(c is not None for cs in captured.values() for c in cs)
        if args.sweep:
            result["sweep"] = run_sweep(vault, questions, captured, replay_ok, fuse_rec,
                                        id_to_dia, default_w, default_settings, args.k,
                                        args.text_weights, args.rrf_ks, args.candidate_counts,
                                        args.convex_shares)
    finally:
        vault.close()
        if not keep_dir:
            stop_embedded(data_dir)
            shutil.rmtree(data_dir, ignore_errors=True)

    result["evidence"] = evidence_stats
    h10 = result["metrics"]["hybrid"]["turn_recall"]["1-5"]["@10"]
    b10 = result["metrics"]["bm25"]["turn_recall"]["1-5"]["@10"]
    result["summary"] = {
        "turn_recall@10_cat1-5": {
            name: m["turn_recall"]["1-5"]["@10"] for name, m in result["metrics"].items()},
        "target": TARGET_TURN_RECALL_AT_10,
        "target_met": h10 is not None and h10 >= TARGET_TURN_RECALL_AT_10,
        "hybrid_minus_bm25": None if h10 is None or b10 is None else round(h10 - b10, 4),
    }
    # where the fusion is more than a point below the better of its own parts
    below = []
    for level in ("turn_recall", "session_recall"):
        for k in (1, 5, 10):
            m = result["metrics"]
            fused = m["hybrid"][level]["1-5"][f"@{k}"]
            part = max(m["vector_only"][level]["1-5"][f"@{k}"],
                       m["text_only"][level]["1-5"][f"@{k}"],
                       m["no_context"][level]["1-5"][f"@{k}"])
            if fused is not None and part is not None and fused < part - 0.01:
                below.append({"level": level, "k": k, "fused": fused, "best_part": part})
    result["summary"]["fused_below_best_part_by_more_than_0.01"] = below
    if "sweep" in result:
        best = max(result["sweep"]["grid"], key=lambda r: r["turn_recall@10"])
        result["summary"]["sweep_best"] = best
    result["environment"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    with contextlib.suppress(ImportError):
        import torch

        result["environment"]["torch_threads_at_end"] = torch.get_num_threads()
    result["seconds_total"] = round(time.perf_counter() - _T0, 1)

    text = json.dumps(result, indent=2, default=str)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
        progress(f"wrote {args.out}")
    print(text)
    return 0


def replay_check(fuse_rec: FuseRecorder, calls: list[list[tuple[Any, ...]]],
                 live_ids: list[list[Any]], w: Any, k: int) -> dict[str, Any]:
    """Re-fuse, with the real ``fuse`` and the configured weights ``w``, the inputs of the
    last ``fuse`` call of each live ``hybrid`` recall (the one whose ranking recall
    returned: with the context stage, the second call, with its neighbours and boosts),
    and count the questions whose replayed top ``k`` ids differ from the live hits. Also
    counts recalls that called ``fuse`` other than once or twice (``unexpected_calls``)
    and whether the recorded weights were ``w`` (``weights_differ``)."""
    mismatches = unexpected = differ = 0
    with_context = 0
    examples: list[dict[str, Any]] = []
    for qi, (cs, ids) in enumerate(zip(calls, live_ids, strict=True)):
        if not 1 <= len(cs) <= 2:
            unexpected += 1
            continue
        vh, th, meta, now, rec_w, kw = cs[-1]
        differ += rec_w != w
        with_context += kw.get("neighbours") is not None
        re_ids = [f.id for f in fuse_rec.real(vh, th, meta, now, w, **kw)[:k]]
        if re_ids != list(ids):
            mismatches += 1
            if len(examples) < 5:
                examples.append({"question": qi, "live": [str(x) for x in ids[:5]],
                                 "replayed": [str(x) for x in re_ids[:5]]})
    return {"questions": len(live_ids), "compared": len(live_ids) - unexpected,
            "with_context_stage": with_context, "mismatches": mismatches,
            "unexpected_calls": unexpected, "weights_differ": differ,
            "examples": examples,
            "note": "live top-k ids vs the real fuse re-run on the recorded inputs of the "
                    "call recall used (neighbours and boosts included)"}


def sweep_points(default_w: Any, text_weights: Sequence[float], rrf_ks: Sequence[int],
                 convex_shares: Sequence[float]) -> list[Any]:
    """The fusion weights to score. With a ``method`` field (rrf or convex): reciprocal rank
    fusion at vector weight 1 for every text weight x rrf_k, and the convex combination for
    every text share t (vector 1 - t). Without one (RRF only): the configured vector
    weight with every text weight x rrf_k."""
    fields = {f.name for f in dataclasses.fields(default_w)}
    points = []
    if "method" in fields:
        for rrf_k in rrf_ks:
            for tw in text_weights:
                points.append(dataclasses.replace(default_w, method="rrf", vector=1.0,
                                                  text=tw, rrf_k=rrf_k))
        for t in convex_shares:
            points.append(dataclasses.replace(default_w, method="convex",
                                              vector=round(1.0 - t, 6), text=t))
    else:
        for rrf_k in rrf_ks:
            for tw in text_weights:
                points.append(dataclasses.replace(default_w, text=tw, rrf_k=rrf_k))
    return points


def run_sweep(vault: Any, questions: list[dict[str, Any]],
              captured: dict[int, list[tuple[Any, ...] | None]], replay_ok: bool,
              fuse_rec: FuseRecorder, id_to_dia: dict[Any, str], default_w: Any,
              default_settings: Any, k: int, text_weights: Sequence[float],
              rrf_ks: Sequence[int], candidate_counts: Sequence[int],
              convex_shares: Sequence[float]) -> dict[str, Any]:
    """Turn recall (cat 1-5 unless named) for every point of the grid x candidate count.
    Re-fuses captured candidate lists when the replay check passed, else calls recall once
    per point (slow)."""
    points = sweep_points(default_w, text_weights, rrf_ks, convex_shares)
    grid = []
    mode = "replay" if replay_ok else "live"
    progress(f"sweep: {len(points) * len(candidate_counts)} settings ({mode})")
    for cands in candidate_counts:
        for w in points:
            ranked: list[list[str]] = []
            if replay_ok:
                for cap in captured[cands]:
                    assert cap is not None
                    vh, th, meta, now, _, kw = cap  # the plain fusion's inputs
                    ranked.append([id_to_dia[f.id] for f in
                                   fuse_rec.real(vh, th, meta, now, w,
                                                 text_max=kw.get("text_max"),
                                                 boosts=kw.get("boosts"))[:k]])
            else:
                vault.weights = w
                vault.settings = default_settings.model_copy(
                    update={"recall_candidates": cands})
                for q in questions:
                    hits = vault.recall(q["question"], scope=q["sample_id"], k=k,
                                        touch=False)
                    ranked.append(dia_ids_of(hits))
                vault.weights, vault.settings = default_w, default_settings
            m = score(questions, ranked)
            method = getattr(w, "method", "rrf")
            grid.append({
                "method": method, "vector_weight": w.vector, "text_weight": w.text,
                "rrf_k": w.rrf_k if method == "rrf" else None, "candidates": cands,
                "turn_recall@1": m["turn_recall"]["1-5"]["@1"],
                "turn_recall@5": m["turn_recall"]["1-5"]["@5"],
                "turn_recall@10": m["turn_recall"]["1-5"]["@10"],
                "turn_recall@20": m["turn_recall"]["1-5"]["@20"],
                "turn_recall@10_cat1-4": m["turn_recall"]["1-4"]["@10"],
                "session_recall@10": m["session_recall"]["1-5"]["@10"],
                "is_default": (w == default_w
                               and cands == default_settings.recall_candidates),
            })
    return {"mode": mode, "metric": "turn recall (categories 1-5 unless named)",
            "context_stage": ("off (the plain fusion's candidate lists re-fused)"
                              if replay_ok else "as configured (live recalls)"),
            "grid": grid}


if __name__ == "__main__":
    sys.exit(main())
