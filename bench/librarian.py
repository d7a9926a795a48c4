#!/usr/bin/env python
"""The librarian (issue 23): recall@k with its facts alongside the episodes against the
episodes alone, in the same run and the same database, and what a run costs.

Data: LoCoMo (every turn an episode, subject = speaker, ``dia_id`` in provenance; questions
and evidence normalised as ``bench/locomo_recall.py`` does) and MADial-Bench (every memory
an episode dated by its ``time``, subject = the person it is about (its first word),
``doc`` in provenance; both query protocols of ``bench/recall_eval.py``: the dialogue
before the test turn, and its last user turn).

Each set is imported into a fresh embedded PostgreSQL and every question is recalled
(``before_librarian``); the librarian then runs over it (offline, extractive: no model),
and every question is recalled twice more in the same database: with
``types=["episode"]`` (``episodes_alone``: the facts are left out of the ranking, but they
are in the scope's BM25 statistics) and with no type filter (``with_facts``: facts
alongside). A hit that is a fact stands for its lineage sources.

Metrics, per question, averaged per group (LoCoMo: categories 1-5, 1-4 and each; MADial:
each protocol), k = 5 and 10:

- ``recall``: the fraction of the gold ids among the top k hits, a fact counting for every
  one of its sources (the issue's rule: a fact is a hit when one of its sources is the
  evidence);
- ``recall_slots``: the same with each fact expanded into its sources in place and the list
  cut at k ids: a fact with six sources uses six of the k slots (no credit for size).

Threshold choice (``--dev``): LoCoMo conversation 1 is imported into one tenant per
value of ``librarian_topic_similarity`` in ``--topic-grid``; the value with the best
``recall@10`` (categories 1-5) there is used for the report, which is on conversations
2-10 (held out) and MADial. ``--quick`` (CI): no threshold choice; LoCoMo conversation 1
(its first 120 turns and the questions they answer); MADial is left out.

Cost: librarian seconds per 1,000 episodes (planning and writing, one run over the
imported set), offline.

Usage::

    python bench/librarian.py --out bench/results/librarian.json       # dev + report
    python bench/librarian.py --quick --out bench/results/librarian_quick.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, quiet_logging, stop_embedded
from locomo_recall import GROUPS, normalise_questions

# ../shared next to the repository (a worktree sits one level deeper: then /work/shared)
SHARED = next((d for d in (Path(__file__).resolve().parents[n] / "shared" / "datasets"
                           for n in (2, 3)) if d.is_dir()),
              Path(__file__).resolve().parents[2] / "shared" / "datasets")
KS = (5, 10)
QUICK_TURNS = 120
_T0 = time.perf_counter()


def progress(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# -- data -------------------------------------------------------------------------------------

def locomo(path: Path, convs: slice, questions: int | None) -> tuple[list[Any], list[dict]]:
    """(episodes to remember, questions ``{scope, text, gold, group}``) of the conversations
    ``convs``."""
    from mnemovault.importers import read_file

    samples = json.loads(path.read_text(encoding="utf-8"))[convs]
    scopes = {str(s["sample_id"]) for s in samples}
    qs, _ = normalise_questions(samples)
    if questions:
        qs = qs[:questions]
    items = [it for it in read_file(path, fmt="locomo").items if it.scope in scopes]
    out = [{"scope": q["sample_id"], "text": q["question"], "gold": set(q["evidence"]),
            "group": q["category"]} for q in qs]
    return items, out


def madial(folder: Path, quick: bool) -> tuple[list[dict[str, Any]], list[dict]] | None:
    mem, dia = folder / "MADial-Bench-en-memory.json", folder / "MADial-Bench-en-dialogue.json"
    if not (mem.is_file() and dia.is_file()):
        return None

    def jsonl(p: Path) -> list[dict[str, Any]]:
        return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines() if x.strip()]

    items, known = [], set()
    for m in jsonl(mem):
        (mid, rec), = m.items()
        event = str(rec["event"])
        items.append({"content": event, "scope": "madial", "subject": event.split()[0],
                      "created_at": datetime.fromisoformat(str(rec["time"])).replace(
                          tzinfo=UTC), "provenance": {"doc": str(mid)}})
        known.add(str(mid))
    dialogues = jsonl(dia)[:40] if quick else jsonl(dia)
    qs = []
    for d in dialogues:
        gold = {str(x) for x in d["relevant-id"]} & known
        cut = int(d["test-turn"][0])
        before = [t.strip() for t in d["dialogue"][:cut] if t.strip() not in ("<BOD>", "<EOD>")]
        user = [t for t in before if t.startswith("<") and not t.startswith("<Assistant>")]
        if not gold or not before or not user:
            continue
        qs.append({"scope": "madial", "text": "\n".join(before)[-9000:], "gold": gold,
                   "group": "dialogue"})
        qs.append({"scope": "madial", "text": user[-1], "gold": gold, "group": "last_turn"})
    return items, qs


# -- one measured database --------------------------------------------------------------------

def measure(items: list[Any], questions: list[dict], doc_key: str, *,
            settings_update: dict[str, Any] | None = None, batch: int = 256,
            label: str = "") -> dict[str, Any]:
    """Import, run the librarian, recall every question both ways; the metrics."""
    from mnemovault.config import Settings
    from mnemovault.vault import MemoryVault

    data_dir = Path(tempfile.mkdtemp(prefix="mv-bench-lib-"))
    base = Settings().model_copy(update={"database_url": None, "data_dir": data_dir,
                                         **(settings_update or {})})
    vault = MemoryVault.open(base)
    try:
        t0 = time.perf_counter()
        for i in range(0, len(items), batch):
            vault.remember_many(items[i:i + batch], trigger="import")
        progress(f"{label}: imported {len(items)} episodes in {time.perf_counter() - t0:.0f}s")
        tenant = vault.settings.tenant
        with vault.db.transaction(tenant) as conn:
            # provenance is sealed (0017): selected with its sealed form, the row factory
            # opens it
            rows = conn.execute("SELECT id, key_id, provenance, provenance_sealed FROM memories "
                                "WHERE tenant_id = %s", (tenant,)).fetchall()
        before_doc = {r["id"]: (r["provenance"] or {}).get(doc_key) for r in rows}
        before = [[[before_doc.get(h.memory.id, "")] for h in vault.recall(
            q["text"], scope=q["scope"], k=10, touch=False)] for q in questions]
        progress(f"{label}: recalled {len(questions)} questions before the librarian")
        res = vault.librarian.run()
        per_1000 = res.seconds / max(res.episodes, 1) * 1000
        progress(f"{label}: librarian {res.seconds:.1f}s for {res.episodes} episodes: "
                 f"{res.merged} merged, {res.distilled} distilled facts")
        with vault.db.transaction(tenant) as conn:
            rows = conn.execute(
                "SELECT id, type, key_id, provenance, provenance_sealed, ARRAY(SELECT source_id "
                "FROM memory_lineage l WHERE l.tenant_id = m.tenant_id AND l.memory_id = m.id)"
                " AS sources FROM memories m WHERE tenant_id = %s", (tenant,)).fetchall()
        doc = {r["id"]: (r["provenance"] or {}).get(doc_key) for r in rows
               if r["type"] == "episode"}
        sources = {r["id"]: [doc[s] for s in r["sources"] if s in doc]
                   for r in rows if r["type"] == "fact"}
        ranked: dict[str, list[list[list[str]]]] = {"before": before, "episodes": [],
                                                    "with_facts": []}
        fact_in_top10 = []
        for n, q in enumerate(questions):
            for name, filters in (("episodes", {"types": ["episode"]}), ("with_facts", None)):
                hits = vault.recall(q["text"], scope=q["scope"], k=10, filters=filters,
                                    touch=False)
                ranked[name].append([sources.get(h.memory.id) or [doc.get(h.memory.id, "")]
                                     for h in hits])
                if filters is None:
                    fact_in_top10.append(sum(h.memory.id in sources for h in hits))
            if (n + 1) % 200 == 0:
                progress(f"{label}: recalled {n + 1}/{len(questions)}")
        sizes = [len(s) for s in sources.values()]
        return {
            "episodes": res.episodes, "facts": {"merged": res.merged,
                                               "distilled": res.distilled,
                                               "lineage_mean": round(statistics.fmean(sizes), 2)
                                               if sizes else None,
                                               "lineage_max": max(sizes, default=None)},
            "librarian_seconds": res.seconds, "librarian_timings": res.timings,
            "librarian_seconds_per_1000_episodes": round(per_1000, 3),
            "facts_in_top10_mean": round(statistics.fmean(fact_in_top10), 2)
            if fact_in_top10 else None,
            "ranked": ranked,
        }
    finally:
        vault.close()
        stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


def score(questions: list[dict], ranked: list[list[list[str]]],
          groups: dict[str, tuple[Any, ...]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for g, members in groups.items():
        idx = [i for i, q in enumerate(questions) if q["group"] in members]
        row: dict[str, Any] = {"n": len(idx)}
        for k in KS:
            lineage, slots = [], []
            for i in idx:
                gold = questions[i]["gold"]
                top = ranked[i][:k]
                lineage.append(len(gold & {d for h in top for d in h}) / len(gold))
                flat = list(dict.fromkeys(d for h in ranked[i] for d in h))[:k]
                slots.append(len(gold & set(flat)) / len(gold))
            row[f"recall@{k}"] = round(statistics.fmean(lineage), 4) if idx else None
            row[f"recall_slots@{k}"] = round(statistics.fmean(slots), 4) if idx else None
        out[g] = row
    return out


def compare(questions: list[dict], m: dict[str, Any],
            groups: dict[str, tuple[Any, ...]]) -> dict[str, Any]:
    bf = score(questions, m["ranked"]["before"], groups)
    ep = score(questions, m["ranked"]["episodes"], groups)
    wf = score(questions, m["ranked"]["with_facts"], groups)
    delta = {g: {k: (None if ep[g][k] is None else round(wf[g][k] - ep[g][k], 4))
                 for k in ep[g] if k != "n"} for g in ep}
    return {"before_librarian": bf, "episodes_alone": ep, "with_facts": wf, "delta": delta,
            **{k: v for k, v in m.items() if k != "ranked"}}


# -- main -------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--dev", action="store_true", default=None,
                   help="choose librarian_topic_similarity on LoCoMo conversation 1 "
                        "(default: on unless --quick)")
    p.add_argument("--no-dev", dest="dev", action="store_false")
    p.add_argument("--conversations", default=None,
                   help="LoCoMo conversations to report on, e.g. 2-10 (default: 2-10, or "
                        "1-10 with --no-dev)")
    p.add_argument("--topic-grid", default="0.45,0.6,0.75")
    p.add_argument("--locomo", type=Path, default=SHARED / "locomo" / "locomo10.json")
    p.add_argument("--madial", type=Path, default=SHARED / "madial")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    dev = (not args.quick) if args.dev is None else args.dev
    quiet_logging()
    result: dict[str, Any] = {"benchmark": "librarian", "quick": args.quick,
                              "command": "python bench/librarian.py " + " ".join(
                                  argv if argv is not None else sys.argv[1:]),
                              "environment": environment()}
    locomo_groups: dict[str, tuple[Any, ...]] = dict(GROUPS)
    chosen: dict[str, Any] = {}
    if not args.locomo.is_file():
        result["locomo"] = {"skipped": f"not found: {args.locomo}"}
    else:
        if dev:
            items, qs = locomo(args.locomo, slice(0, 1), None)
            grid = {}
            for t in (float(x) for x in args.topic_grid.split(",")):
                m = measure(items, qs, "dia_id", label=f"dev topic={t}",
                            settings_update={"librarian_topic_similarity": t})
                grid[str(t)] = compare(qs, m, locomo_groups)
            best = max(grid, key=lambda t: grid[t]["with_facts"]["1-5"]["recall@10"])
            chosen = {"librarian_topic_similarity": float(best)}
            result["dev"] = {"conversations": "1", "questions": len(qs),
                             "grid": {t: {"with_facts_recall@10": g["with_facts"]["1-5"]
                                          ["recall@10"], "episodes_recall@10":
                                          g["episodes_alone"]["1-5"]["recall@10"],
                                          "facts": g["facts"]} for t, g in grid.items()},
                             "chosen": chosen}
            progress(f"dev: chose {chosen}")
        lo, hi = (int(x) for x in (args.conversations or ("2-10" if dev else "1-10")).split("-"))
        convs = slice(0, 1) if args.quick else slice(lo - 1, hi)
        items, qs = locomo(args.locomo, convs, None)
        if args.quick:  # the first QUICK_TURNS turns and the questions they answer
            items = items[:QUICK_TURNS]
            have = {str((it.provenance.model_extra or {}).get("dia_id")) for it in items}
            qs = [q for q in qs if q["gold"] <= have]
        m = measure(items, qs, "dia_id", label="locomo", settings_update=chosen)
        result["locomo"] = {"conversations": f"1 (first {QUICK_TURNS} turns)" if args.quick
                            else f"{lo}-{hi}" + (" (held out)" if dev else ""),
                            "questions": len(qs), **compare(qs, m, locomo_groups)}
    mad = None if args.quick else madial(args.madial, args.quick)
    if mad is None:
        result["madial"] = {"skipped": f"not found: {args.madial}"}
    else:
        items, qs = mad
        m = measure(items, qs, "doc", label="madial", settings_update=chosen)
        result["madial"] = {"questions": len(qs), **compare(
            qs, m, {"dialogue": ("dialogue",), "last_turn": ("last_turn",)})}
    result["settings"] = {"chosen": chosen, "defaults_otherwise": True}
    result["seconds_total"] = round(time.perf_counter() - _T0, 1)
    text = json.dumps(result, indent=2, default=str)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
