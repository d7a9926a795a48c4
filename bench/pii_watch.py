"""Benchmark: the PII watch (:mod:`mnemovault.pii.watch`) after one new entity in a tenant
of N memories: how many records it opens and rewrites, and how long it takes, next to a
full scan (every record opened, what a watch without the keyed-term filter must do).

Tenant W (fresh embedded PostgreSQL) holds N episodes in two scopes and ten subjects, each
a sentence of four words from a vocabulary of 5,000 made-up words (so the postings have a
realistic spread); ``HITS`` (20) of them name a person in plain text (``Xavienne
Quortelli``: not known when they were written), and ``HITS`` more hold only the surname
(near misses: one of the two terms). Then the person is passed as an entity on one new
remember, and, timed:

* ``dry_run_s``: ``mv.pii_watch.run(dry_run=True)`` (finds and confirms, writes nothing);
* ``watch_s``: ``mv.pii_watch.run()``: candidates by keyed-term postings, each opened and
  confirmed, the ``HITS`` records rewritten (sealed, re-embedded, re-indexed) with their
  audit row;
* ``second_s``: the next run (nothing pending: the incremental no-op);
* ``full_scan_s``: ``mv.pii_watch.run(full=True, dry_run=True)``: every record opened and run
  through the detectors (the baseline the postings avoid).

Build (untimed; ``--build``): ``real`` sends the rows through ``remember_many`` (batches of
500); ``fast`` writes the same rows in bulk as the write path would store them (content
sealed under the owners' content keys by :class:`mnemovault.pii.sealing.SealWriter`, keyed
terms by :func:`mnemovault.recall.terms.document`, vectors by the same stand-in embedder)
through ``COPY`` into a staging table and one ``INSERT ... SELECT`` (so the postings and
statistics triggers run), the HNSW index dropped for the load and rebuilt once. ``auto``:
``fast`` from 10,000. Embeddings: deterministic random vectors (no model: the bench
measures the watch's search and rewrite, not a model).

Usage::

    python bench/pii_watch.py --out bench/results/pii_watch.json   # N = 100,000 (by hand)
    python bench/pii_watch.py --quick --out bench/results/pii_watch.json  # N = 2,000 (CI)
    python bench/pii_watch.py --sizes 10000,100000

JSON on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import string
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RandomEmbedder, environment, quiet_logging, stop_embedded
from erase import drop_hnsw

from mnemovault.config import Settings
from mnemovault.vault import MemoryVault

HITS = 20
PERSON = "Xavienne Quortelli"
SURNAME = "Quortelli"
BATCH = 500


def say(msg: str) -> None:
    print(f"[pii-watch-bench] {msg}", file=sys.stderr, flush=True)


def rows_of(n: int) -> list[tuple[str, str | None, str]]:
    """(scope, subject, text) of the N episodes (module docstring), deterministic."""
    rnd = random.Random(7)
    vocab = ["".join(rnd.choice(string.ascii_lowercase) for _ in range(rnd.randint(5, 9)))
             for _ in range(5000)]
    hits = set(range(7, n, max(n // HITS, 1))[:HITS])
    near = {i + 1 for i in hits}
    out = []
    for i in range(n):
        w = rnd.sample(vocab, 4)
        if i in hits:
            text = f"{PERSON} asked about the {w[0]} and the {w[1]} on day {i}"
        elif i in near:
            text = f"the {SURNAME} file mentions {w[0]} {w[1]} on day {i}"
        else:
            text = f"note {i}: {w[0]} {w[1]} near the {w[2]} and {w[3]}"
        out.append(("s" if i % 2 else "t", f"subject-{i % 10}" if i % 3 else None, text))
    return out


def real_build(vault: MemoryVault, tenant: str, rows: list[tuple[str, str | None, str]]
               ) -> None:
    who = vault.principal(tenant)
    items = [{"content": t, "scope": s, "subject": sub} for s, sub, t in rows]
    for i in range(0, len(items), BATCH):
        vault.remember_many(items[i:i + BATCH], principal=who)


def fast_build(vault: MemoryVault, tenant: str, rows: list[tuple[str, str | None, str]]
               ) -> None:
    """The rows as the write path stores them, in bulk (module docstring)."""
    from pgvector.psycopg import register_vector
    from psycopg.types.json import Jsonb

    from mnemovault.ids import uuid7
    from mnemovault.recall import terms
    from mnemovault.store import pii as pii_store

    rt = vault.rt
    with vault.db.transaction(tenant) as conn:
        keys = rt.pii.tenant_keys(conn, tenant)
        pii_store.lock_wrap(conn)
        writer = rt.sealer.writer(tenant, keys.fingerprint_key)
        term_key = terms.term_key(keys.fingerprint_key)
        sealed = []
        for scope, subject, text in rows:
            mid = uuid7()
            kid, blob = writer.content(scope, subject, mid, text)
            tsv, n_terms = terms.document(term_key, text)
            sealed.append((tenant, mid, scope, subject, kid, blob, tsv, n_terms, text))
    embedder = RandomEmbedder()
    prov = Jsonb({"tags": []})
    with psycopg.connect(vault.db.url) as conn, conn.transaction():
        register_vector(conn)
        conn.execute("CREATE TEMP TABLE stage (tenant_id text, id uuid, scope text, "
                     "subject_id text, key_id uuid, content_sealed bytea, tsv text, "
                     "tsv_length int, embedding vector) ON COMMIT DROP")
        for i in range(0, len(sealed), 5000):
            chunk = sealed[i:i + 5000]
            vecs = embedder.embed([r[8] for r in chunk])
            with conn.cursor().copy("COPY stage FROM STDIN (FORMAT BINARY)") as cp:
                cp.set_types(["text", "uuid", "text", "text", "uuid", "bytea", "text",
                              "int4", "vector"])
                for k, r in enumerate(chunk):
                    cp.write_row((*r[:8], vecs[k]))
        conn.execute(
            "INSERT INTO memories (tenant_id, id, scope, subject_id, type, content, "
            "provenance, embedding, key_id, content_sealed, tsv, tsv_length, terms_keyed) "
            "SELECT tenant_id, id, scope, subject_id, 'episode', '', %s, embedding, key_id, "
            "content_sealed, tsv::tsvector, tsv_length, true FROM stage ORDER BY id",
            (prov,))
    rt.db.fold_lexical(tenant, wait=True)


def run_size(n: int, mode: str) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix=f"mv-bench-watch-{n}-"))
    data_dir.chmod(0o755)
    vault = MemoryVault.open(Settings(data_dir=data_dir, database_url=None,
                                      audit_jsonl=False), embedder=RandomEmbedder())
    try:
        tenant = f"bw{n}-{uuid.uuid4().hex[:6]}"
        vault.ensure_tenant(tenant)
        who = vault.principal(tenant)
        rows = rows_of(n)
        t = time.perf_counter()
        if mode == "fast":
            with psycopg.connect(vault.db.url, autocommit=True) as conn:
                hnsw = drop_hnsw(conn)
            fast_build(vault, tenant, rows)
            with psycopg.connect(vault.db.url, autocommit=True) as conn:
                conn.execute("SET maintenance_work_mem = '1GB'")
                for d in hnsw:
                    conn.execute(d)  # type: ignore[arg-type]
        else:
            real_build(vault, tenant, rows)
        with psycopg.connect(vault.db.url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        build_s = time.perf_counter() - t
        say(f"N={n}: built ({mode}) in {build_s:.1f} s")

        # the values the vault held before (none of the plain texts above): all covered
        vault.pii_watch.run(principal=who, settle_seconds=0)
        vault.remember(f"{PERSON} called back", scope="s",
                       entities=[{"kind": "person", "value": PERSON}], principal=who)

        t = time.perf_counter()
        dry = vault.pii_watch.run(principal=who, dry_run=True, settle_seconds=0)
        dry_s = time.perf_counter() - t
        t = time.perf_counter()
        rep = vault.pii_watch.run(principal=who, settle_seconds=0)
        watch_s = time.perf_counter() - t
        t = time.perf_counter()
        again = vault.pii_watch.run(principal=who, settle_seconds=0)
        second_s = time.perf_counter() - t
        t = time.perf_counter()
        full = vault.pii_watch.run(principal=who, full=True, dry_run=True, settle_seconds=0)
        full_s = time.perf_counter() - t
        assert len(dry.rewritten) == len(rep.rewritten) == HITS, (dry, rep)
        assert again.rewritten == [] and full.rewritten == [], (again, full)
        got = vault.get(rep.rewritten[0], principal=who)
        assert SURNAME not in got.content and "{person:p_" in got.content
        return {"n": n, "build": mode, "build_s": round(build_s, 2), "hits": HITS,
                "near_misses": HITS, "values": rep.values, "candidates": rep.candidates,
                "opened": rep.opened, "rewritten": len(rep.rewritten),
                "batches": rep.batches, "dry_run_s": round(dry_s, 4),
                "watch_s": round(watch_s, 4), "second_s": round(second_s, 4),
                "second_values": again.values, "full_scan_s": round(full_s, 3),
                "full_scan_opened": full.opened,
                "full_over_watch": round(full_s / watch_s, 1)}
    finally:
        vault.close()
        stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="N = 2,000 (CI, < 60 s)")
    p.add_argument("--sizes", type=str, default=None, help="comma-separated sizes")
    p.add_argument("--build", choices=("auto", "real", "fast"), default="auto")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    a = p.parse_args()
    quiet_logging()
    sizes = ([int(s) for s in a.sizes.split(",")] if a.sizes
             else [2000] if a.quick else [100_000])
    env = environment()
    started = time.perf_counter()
    results = []
    for n in sizes:
        mode = a.build if a.build != "auto" else "fast" if n >= 10_000 else "real"
        say(f"N={n}: building ({mode}), one new entity, watching")
        row = run_size(n, mode)
        say(json.dumps(row))
        results.append(row)
    report = {"bench": "pii_watch", "quick": a.quick,
              "command": " ".join(["python", "bench/pii_watch.py", *sys.argv[1:]]),
              "full_size_command": "python bench/pii_watch.py --out "
                                   "bench/results/pii_watch.json",
              "embedder": "deterministic random vectors (no model)", "environment": env,
              "seconds": round(time.perf_counter() - started, 1), "results": results}
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
