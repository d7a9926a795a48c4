"""Benchmark: erasing a subject (``mv.subjects.erase``) and listing it page by page, next to
a bare DELETE and a bare keyset SELECT of the same rows in the same run; then the scrub.

For each size N (default 1,000, 10,000 and 100,000; ``--quick``: 200) it builds, in tenant
E of a fresh embedded PostgreSQL:

* N episodes of subject ``bench-subject`` in scope ``s``, each with an e-mail address of
  its own (a vault value only it uses: the erase crypto-shreds it) and naming one person
  of a pool of N/10 + 4 known entities (graph nodes and edges, shared);
* N/4 facts of the same subject, each derived from two of its episodes (lineage);
* N/2 episodes of another subject in the same scope naming people of the same pool (they
  stay: the graph cleanup must keep shared nodes, the vault cleanup shared values).

Build (untimed; ``--build``): ``real`` sends the rows through the real write path
(``remember_many``: detectors, placeholders, vault, graph, audit) in batches of 500,
embedded by a deterministic random-vector stand-in (no model: the bench measures erasing,
not embedding). ``fast`` writes the same rows in bulk (binary ``COPY``) with everything
the write path would compute precomputed in Python by the product's own recipes: each
value's placeholder (``TenantKeys.candidate``), fingerprint, token count and first-token
digest (``KnownEntityIndex.entity``, identity from the detectors), its own DEK, the value
sealed under it and the DEK wrapped under the KEK (so every vault value is real and
revealable); the same memories (contents with those placeholders, same ids in the same
order, ``uuid7``), lineage, graph nodes, edges and their support rows. Not written by
``fast``: the ``WRITE`` audit rows (the erase appends to the audit chain either way). The
HNSW index is dropped for the bulk load and rebuilt once before anything is timed (the
same index; maintaining it row by row is most of the real build's time at 100k).
``auto`` (the default): ``fast`` for sizes from 10,000, ``real`` below (``--quick`` and
1,000 stay on the real path). Each result row says which build it used.

Tenant B is a copy of E made in SQL (every table the erase touches, ``tenant_id``
replaced; untimed), so both have the same table shape. Then, timed:

* ``list``: every page (limit 100) of ``mv.subjects.list`` of the subject in E;
  ``list_bare``: the same pages by a plain keyset ``SELECT`` (``subject_id``, ``id >
  cursor``, ``LIMIT 100``) in B;
* ``erase``: ``mv.subjects.erase`` in E: one transaction (walk and lock, lineage, graph
  support, the memories, orphan nodes and edges, shredding, the ``ERASE`` audit row, the
  ledger row) and the signed receipt;
* ``bare``: one transaction of plain DELETEs (and the shredding UPDATE) in B of exactly the
  rows the erase removed in E (ids, nodes, edges, placeholders computed beforehand,
  untimed): the least any erase must do;
* ``scrub``: :func:`mnemovault.governance.scrub.scrub` after both (every table of the
  database rewritten, WAL retired), with the bytes it rewrote.

Sizes up to 1,000 are repeated ``--repeat`` times (median); larger ones run once. Each size
runs in a database of its own, so the scrub rewrites that size's tables only.

Usage::

    python bench/erase.py --out bench/results/erase.json   # 1000, 10000, 100000 (by hand)
    python bench/erase.py --quick                          # 200 (CI, < 60 s)
    python bench/erase.py --sizes 1000,10000 --repeat 3
    python bench/erase.py --sizes 100000 --merge bench/results/erase.json  # add one size

JSON on stdout; progress on stderr. Needs nothing from ``../shared``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RandomEmbedder, environment, quiet_logging, stop_embedded

from mnemovault.config import Settings
from mnemovault.governance.scrub import scrub
from mnemovault.vault import MemoryVault

BATCH = 500
PAGE = 100
SUBJECT = "bench-subject"
OTHER = "bench-other"
# every table the erase touches, parents first (foreign keys)
COPY_TABLES = ("memories", "memory_lineage", "graph_nodes", "graph_node_support",
               "graph_edges", "graph_edge_support", "pii_values", "pii_deks")


def say(msg: str) -> None:
    print(f"[erase-bench] {msg}", file=sys.stderr, flush=True)


def build(vault: MemoryVault, tenant: str, n: int) -> None:
    """Tenant E of the module docstring."""
    vault.ensure_tenant(tenant)
    who = vault.principal(tenant)
    tag = tenant.rsplit("-", 1)[-1]
    people = [f"Person{tag}x{i:05d} Surname{i:05d}" for i in range(n // 10 + 4)]
    pool = [{"content": "pool", "scope": "pool",
             "entities": [{"kind": "person", "value": p} for p in people[i:i + 100]]}
            for i in range(0, len(people), 100)]
    for i in range(0, len(pool), 20):
        vault.remember_many(pool[i:i + 20], principal=who)
    episodes: list[uuid.UUID] = []
    items = [{"content": f"{people[i % len(people)]} wrote from mail{tag}.{i}@example.org "
                         f"about topic {i}", "scope": "s", "subject": SUBJECT}
             for i in range(n)]
    for i in range(0, n, BATCH):
        episodes += [r.id for r in vault.remember_many(items[i:i + BATCH], principal=who)]
    facts = [{"content": f"fact {j}: topics {2 * j} and {2 * j + 1} are related",
              "scope": "s", "subject": SUBJECT, "type": "fact",
              "derived_from": [str(episodes[2 * j]), str(episodes[2 * j + 1])]}
             for j in range(n // 4)]
    others = [{"content": f"{people[(j * 3) % len(people)]} and "
                          f"{people[(j * 7 + 1) % len(people)]} still talk",
               "scope": "s", "subject": OTHER} for j in range(max(n // 2, 1))]
    for batch in (facts, others):
        for i in range(0, len(batch), BATCH):
            vault.remember_many(batch[i:i + BATCH], principal=who)


def fast_build(vault: MemoryVault, tenant: str, n: int) -> None:
    """Tenant E of the module docstring in bulk (``--build fast``): the rows :func:`build`
    writes, with the write path's values precomputed (module docstring)."""
    from psycopg.types.json import Jsonb

    from mnemovault.ids import uuid7
    from mnemovault.pii.crypto import dek_aad, seal, value_aad
    from mnemovault.pii.detect import KnownEntityIndex, detect_all

    rt = vault.rt
    vault.ensure_tenant(tenant)
    tag = tenant.rsplit("-", 1)[-1]
    people = [f"Person{tag}x{i:05d} Surname{i:05d}" for i in range(n // 10 + 4)]
    emails = [f"mail{tag}.{i}@example.org" for i in range(n)]
    with vault.db.transaction(tenant) as conn:
        keys = rt.pii.tenant_keys(conn, tenant)
    index = KnownEntityIndex(keys.fingerprint_key)
    kek_v, kek = rt.pii.keyring.current, rt.pii.keyring.current_key
    values: list[tuple[Any, ...]] = []
    deks: list[tuple[Any, ...]] = []
    taken: set[str] = set()

    def vault_value(kind: str, value: str, identity: str | None) -> str:
        counter = 0
        while (ph := keys.candidate(kind, value, counter, identity=identity)) in taken:
            counter += 1
        taken.add(ph)
        entity = index.entity(kind, value, identity=identity)
        dek = secrets.token_bytes(32)
        sealed = seal(dek, value.encode("utf-8"), value_aad(tenant, ph))
        wrapped = seal(kek, dek, dek_aad(tenant, ph, kek_v))
        values.append((tenant, ph, kind, entity.fingerprint, entity.n_tokens, entity.head,
                       sealed.nonce, sealed.ciphertext))
        deks.append((tenant, ph, kek_v, wrapped.nonce, wrapped.ciphertext))
        return ph

    person_ph = [vault_value("person", p, None) for p in people]  # caller-named entities
    email_ph = []
    for e in emails:  # detected: the identity the email detector gives
        found = detect_all(e, rt.detectors)
        assert len(found) == 1 and found[0].kind == "email", e
        email_ph.append(vault_value("email", e, found[0].identity))
    prov = Jsonb({"tags": []})
    mems: list[tuple[Any, ...]] = [(tenant, uuid7(), "pool", None, "episode", "pool", prov)
                                   for _ in range(0, len(people), 100)]
    nodes: dict[str, str] = {}
    node_support: list[tuple[Any, ...]] = []
    edges: set[tuple[str, str]] = set()
    edge_support: list[tuple[Any, ...]] = []

    def mentions(mid: Any, phs: list[str]) -> None:
        phs = sorted(set(phs))
        for ph in phs:
            nodes[ph] = ph[1:ph.index(":")]
            node_support.append((tenant, ph, mid))
        for a in range(len(phs)):
            for b in range(a + 1, len(phs)):
                edges.add((phs[a], phs[b]))
                edge_support.append((tenant, phs[a], phs[b], mid))

    episodes = []
    for i in range(n):
        mid, person = uuid7(), person_ph[i % len(people)]
        episodes.append(mid)
        mems.append((tenant, mid, "s", SUBJECT, "episode",
                     f"{person} wrote from {email_ph[i]} about topic {i}", prov))
        mentions(mid, [person, email_ph[i]])
    lineage = []
    for j in range(n // 4):
        mid = uuid7()
        mems.append((tenant, mid, "s", SUBJECT, "fact",
                     f"fact {j}: topics {2 * j} and {2 * j + 1} are related", prov))
        lineage += [(tenant, mid, episodes[2 * j]), (tenant, mid, episodes[2 * j + 1])]
    for j in range(max(n // 2, 1)):
        mid = uuid7()
        a, b = person_ph[(j * 3) % len(people)], person_ph[(j * 7 + 1) % len(people)]
        mems.append((tenant, mid, "s", OTHER, "episode", f"{a} and {b} still talk", prov))
        mentions(mid, [a, b])
    embedder = RandomEmbedder()

    def copy(conn: psycopg.Connection[Any], table: str, cols: str, types: list[str],
             rows: list[tuple[Any, ...]]) -> None:
        with conn.cursor().copy(f"COPY {table} ({cols}) FROM STDIN "  # type: ignore[arg-type]
                                "(FORMAT BINARY)") as cp:
            cp.set_types(types)
            for r in rows:
                cp.write_row(r)

    from pgvector.psycopg import register_vector

    # as the owner: COPY does not run under row-level security
    with psycopg.connect(vault.db.url) as conn, conn.transaction():
        register_vector(conn)
        copy(conn, "pii_values", "tenant_id, placeholder, kind, fingerprint, ntokens, head, "
             "nonce, ciphertext", ["text", "text", "text", "bytea", "int4", "bytea", "bytea",
                                   "bytea"], values)
        copy(conn, "pii_deks", "tenant_id, placeholder, kek_version, nonce, wrapped_dek",
             ["text", "text", "int4", "bytea", "bytea"], deks)
        for i in range(0, len(mems), 5000):
            batch = mems[i:i + 5000]
            vecs = embedder.embed([m[5] for m in batch])
            copy(conn, "memories", "tenant_id, id, scope, subject_id, type, content, "
                 "provenance, embedding", ["text", "uuid", "text", "text", "text", "text",
                                           "jsonb", "vector"],
                 [(*m, vecs[k]) for k, m in enumerate(batch)])
        copy(conn, "memory_lineage", "tenant_id, memory_id, source_id",
             ["text", "uuid", "uuid"], lineage)
        copy(conn, "graph_nodes", "tenant_id, node_id, kind", ["text", "text", "text"],
             [(tenant, ph, kind) for ph, kind in sorted(nodes.items())])
        copy(conn, "graph_node_support", "tenant_id, node_id, memory_id",
             ["text", "text", "uuid"], node_support)
        copy(conn, "graph_edges", "tenant_id, source_node, target_node",
             ["text", "text", "text"], [(tenant, a, b) for a, b in sorted(edges)])
        copy(conn, "graph_edge_support", "tenant_id, source_node, target_node, memory_id",
             ["text", "text", "text", "uuid"], edge_support)


def drop_hnsw(conn: psycopg.Connection[Any]) -> list[str]:
    """Drop the vector indexes of ``memories`` (owner connection); their definitions."""
    defs = [r[0] for r in conn.execute(
        "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c "
        "ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
        "WHERE i.indrelid = 'memories'::regclass AND a.amname IN ('hnsw', 'ivfflat')")]
    for d in defs:
        conn.execute(f"DROP INDEX {d.split()[2]}")  # type: ignore[arg-type]
    return defs


def copy_tenant(conn: psycopg.Connection[Any], src: str, dst: str) -> None:
    """Copy every row of ``src`` in :data:`COPY_TABLES` to ``dst`` (owner connection)."""
    conn.execute("INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT DO NOTHING", (dst,))
    for table in COPY_TABLES:
        cols = [r[0] for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
            "AND NOT attisdropped AND attgenerated = '' AND attname <> 'tenant_id' "
            "ORDER BY attnum", (table,))]
        names = ", ".join(f'"{c}"' for c in cols)
        conn.execute(f"INSERT INTO {table} (tenant_id, {names}) "  # type: ignore[arg-type]
                     f"SELECT %s, {names} FROM {table} WHERE tenant_id = %s", (dst, src))


def graph_keys(conn: psycopg.Connection[Any], tenant: str) -> tuple[set[str], set[tuple[str, str]]]:
    nodes = {r[0] for r in conn.execute(
        "SELECT node_id FROM graph_nodes WHERE tenant_id = %s", (tenant,))}
    edges = {(r[0], r[1]) for r in conn.execute(
        "SELECT source_node, target_node FROM graph_edges WHERE tenant_id = %s", (tenant,))}
    return nodes, edges


def list_pages(vault: MemoryVault, tenant: str) -> tuple[float, list[float], int]:
    """Every page of the subject's listing: (total seconds, per-page seconds, rows)."""
    who = vault.principal(tenant)
    cursor: uuid.UUID | None = None
    pages, rows = [], 0
    t0 = time.perf_counter()
    while True:
        t = time.perf_counter()
        page = vault.subjects.list(SUBJECT, scope="s", limit=PAGE, cursor=cursor,
                                   principal=who)
        pages.append(time.perf_counter() - t)
        rows += len(page.items)
        if page.next_cursor is None:
            return time.perf_counter() - t0, pages, rows
        cursor = page.next_cursor


def list_bare(vault: MemoryVault, tenant: str) -> tuple[float, int]:
    """The same pages by a plain keyset SELECT (content, no embedding), one transaction a
    page, as the application role."""
    cursor = uuid.UUID(int=0)
    rows = 0
    t0 = time.perf_counter()
    while True:
        with vault.db.transaction(tenant) as conn:
            page = conn.execute(
                "SELECT id, scope, subject_id, type, content, key, key_id, content_sealed, "
                "key_sealed, status, archived, created_at, provenance FROM memories "
                "WHERE tenant_id = %s AND scope = 's' AND subject_id = %s AND id > %s "
                "ORDER BY id LIMIT %s",
                (tenant, SUBJECT, cursor, PAGE)).fetchall()
        rows += len(page)
        if len(page) < PAGE:
            return time.perf_counter() - t0, rows
        cursor = page[-1]["id"]


def bare_delete(vault: MemoryVault, tenant: str, ids: list[uuid.UUID], nodes: list[str],
                edges: list[tuple[str, str]], placeholders: list[str]) -> float:
    """Seconds for plain statements removing exactly these rows from ``tenant``."""
    t = time.perf_counter()
    with vault.db.transaction(tenant) as conn:
        conn.execute("DELETE FROM memory_lineage WHERE tenant_id = %s AND "
                     "(memory_id = ANY(%s) OR source_id = ANY(%s))", (tenant, ids, ids))
        conn.execute("DELETE FROM graph_edge_support WHERE tenant_id = %s AND "
                     "memory_id = ANY(%s)", (tenant, ids))
        conn.execute("DELETE FROM graph_node_support WHERE tenant_id = %s AND "
                     "memory_id = ANY(%s)", (tenant, ids))
        conn.execute("DELETE FROM memories WHERE tenant_id = %s AND id = ANY(%s)",
                     (tenant, ids))
        conn.execute("DELETE FROM graph_edges WHERE tenant_id = %s AND (source_node, "
                     "target_node) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
                     (tenant, [e[0] for e in edges], [e[1] for e in edges]))
        conn.execute("DELETE FROM graph_nodes WHERE tenant_id = %s AND node_id = ANY(%s)",
                     (tenant, nodes))
        conn.execute("DELETE FROM pii_deks WHERE tenant_id = %s AND placeholder = ANY(%s)",
                     (tenant, placeholders))
        conn.execute("UPDATE pii_values SET ciphertext = NULL, nonce = NULL, "
                     "fingerprint = NULL, head = NULL, shredded_at = now() "
                     "WHERE tenant_id = %s AND placeholder = ANY(%s)", (tenant, placeholders))
    return time.perf_counter() - t


def run_size(n: int, rep: int, mode: str) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix=f"mv-bench-erase-{n}-"))
    data_dir.chmod(0o755)
    vault = MemoryVault.open(Settings(data_dir=data_dir, database_url=None,
                                      audit_jsonl=False), embedder=RandomEmbedder())
    try:
        te, tb = f"be{n}-{rep}-{uuid.uuid4().hex[:6]}", f"bb{n}-{rep}-{uuid.uuid4().hex[:6]}"
        t = time.perf_counter()
        hnsw: list[str] = []
        if mode == "fast":
            with psycopg.connect(vault.db.url, autocommit=True) as conn:
                hnsw = drop_hnsw(conn)
            fast_build(vault, te, n)
        else:
            build(vault, te, n)
        with psycopg.connect(vault.db.url, autocommit=True) as conn:
            with conn.transaction():
                copy_tenant(conn, te, tb)
            if hnsw:
                t_ix = time.perf_counter()
                conn.execute("SET maintenance_work_mem = '2GB'")
                for d in hnsw:
                    conn.execute(d)  # type: ignore[arg-type]
                say(f"N={n}: HNSW index rebuilt in {time.perf_counter() - t_ix:.1f} s")
            conn.execute("VACUUM ANALYZE")  # both tenants plan with current statistics
            nodes_before, edges_before = graph_keys(conn, te)
        build_s = time.perf_counter() - t
        say(f"N={n}: built ({mode}) and copied in {build_s:.1f} s")

        list_s, pages, listed = list_pages(vault, te)
        list_bare_s, listed_bare = list_bare(vault, tb)
        assert listed_bare == listed, (listed_bare, listed)

        t = time.perf_counter()
        er = vault.subjects.erase(SUBJECT, scope="s", principal=vault.principal(te),
                                  trigger="bench")
        erase_s = time.perf_counter() - t
        assert len(er.deleted) == n + n // 4 == listed, (len(er.deleted), listed)
        with psycopg.connect(vault.db.url, autocommit=True) as conn:
            nodes_after, edges_after = graph_keys(conn, te)
        nodes = sorted(nodes_before - nodes_after)
        edges = sorted(edges_before - edges_after)
        bare_s = bare_delete(vault, tb, sorted(er.deleted), nodes, edges, er.shredded)

        t = time.perf_counter()
        report = scrub(vault.rt, tenants=[te], request_id=f"bench-{n}")
        scrub_s = time.perf_counter() - t
        mem = next(r for r in report.tables if r["table"] == "memories")
        return {"erase_s": erase_s, "bare_delete_s": bare_s, "list_s": list_s,
                "list_bare_s": list_bare_s, "list_page_median_s": statistics.median(pages),
                "pages": len(pages), "listed": listed, "listed_bare": listed_bare,
                "scrub_s": scrub_s, "scrub_memories_s": mem["seconds"],
                "scrub_bytes_before": sum(r["bytes_before"] for r in report.tables),
                "scrub_bytes_after": sum(r["bytes_after"] for r in report.tables),
                "scrub_complete": report.complete, "wal_switches": report.wal["switches"],
                "memories_erased": len(er.deleted), "shredded": len(er.shredded),
                "graph_nodes_removed": len(nodes), "graph_edges_removed": len(edges),
                "build_s": build_s, "build": mode}
    finally:
        vault.close()
        stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


MEDIANS = ("erase_s", "bare_delete_s", "list_s", "list_bare_s", "list_page_median_s",
           "scrub_s", "scrub_memories_s")


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="size 200 (CI)")
    p.add_argument("--sizes", type=str, default=None, help="comma-separated sizes")
    p.add_argument("--repeat", type=int, default=3, help="runs per size up to 1,000")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    p.add_argument("--build", choices=("auto", "real", "fast"), default="auto",
                   help="how tenant E is built (module docstring); auto: fast from 10,000")
    p.add_argument("--merge", type=Path, help="an earlier result file: keep its rows of "
                   "other sizes (each row keeps the run it came from) and write the union "
                   "back to it")
    a = p.parse_args()
    quiet_logging()
    sizes = ([int(s) for s in a.sizes.split(",")] if a.sizes
             else [200] if a.quick else [1000, 10_000, 100_000])
    env = environment()  # its load average is the one at the start
    started = time.perf_counter()
    results = []
    for n in sizes:
        runs = []
        for rep in range(a.repeat if n <= 1000 else 1):
            say(f"N={n} run {rep + 1}: building, listing, erasing, deleting, scrubbing")
            runs.append(run_size(n, rep, a.build if a.build != "auto"
                                  else "fast" if n >= 10_000 else "real"))
        med = {k: statistics.median(r[k] for r in runs) for k in MEDIANS}
        first = runs[0]
        row = {"n": n, "runs": len(runs),
               **{k: first[k] for k in ("memories_erased", "shredded", "graph_nodes_removed",
                                        "graph_edges_removed", "pages", "listed",
                                        "scrub_bytes_before", "scrub_bytes_after",
                                        "wal_switches")},
               **{k: round(v, 6) for k, v in med.items()},
               "erase_over_bare": round(med["erase_s"] / med["bare_delete_s"], 2),
               "list_over_bare": round(med["list_s"] / med["list_bare_s"], 2),
               "scrub_complete": all(r["scrub_complete"] for r in runs),
               "build_s": round(first["build_s"], 2), "build": first["build"],
               "list_bare_page_s": round(med["list_bare_s"] / first["pages"], 6),
               "list_page_over_bare_page": round(
                   med["list_page_median_s"] / (med["list_bare_s"] / first["pages"]), 2)}
        say(json.dumps(row))
        results.append(row)
    run = {"command": " ".join(["python", "bench/erase.py", *sys.argv[1:]]),
           "environment": env, "seconds": round(time.perf_counter() - started, 1)}
    for row in results:
        row["run"] = 0
    report = {"bench": "erase", "quick": a.quick, "target": "erase_over_bare <= 2",
              "embedder": "deterministic random vectors (no model)", **run,
              "results": results}
    if a.merge is not None and a.merge.is_file():
        report = merge(json.loads(a.merge.read_text()), run, results)
        a.out = a.out or a.merge
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")


def merge(old: dict[str, Any], run: dict[str, Any],
          results: list[dict[str, Any]]) -> dict[str, Any]:
    """``old`` (a result file) with this run's rows replacing its rows of the same sizes:
    ``runs`` lists every run whose rows are kept (command, environment, seconds), each
    row naming its run by index."""
    runs = old.get("runs") or [{k: old[k] for k in ("command", "environment", "seconds")
                                if k in old}]
    rows = [{**r, "run": r.get("run", 0)} for r in old["results"]]
    rows = [r for r in rows if r["n"] not in {x["n"] for x in results}]
    kept = sorted({r["run"] for r in rows})
    renum = {old_i: new_i for new_i, old_i in enumerate(kept)}
    rows = [{**r, "run": renum[r["run"]]} for r in rows]
    runs = [runs[i] for i in kept] + [run]
    rows += [{**r, "run": len(runs) - 1} for r in results]
    return {"bench": "erase", "quick": False, "target": "erase_over_bare <= 2",
            "embedder": old.get("embedder", "deterministic random vectors (no model)"),
            "runs": runs, "results": sorted(rows, key=lambda r: r["n"])}


if __name__ == "__main__":
    main()
