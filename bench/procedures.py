"""Benchmark: procedure recall with and without the track-record term, capture cost of the
capture guard, and recall latency over many procedures.

The data set is made here (nothing from ../shared): 20 task families (travel booking,
invoices, calendar, ...), each with paraphrase templates and slot values. Per family,
``--per-family`` procedures (default 10: 200 in all) are captured with questions drawn from
the family's capture templates, each with its own tool chain and a simulated run history
(``--runs`` runs per procedure, default 20) drawn from its true success rate:

* one *proven* procedure (success rate 0.9);
* ``near`` near-duplicates that mostly fail (rate 0.15) and whose questions are the
  closest paraphrases of the queries (the same template as the queries, other slot
  values): similarity alone prefers them;
* the rest with rates uniform in [0.3, 0.7].

Queries: 3 per family, from the query templates (held out from the proven and mixed
procedures' captures; the near-duplicates use them, with other slot values).
Relevance of a procedure to a query: its true success rate if it is of the query's family,
else 0. Reported, in the same run and the same database:

* ``hit@1``: the top hit is the family's proven procedure; ``ndcg@5``: NDCG with gains
  ``2^(4 * rate) - 1`` (Järvelin and Kekäläinen, TOIS 2002), ideal order by true rate;
  for ``track`` (the default weights, MNEMOVAULT_PROCEDURE_*) and ``similarity`` alone
  (track and freshness weights 0);
* ``capture_ms``: capture latency (median, p95) with the default capture guard and with
  the guard off (``capture_detectors=[]``), interleaved, ``--captures`` each;
* ``recall_ms``: recall latency (median, p95) in a tenant of ``--latency-size``
  procedures (default 10,000; ``--quick`` 300).

The embedder is the configured one (local all-MiniLM-L6-v2 by default): paraphrase
similarity is what is measured. JSON on stdout and in ``bench/results/procedures.json``
(``"quick"`` says which size); progress on stderr.

Usage::

    python bench/procedures.py            # full: 200 procedures, 10k for latency
    python bench/procedures.py --quick    # CI: 60 procedures, 300 for latency (< 60 s)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, progress, quiet_logging, stop_embedded

from mnemovault.config import Settings
from mnemovault.vault import MemoryVault

# family: (capture templates, query templates, slot values, tools)
FAMILIES: dict[str, tuple[list[str], list[str], list[str], list[str]]] = {
    "flights": (["book a flight to {x}", "I need a plane ticket to {x}",
                 "find and reserve a flight to {x} for next week"],
                ["get me on a plane to {x}", "arrange air travel to {x}"],
                ["Oslo", "Lisbon", "Tokyo", "Nairobi", "Lima", "Perth"],
                ["search_flights", "compare_fares", "book_flight", "email_itinerary"]),
    "hotels": (["reserve a hotel room in {x}", "book accommodation in {x}",
                "find me somewhere to stay in {x}"],
               ["I need a place to sleep in {x}", "get a hotel in {x} for two nights"],
               ["Rome", "Berlin", "Austin", "Kyoto", "Cairo", "Quebec"],
               ["search_hotels", "check_reviews", "book_room"]),
    "meetings": (["schedule a meeting with {x}", "set up a call with {x} next week",
                  "put a meeting with {x} in the calendar"],
                 ["find a time to meet {x}", "arrange a sync with {x}"],
                 ["the design team", "finance", "the new hire", "legal", "the CTO", "sales"],
                 ["read_calendar", "find_slot", "create_event", "send_invite"]),
    "invoices": (["pay the invoice from {x}", "settle the outstanding bill from {x}",
                  "process the payment for {x}'s invoice"],
                 ["clear what we owe {x}", "send the money for the {x} invoice"],
                 ["the cleaners", "the printer vendor", "AWS", "the caterer", "the landlord",
                  "the law firm"],
                 ["fetch_invoice", "validate_amount", "make_payment", "record_ledger"]),
    "expenses": (["file my expense report for {x}", "submit expenses from {x}",
                  "claim back what I spent on {x}"],
                 ["get reimbursed for {x}", "log my {x} costs for reimbursement"],
                 ["the conference", "the client dinner", "the taxi rides", "the offsite",
                  "the training", "the hardware"],
                 ["scan_receipts", "categorise", "submit_claim"]),
    "refunds": (["refund the customer's order {x}", "issue a refund for order {x}",
                 "give the money back for purchase {x}"],
                ["the buyer wants their money back for {x}", "reverse the charge on {x}"],
                ["A17", "B22", "C93", "D04", "E58", "F61"],
                ["lookup_order", "check_policy", "issue_refund", "notify_customer"]),
    "password": (["reset the password for {x}", "help {x} who is locked out",
                  "unlock the account of {x}"],
                 ["{x} forgot their login", "{x} cannot sign in anymore"],
                 ["the intern", "the support lead", "a contractor", "the auditor",
                  "the designer", "the night shift"],
                 ["verify_identity", "reset_credentials", "send_reset_link"]),
    "deploy": (["deploy the {x} service to production", "ship the latest {x} build",
                "roll out the new version of {x}"],
               ["push {x} live", "release {x} to prod"],
               ["billing", "search", "auth", "gateway", "reports", "notifications"],
               ["run_tests", "build_image", "deploy", "smoke_test"]),
    "bugs": (["triage the bug report about {x}", "investigate the crash in {x}",
              "look into the error users see in {x}"],
             ["figure out why {x} is broken", "debug the failure in {x}"],
             ["checkout", "the login page", "uploads", "the mobile app", "exports", "search"],
             ["read_logs", "reproduce", "open_ticket", "assign_owner"]),
    "sales_report": (["export last month's sales figures for {x}",
                      "make a spreadsheet of sales in {x}",
                      "pull the revenue numbers for {x}"],
                     ["I want the {x} sales data in a sheet", "summarise {x} revenue"],
                     ["Europe", "Asia", "the web shop", "retail", "wholesale", "Q3"],
                     ["query_sales", "aggregate", "to_spreadsheet"]),
    "newsletter": (["send the newsletter about {x}", "email subscribers the {x} update",
                    "publish the mailing on {x}"],
                   ["let our readers know about {x}", "broadcast the {x} news by email"],
                   ["the launch", "the sale", "the holiday hours", "the new office",
                    "the webinar", "pricing"],
                   ["draft_email", "select_list", "schedule_send"]),
    "backup": (["back up the {x} database", "make a snapshot of {x}",
                "save a copy of the {x} data"],
               ["protect the {x} data with a backup", "archive {x} before the upgrade"],
               ["orders", "users", "analytics", "inventory", "payroll", "wiki"],
               ["dump_db", "compress", "upload_archive", "verify_backup"]),
    "translate": (["translate the {x} into German", "get the {x} in French",
                   "localise the {x} for Spain"],
                  ["make the {x} readable for Italian customers",
                   "produce a Japanese version of the {x}"],
                  ["manual", "contract", "website", "brochure", "FAQ", "app strings"],
                  ["extract_text", "machine_translate", "review_translation"]),
    "groceries": (["order groceries for {x}", "buy the food for {x}",
                   "get the shopping delivered for {x}"],
                  ["stock the fridge for {x}", "we need supplies for {x}"],
                  ["the weekend", "the party", "the week", "the team lunch", "the trip",
                   "the holidays"],
                  ["make_list", "search_store", "checkout_cart", "book_delivery"]),
    "weather": (["what's the weather in {x} tomorrow", "forecast for {x} this weekend",
                 "will it rain in {x}"],
                ["should I bring an umbrella in {x}", "how warm will {x} be"],
                ["Paris", "Seattle", "Mumbai", "Oslo", "Sydney", "Denver"],
                ["geocode", "fetch_forecast"]),
    "hiring": (["post a job opening for {x}", "start recruiting a {x}",
                "advertise the {x} position"],
               ["we need to hire a {x}", "find candidates for a {x} role"],
               ["data engineer", "designer", "accountant", "nurse", "driver", "chef"],
               ["write_posting", "publish_job", "screen_applicants"]),
    "tickets": (["answer the support ticket about {x}", "reply to the customer asking about "
                 "{x}", "resolve the complaint regarding {x}"],
                ["a client wrote in about {x}", "handle the {x} inquiry"],
                ["late delivery", "a broken item", "billing", "warranty", "sizes", "returns"],
                ["read_ticket", "search_kb", "draft_reply", "close_ticket"]),
    "slides": (["prepare slides for the {x} presentation", "build a deck about {x}",
                "make a slideshow on {x}"],
               ["I have to present {x} tomorrow", "put together a talk about {x}"],
               ["quarterly results", "the roadmap", "onboarding", "security", "the budget",
                "hiring"],
               ["outline", "generate_slides", "add_charts"]),
    "contracts": (["review the contract with {x}", "check the agreement from {x} for risks",
                   "go over {x}'s terms"],
                  ["is the {x} deal safe to sign", "spot problems in the {x} paperwork"],
                  ["the supplier", "the landlord", "the agency", "the partner", "the bank",
                   "the reseller"],
                  ["extract_clauses", "flag_risks", "summarise"]),
    "files": (["organise the files in {x}", "clean up the {x} folder",
               "sort the documents in {x}"],
              ["tidy {x}", "the {x} directory is a mess"],
              ["Downloads", "the shared drive", "Projects", "Invoices", "Photos", "Archive"],
              ["list_files", "classify", "move_files", "dedupe"]),
}


class Proc:
    def __init__(self, family: str, rate: float, kind: str) -> None:
        self.family, self.rate, self.kind = family, rate, kind
        self.id: uuid.UUID | None = None


def _steps(tools: list[str], rng: random.Random, variant: int) -> dict[str, Any]:
    chain = list(tools)
    if variant % 2:  # variants: a different tool chain per procedure
        chain = [*chain[:max(1, len(chain) - 1)], f"{chain[-1]}_v{variant}"]
    nodes = [{"id": f"s{i}", "tool": t, "args": ["input"]} for i, t in enumerate(chain)]
    edges = [{"source": f"s{i}", "target": f"s{i + 1}"} for i in range(len(chain) - 1)]
    return {"nodes": nodes, "edges": edges}


def build(vault: MemoryVault, tenant: str, per_family: int, runs: int, near: int,
          rng: random.Random) -> tuple[list[Proc], list[tuple[str, str]]]:
    who = vault.principal(tenant)
    procs: list[Proc] = []
    queries: list[tuple[str, str]] = []
    for fam, (caps, qs, slots, tools) in FAMILIES.items():
        for qt in qs:  # held-out templates: 3 queries per family
            queries.append((fam, qt.format(x=rng.choice(slots))))
        queries.append((fam, qs[0].format(x=rng.choice(slots))))
        for j in range(per_family):
            if j == 0:
                p, question = Proc(fam, 0.9, "proven"), caps[rng.randrange(len(caps))]
            elif j <= near:  # nearest to the queries: a held-out template, failing
                p, question = Proc(fam, 0.15, "near_duplicate"), qs[rng.randrange(len(qs))]
            else:
                p, question = Proc(fam, rng.uniform(0.3, 0.7), "mixed"), rng.choice(caps)
            r = vault.procedures.capture({"question": question.format(x=rng.choice(slots)),
                                          "scope": "bench", "steps": _steps(tools, rng, j)},
                                         principal=who, trigger="bench")
            p.id = r.id
            procs.append(p)
    progress(f"[procedures] captured {len(procs)}; recording {runs} runs each")
    for p in procs:
        assert p.id is not None
        for _ in range(runs):
            vault.procedures.record_run(p.id, {"verdict": "success" if rng.random() < p.rate
                                               else "failure", "duration_ms": 100},
                                        principal=who, trigger="bench")
    return procs, queries


def evaluate(vault: MemoryVault, tenant: str, procs: list[Proc],
             queries: list[tuple[str, str]]) -> dict[str, float]:
    who = vault.principal(tenant)
    by_id = {p.id: p for p in procs}
    proven = {p.family: p.id for p in procs if p.kind == "proven"}
    hits, ndcgs = [], []
    for fam, q in queries:
        got = vault.procedures.recall(q, scope="bench", k=5, principal=who)
        ids = [h.procedure.id for h in got]
        hits.append(1.0 if ids and ids[0] == proven[fam] else 0.0)

        def gain(pid: Any, fam: str = fam) -> float:
            p = by_id.get(pid)
            return (2 ** (4 * p.rate) - 1) if p is not None and p.family == fam else 0.0

        dcg = sum(gain(pid) / math.log2(i + 2) for i, pid in enumerate(ids))
        ideal = sorted((gain(p.id) for p in procs if p.family == fam), reverse=True)[:5]
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
        ndcgs.append(dcg / idcg if idcg else 0.0)
    return {"hit@1": round(statistics.mean(hits), 4), "ndcg@5": round(statistics.mean(ndcgs), 4),
            "queries": len(queries)}


def _ms(values: list[float]) -> dict[str, float]:
    s = sorted(values)
    return {"median": round(statistics.median(s), 2),
            "p95": round(s[min(len(s) - 1, math.ceil(0.95 * len(s)) - 1)], 2), "n": len(s)}


def capture_cost(vault: MemoryVault, tenant: str, n: int, rng: random.Random) -> dict[str, Any]:
    who = vault.principal(tenant)
    base = vault.settings
    off = base.model_copy(update={"capture_detectors": []})
    times: dict[str, list[float]] = {"guard": [], "no_guard": []}
    fams = list(FAMILIES.values())
    for i in range(n * 2 + 4):
        caps, _, slots, tools = fams[i % len(fams)]
        mode = "guard" if i % 2 else "no_guard"
        vault.settings = base if mode == "guard" else off
        item = {"question": rng.choice(caps).format(x=rng.choice(slots)), "scope": "cap",
                "steps": _steps(tools, rng, i), "provenance": {"tags": ["bench"]}}
        t = time.perf_counter()
        vault.procedures.capture(item, principal=who, trigger="bench")
        if i >= 4:  # warm-up
            times[mode].append((time.perf_counter() - t) * 1000)
    vault.settings = base
    out: dict[str, Any] = {m: _ms(v) for m, v in times.items()}
    out["guard_added_ms_median"] = round(out["guard"]["median"] - out["no_guard"]["median"], 2)
    out["detectors"] = list(base.capture_detectors)
    return out


def recall_latency(vault: MemoryVault, tenant: str, size: int, queries: int,
                   rng: random.Random) -> dict[str, Any]:
    who = vault.principal(tenant)
    fams = list(FAMILIES.values())
    t0 = time.perf_counter()
    for i in range(size):
        caps, _, slots, tools = fams[i % len(fams)]
        vault.procedures.capture({"question": f"{rng.choice(caps).format(x=rng.choice(slots))}"
                                              f" (case {i})", "scope": "big",
                                  "steps": _steps(tools, rng, i)}, principal=who,
                                 trigger="bench")
        if i and i % 1000 == 0:
            progress(f"[procedures] latency set: {i}/{size}")
    build_s = time.perf_counter() - t0
    times = []
    for i in range(queries + 3):
        _, qs, slots, _ = fams[i % len(fams)]
        q = rng.choice(qs).format(x=rng.choice(slots))
        t = time.perf_counter()
        vault.procedures.recall(q, scope="big", k=5, principal=who)
        if i >= 3:
            times.append((time.perf_counter() - t) * 1000)
    return {"procedures": size, "build_seconds": round(build_s, 1), **_ms(times)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--per-family", type=int, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--near", type=int, default=2)
    ap.add_argument("--captures", type=int, default=None)
    ap.add_argument("--latency-size", type=int, default=None)
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    quiet_logging()
    per_family = a.per_family or (3 if a.quick else 10)
    runs = a.runs or (6 if a.quick else 20)
    captures = a.captures or (20 if a.quick else 100)
    size = a.latency_size or (300 if a.quick else 10_000)
    near = min(a.near, per_family - 1)
    rng = random.Random(a.seed)
    data_dir = Path(tempfile.mkdtemp(prefix="mv-bench-proc-"))
    started = time.perf_counter()
    try:
        vault = MemoryVault.open(Settings(data_dir=data_dir, database_url=None,
                                          audit_jsonl=False))
        try:
            tenant = "bench-proc"
            vault.ensure_tenant(tenant)
            procs, queries = build(vault, tenant, per_family, runs, near, rng)
            track = evaluate(vault, tenant, procs, queries)
            base = vault.settings
            vault.settings = base.model_copy(update={"procedure_track_weight": 0.0,
                                                     "procedure_freshness_weight": 0.0})
            similarity = evaluate(vault, tenant, procs, queries)
            sweep = {}
            for wt in (0.3, 0.5, 1.0, 2.0):  # the track-record weight, same set and queries
                vault.settings = base.model_copy(update={"procedure_track_weight": wt})
                sweep[str(wt)] = evaluate(vault, tenant, procs, queries)
            vault.settings = base
            progress(f"[procedures] track {track} / similarity alone {similarity} / "
                     f"sweep {sweep}")
            cap = capture_cost(vault, tenant, captures, rng)
            progress(f"[procedures] capture {cap}")
            lat = recall_latency(vault, "bench-big", size, 30 if a.quick else 100, rng)
            progress(f"[procedures] recall latency {lat}")
        finally:
            vault.close()
            stop_embedded(data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    s = vault.settings
    report = {
        "benchmark": "procedures", "quick": a.quick,
        "set": {"families": len(FAMILIES), "procedures": len(procs), "per_family": per_family,
                "near_duplicates_per_family": near, "runs_per_procedure": runs,
                "seed": a.seed},
        "weights": {"similarity": s.procedure_similarity_weight,
                    "track": s.procedure_track_weight, "freshness": s.procedure_freshness_weight,
                    "prior": [s.procedure_prior_successes, s.procedure_prior_failures]},
        "recall": {"track": track, "similarity_alone": similarity,
                   "hit@1_ratio": round(track["hit@1"] / similarity["hit@1"], 3)
                   if similarity["hit@1"] else None,
                   "ndcg@5_ratio": round(track["ndcg@5"] / similarity["ndcg@5"], 3)
                   if similarity["ndcg@5"] else None,
                   "track_weight_sweep": sweep},
        "capture_ms": cap, "recall_ms": lat, "embedder": s.embedder,
        "seconds": round(time.perf_counter() - started, 1), "environment": environment(),
    }
    text = json.dumps(report, indent=2)
    print(text)
    out = a.out or Path(__file__).resolve().parent / "results" / "procedures.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
