"""Ingest throughput on LoCoMo turns: ``remember_many`` and import against embed-only.

Every LoCoMo turn (``../shared/datasets/locomo/locomo10.json``, read with
:func:`mnemovault.importers.read_file`, so each item is exactly what ``mnemovault import``
writes: content ``"speaker: text"``, scope = conversation, subject = speaker, the two
speakers as caller-named entities, ``dia_id`` in provenance) goes through three passes,
batch by batch, alternating (the order of the three rotates every batch so a load change on
the shared machine hits all alike), on the same texts in the same run:

- ``embed``: the default local embedder on the batch's contents, nothing else (the floor);
- ``remember``: ``MemoryVault.remember_many(batch)`` (trigger ``remember``) into tenant
  ``bench-remember``;
- ``import``: ``remember_many(batch, trigger="import")`` into tenant ``bench-import``: what
  ``mnemovault import`` does per batch (cli/_common._import), so the injection sanitiser
  runs too.

Two more embed-only passes, after each batch's remember pass, on what it stored (read back
untimed): ``embed_stored``, the contents as stored (placeholders such as
``{person:p_a970874a8a}``, 13-15 tokens where a first name is one: what the embedder read
before the text view, and still reads on a legacy database), and ``embed_kind_only``, the
same with each placeholder cut to its kind (``person``): what the embedder reads under the
``kinds`` text view (:func:`mnemovault.pii.vault.embedding_view`, every new database).
``text_view`` in the result names the view the vault embedded with.

PII pseudonymisation is on (the default) with the default detectors. Reported: per pass the
memories per second and the median batch time; the ratios remember/embed and import/embed
(rate over rate: 1.0 means the write path costs nothing beyond the embedding); our own work
in ms per memory (pass time minus embed-only time of the same batch); and where that time
goes, step by step (guard, sanitise, pseudonymise, embed inside the write, store, and within
store the memory ``INSERT`` itself, lineage + graph, the audit append). The full run also
times ``cli/_common._import`` end to end on one conversation file (parsing included) next
to embed-only of its texts, and ``--profile`` adds a cProfile summary of the remember pass.

Run:  python bench/ingest.py --quick      (200 turns, < 60 s; CI; skips without LoCoMo)
      python bench/ingest.py              (2000 turns, plus the end-to-end import)
Writes bench/results/ingest.json (``--out`` to change; the quick run writes
bench/results/ingest-quick.json).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RandomEmbedder,
    environment,
    progress,
    quiet_logging,
    skip_without,
    stop_embedded,
)

_T0 = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]
LOCOMO = ROOT.parent / "shared" / "datasets" / "locomo" / "locomo10.json"
PASSES = ("embed", "remember", "import")
STORED = "embed_stored"  # embed-only on the texts as remember stored them (placeholders)
KIND_ONLY = "embed_kind_only"  # the same with each placeholder cut to its kind (what-if)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="200 turns, no what-if pass, no end-to-end import (CI)")
    p.add_argument("--n", type=int, default=None, help="LoCoMo turns (default 2000)")
    p.add_argument("--batch", type=int, default=100, help="memories per remember_many call")
    p.add_argument("--profile", action="store_true", help="cProfile the remember pass")
    p.add_argument("--no-e2e", action="store_true", help="skip the end-to-end import")
    p.add_argument("--random-embedder", action="store_true",
                   help="a stand-in embedder (hash vectors, no model): the write path's own "
                        "work alone, in ms per memory")
    p.add_argument("--locomo", type=Path, default=LOCOMO)
    p.add_argument("--tmp-dir", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    args.n = args.n or (200 if args.quick else 2000)
    if args.out is None:
        args.out = ROOT / "bench" / "results" / (
            "ingest-quick.json" if args.quick else "ingest.json")
    return args


# -- step timing -----------------------------------------------------------------------------

@contextlib.contextmanager
def timed_steps(log: dict[str, float]) -> Iterator[None]:
    """Add the time of each named write-path step to ``log[name]`` (module attributes are
    looked up at call time, so wrapping them here times every call)."""
    from mnemovault.audit import log as audit_log
    from mnemovault.governance import graph, lineage
    from mnemovault.memories import write
    from mnemovault.store import memories as store_memories

    targets: list[tuple[Any, str, str]] = [
        (write, "guard", "guard"), (write, "sanitise", "sanitise"),
        (write, "pseudonymise", "pseudonymise"), (write, "embed", "embed_in_write"),
        (write, "store", "store"), (store_memories, "insert", "store.memory_insert"),
        (store_memories, "insert_many", "store.memory_insert"),
        (store_memories, "supersede", "store.supersede"),
        (store_memories, "supersede_version", "store.supersede"),
        (audit_log, "append_many", "store.audit_append"),
        (lineage, "check_sources", "store.lineage_check"), (lineage, "record", "store.lineage"),
        (graph, "index", "store.graph"), (audit_log, "append", "store.audit_append"),
    ]
    targets = [t for t in targets if hasattr(t[0], t[1])]  # an older tree lacks some
    saved = []

    def wrap(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        def inner(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                log[name] += time.perf_counter() - t
        return inner

    for mod, attr, name in targets:
        fn = getattr(mod, attr)
        saved.append((mod, attr, fn))
        setattr(mod, attr, wrap(fn, name))
    try:
        yield
    finally:
        for mod, attr, fn in saved:
            setattr(mod, attr, fn)


# -- the passes ------------------------------------------------------------------------------

def load_items(path: Path, n: int) -> list[Any]:
    from mnemovault.importers import read_file

    items = read_file(path, fmt="locomo").items
    return items[:n]


def open_vault(data_dir: Path, embedder: Any) -> Any:
    from mnemovault.config import Settings
    from mnemovault.vault import MemoryVault

    settings = Settings().model_copy(update={"database_url": None, "data_dir": data_dir,
                                             "pii_pseudonymize": True})
    return MemoryVault.open(settings, embedder=embedder)


def run_passes(vault: Any, items: list[Any], batch: int, profile: cProfile.Profile | None,
               what_if: bool = True) -> dict[str, Any]:
    embedder = getattr(vault.embedder, "inner", vault.embedder)  # the bare embedder
    who = {"remember": vault.principal("bench-remember"),
           "import": vault.principal("bench-import")}
    for tenant in ("bench-remember", "bench-import"):
        vault.ensure_tenant(tenant)
    # warm-up, untimed: the model, each tenant's vault secret and chain head
    embedder.embed([i.content for i in items[:batch]])
    warm = [{"content": "warm-up", "scope": "warm-up"}]
    vault.remember_many(warm, principal=who["remember"])
    vault.remember_many(warm, principal=who["import"], trigger="import")

    from mnemovault.pii.vault import embedding_view

    seconds: dict[str, list[float]] = {p: [] for p in (*PASSES, STORED, KIND_ONLY)}
    stored_tokens: list[int] = []
    raw_tokens: list[int] = []
    view_tokens: list[int] = []
    tokenizer = _tokenizer(embedder)
    steps: dict[str, dict[str, float]] = {p: defaultdict(float) for p in PASSES[1:]}
    for b, i in enumerate(range(0, len(items), batch)):
        chunk = items[i: i + batch]
        order = PASSES[b % 3:] + PASSES[: b % 3]
        for name in order:
            t = time.perf_counter()
            if name == "embed":
                embedder.embed([it.content for it in chunk])
            else:
                with timed_steps(steps[name]):
                    if profile is not None and name == "remember":
                        profile.enable()
                    receipts = vault.remember_many(
                        chunk, principal=who[name],
                        trigger="import" if name == "import" else "remember")
                    if profile is not None and name == "remember":
                        profile.disable()
            seconds[name].append(time.perf_counter() - t)
            if name == "remember":  # untimed read-back, then embed-only of what was stored
                stored = [vault.get(r.id, principal=who[name]).content for r in receipts]
                t = time.perf_counter()
                embedder.embed(stored)
                seconds[STORED].append(time.perf_counter() - t)
                if what_if:
                    short = [embedding_view(x) for x in stored]
                    t = time.perf_counter()
                    embedder.embed(short)
                    seconds[KIND_ONLY].append(time.perf_counter() - t)
                if tokenizer is not None:
                    stored_tokens.extend(len(tokenizer(x)["input_ids"]) for x in stored)
                    raw_tokens.extend(len(tokenizer(it.content)["input_ids"]) for it in chunk)
                    view_tokens.extend(len(tokenizer(embedding_view(x))["input_ids"])
                                       for x in stored)
        if b % 5 == 4 or i + batch >= len(items):
            progress(f"  {min(i + batch, len(items))}/{len(items)} turns")
    n = len(items)
    emb = np.asarray(seconds["embed"])
    out: dict[str, Any] = {"memories": n, "batch": batch, "batches": len(emb),
                           "text_view": getattr(vault.embedder, "view", None)}
    for name in (*PASSES, STORED, *((KIND_ONLY,) if what_if else ())):
        s = np.asarray(seconds[name])
        out[name] = {"per_s": round(n / float(s.sum()), 1),
                     "batch_ms_p50": round(float(np.median(s)) * 1000, 1)}
    for name in PASSES[1:]:
        s = np.asarray(seconds[name])
        own = float((s - emb).sum()) / n * 1000
        step = steps[name]
        # the embedding inside the write is the embedder's; everything else is ours
        out[name].update({
            "ratio_to_embed": round(float(emb.sum()) / float(s.sum()), 3),
            "ratio_median_of_batches": round(float(np.median(emb / s)), 3),
            "our_ms_per_memory": round(own, 3),
            "steps_ms_per_memory": {k: round(v / n * 1000, 3) for k, v in sorted(step.items())},
        })
    st = np.asarray(seconds[STORED])
    out[STORED].update({
        "ratio_to_embed": round(float(emb.sum()) / float(st.sum()), 3),
        "note": "embed-only on the contents remember stored (read back untimed): the "
                "embedder's cost of the pseudonymised text; remember/embed_stored is the "
                "share of our own work alone"})
    if what_if:
        ko = np.asarray(seconds[KIND_ONLY])
        out[KIND_ONLY]["ratio_to_embed"] = round(float(emb.sum()) / float(ko.sum()), 3)
        out[KIND_ONLY]["note"] = ("embed-only on the stored contents with each placeholder "
                                  "cut to its kind: what the 'kinds' text view embeds")
    out["remember"]["ratio_to_embed_stored"] = round(
        float(st.sum()) / float(np.asarray(seconds["remember"]).sum()), 3)
    if raw_tokens:
        out["tokens_per_text"] = {"raw": round(float(np.mean(raw_tokens)), 1),
                                  "stored": round(float(np.mean(stored_tokens)), 1),
                                  "kinds_view": round(float(np.mean(view_tokens)), 1),
                                  "tokenizer": "the embedder's own"}
    return out


def _tokenizer(embedder: Any) -> Any:
    """The local embedder's tokenizer (counts tokens only), or None for another embedder."""
    inner = embedder.load() if hasattr(embedder, "load") else embedder
    st = getattr(inner, "_st", None)
    return getattr(st, "tokenizer", None)


def e2e_import(vault: Any, path: Path, tmp: Path) -> dict[str, Any]:
    """``cli/_common._import`` of the first conversation (its own file) into the default
    tenant, batch size 128 (the CLI default), next to embed-only of the same texts before
    and after (their mean is the baseline)."""
    from mnemovault.cli._common import _import, _read_import
    from mnemovault.importers import read_file

    data = json.loads(path.read_text(encoding="utf-8"))
    one = tmp / "locomo-conv0.json"
    one.write_text(json.dumps(data[:1]), encoding="utf-8")
    texts = [i.content for i in read_file(one, fmt="locomo").items]

    bare = getattr(vault.embedder, "inner", vault.embedder)

    def embed_only() -> float:
        t = time.perf_counter()
        for k in range(0, len(texts), 128):
            bare.embed(texts[k: k + 128])
        return time.perf_counter() - t

    before = embed_only()
    t = time.perf_counter()
    plan = _read_import(one, scope="default", force_scope=None, fmt="locomo")
    summary = _import(vault, plan, one, batch_size=128, quiet=True)
    elapsed = time.perf_counter() - t
    assert summary["imported"] == len(texts)
    after = embed_only()
    base = (before + after) / 2
    return {"file": "locomo10.json, conversation 0", "memories": len(texts), "batch": 128,
            "import_seconds": round(elapsed, 2), "embed_only_seconds": round(base, 2),
            "ratio_to_embed": round(base / elapsed, 3),
            "note": "cli/_common._import (read_file + remember_many per batch) against "
                    "embed-only before and after (mean); not alternating"}


def profile_summary(prof: cProfile.Profile, top: int = 25) -> list[dict[str, Any]]:
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{Path(file).name}:{line}:{fn}", "calls": nc,
                     "tottime_s": round(tt, 3), "cumtime_s": round(ct, 3)})
    rows.sort(key=lambda r: r["tottime_s"], reverse=True)
    return rows[:top]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    skip_without(args.locomo, benchmark="ingest", quick=args.quick)
    quiet_logging()
    from mnemovault.config import Settings
    from mnemovault.embed import make_embedder

    items = load_items(args.locomo, args.n)
    result: dict[str, Any] = {"benchmark": "ingest", "quick": bool(args.quick),
                              "data": f"LoCoMo turns, first {len(items)} in file order",
                              "environment": environment()}
    t = time.perf_counter()
    embedder = RandomEmbedder() if args.random_embedder else make_embedder(Settings())
    embedder.embed(["warm up"])
    progress(f"embedder {embedder.model} ready in {time.perf_counter() - t:.1f}s")
    result["embedder"] = {"model": embedder.model,
                          "batch_size": getattr(embedder, "batch_size", None)}
    tmp_root = args.tmp_dir or Path(tempfile.gettempdir())
    tmp_root.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(prefix="mv-bench-ingest-", dir=tmp_root))
    prof = cProfile.Profile() if args.profile else None
    try:
        vault = open_vault(data_dir, embedder)
        try:
            progress(f"passes: {len(items)} turns, batches of {args.batch}")
            result["passes"] = run_passes(vault, items, args.batch, prof,
                                          what_if=not args.quick)
            if not args.quick and not args.no_e2e and not args.random_embedder:
                progress("end-to-end import of one conversation")
                result["import_e2e"] = e2e_import(vault, args.locomo, data_dir)
        finally:
            vault.close()
    finally:
        stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
    if prof is not None:
        result["profile_remember_top_tottime"] = profile_summary(prof)
    p = result["passes"]
    progress(f"embed {p['embed']['per_s']}/s, remember {p['remember']['per_s']}/s "
             f"({p['remember']['ratio_to_embed']}x), import {p['import']['per_s']}/s "
             f"({p['import']['ratio_to_embed']}x); embed of stored texts "
             f"{p[STORED]['per_s']}/s ({p[STORED]['ratio_to_embed']}x)")
    result["environment"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["seconds_total"] = round(time.perf_counter() - _T0, 1)
    text = json.dumps(result, indent=2, default=str)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    progress(f"wrote {args.out}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
