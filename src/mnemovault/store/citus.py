"""Citus (scale-out): distribute the schema by tenant, and what a distributed database needs
of the application's connections.

Citus is optional and never shipped: on a server without the ``citus`` extension every
function here is a no-op (:func:`distribute` returns ``None``, :func:`is_citus` ``False``).
With it, :func:`distribute` runs after the Alembic migrations (from
:meth:`mnemovault.store.db.Database.upgrade`, so on every ``db upgrade`` and start):

* every table of the schema with a ``tenant_id`` column becomes a distributed table,
  hash-distributed by ``tenant_id`` and co-located with ``memories`` (the tables are found
  in the catalog, so tables added by later revisions are covered on the next upgrade;
  tables referenced by foreign keys go first; the shard count is the server's
  ``citus.shard_count`` for the first table, the group's for the others);
* every other table becomes a reference table (a copy on every node), except
  ``alembic_version`` (local to the coordinator) and ``mv_tenant_key`` (see below);
* every distributed table without a primary key gets ``REPLICA IDENTITY FULL``, so Citus
  can move its shards by logical replication (a rebalance's default mode refuses a table
  without a replica identity, ``db add-node``);
* the schema's own functions (``mv_current_tenant()``, the policies' check) are created on
  every node (``create_distributed_function``);
* the triggers that migrations create on plain PostgreSQL only (each migration's
  ``TRIGGERS``, a :class:`mnemovault.store.migrations.triggers.TriggerSet`: migration
  0009's BM25 statistics, 0010's postings) are installed on the shards, in their Citus
  form (the same statements, run on the co-located shards of the tables they maintain),
  and those tables are recounted in the same transaction (:func:`trigger_sets`,
  :func:`_install_triggers`).

Each step is its own transaction and skips what is done already, so :func:`distribute` is
idempotent and resumes after a failure.

**The signed tenant on every node.** Row-level security runs on the worker that holds a
shard, as the application role (Citus connects to workers as the current user). Migration
0005 signs the tenant setting with HMAC-SHA256 over ``<tenant>:<backend pid>``, but a shard
query runs in another backend, on another node. Under Citus the message is
``<tenant>:<global pid>`` instead: ``citus_backend_gpid()`` is ``node id * 10^10 + pid`` of
the coordinator backend that started the distributed transaction, and every backend that
Citus opens for it on a worker inherits it (from its ``citus_internal gpid=N``
application name). The key needed to check it is in ``mv_tenant_key``, which stays a plain
table (not a reference table: a policy on a shard may not query a Citus table, "cannot
execute a distributed query from a query on a shard"); :func:`distribute` copies it to
every node, readable by the owner only. The setting reaches the workers as ``SET LOCAL``
with ``citus.propagate_set_commands = 'local'`` (``set_config`` is not propagated).

Trade-off: a backend's global pid is public and Citus takes it from the application name,
which any connection may set. A token observed elsewhere (the ``SET LOCAL`` statement is
visible to the same role in ``pg_stat_activity``) could therefore be replayed by SQL
running as the application role on a worker (e.g. through ``run_command_on_workers``).
On the coordinator the check also requires the global pid's pid to be the backend's own
when the global pid names the local node, which closes replay there. What stays true on
every node: without the key (owner-only on every node) no token can be made for a tenant
whose token was never shown, and with no tenant set the application role sees no rows.
docs/scaling.md ("Scaling out") says how a deployer closes the rest (workers accept the
application role from the coordinator's address only; ``run_command_on_*`` revoked).
"""

from __future__ import annotations

import importlib
import logging
import re
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from mnemovault.errors import Unavailable
from mnemovault.store.migrations.triggers import TriggerSet

log = logging.getLogger(__name__)

ANCHOR = "memories"  # the co-location group's reference table
LOCAL_TABLES = ("alembic_version", "mv_tenant_key")
GPID_MULTIPLIER = 10_000_000_000  # citus: GLOBAL_PID_NODE_ID_MULTIPLIER

# mv_current_tenant() under Citus (migration 0005's, with the global pid): a token verifies
# on the coordinator backend that set it and on every worker backend of its transactions.
SIGNED_TENANT_FUNCTION = """
CREATE OR REPLACE FUNCTION mv_current_tenant() RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  tok text := current_setting('mnemovault.tenant_id', true);
  t text;
  g bigint;
  k record;
BEGIN
  IF tok IS NULL OR position(':' IN tok) = 0 THEN
    RETURN NULL;
  END IF;
  g := citus_backend_gpid();
  IF g IS NULL OR g = 0 THEN
    RETURN NULL;
  END IF;
  -- a global pid of this node must be this backend's own (no claiming another's)
  IF g / 10000000000 = (SELECT n.nodeid FROM pg_dist_node n
                        WHERE n.groupid = (SELECT groupid FROM pg_dist_local_group)
                        ORDER BY n.nodeid LIMIT 1)
     AND g % 10000000000 <> pg_backend_pid() THEN
    RETURN NULL;
  END IF;
  t := split_part(tok, ':', 1);
  SELECT inner_pad, outer_pad INTO k FROM mv_tenant_key WHERE id = 1;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF encode(sha256(k.outer_pad || sha256(k.inner_pad
        || convert_to(t || ':' || g::text, 'UTF8'))), 'hex') = split_part(tok, ':', 2) THEN
    RETURN t;
  END IF;
  RETURN NULL;
END $$"""


# Citus refuses subqueries in policies of distributed tables, so the tenant policies of
# migration 0005 (``tenant_id = (SELECT mv_current_tenant())``: one check per statement)
# become the comparison without the subquery. It still runs once per statement when the
# statement names its tenant, as every store query does: the planner puts
# ``tenant_id = 'x'`` and the policy's ``tenant_id = mv_current_tenant()`` in one
# equivalence class and checks ``mv_current_tenant() = 'x'`` once, as the plan's one-time
# filter, instead of calling the function (an HMAC) for every row. (The form before this,
# ``tenant_id = split_part(<setting>) AND mv_current_tenant() IS NOT NULL``, called it
# for every row scanned: a policy's condition without a column is not made a one-time
# filter; 190 ms of a 220 ms BM25 pass over 10,000 memories.) A statement without a tenant
# filter (only row-level security scoping it) calls it per row: correct, slower.
CITUS_POLICY = "tenant_id = mv_current_tenant()"
CITUS_POLICY_DEPARSED = "(tenant_id = mv_current_tenant())"  # as pg_policies shows it


def is_citus(conn: psycopg.Connection[Any]) -> bool:
    """Whether the connected database has the ``citus`` extension."""
    row = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'").fetchone()
    return row is not None


def _distributed(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """Citus tables of the current schema: name -> ``'h'`` (hash) / ``'n'`` (reference)."""
    rows = conn.execute(
        "SELECT c.relname, p.partmethod FROM pg_dist_partition p "
        "JOIN pg_class c ON c.oid = p.logicalrelid "
        "WHERE c.relnamespace = current_schema()::regnamespace").fetchall()
    return {r[0]: r[1] for r in rows}


def _tables(conn: psycopg.Connection[Any]) -> dict[str, bool]:
    """The schema's own tables (not partitions, not an extension's): name -> has
    ``tenant_id``."""
    rows = conn.execute(
        "SELECT c.relname, EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid "
        "  AND a.attname = 'tenant_id' AND NOT a.attisdropped) "
        "FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace "
        "AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
        "AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid "
        "  AND d.classid = 'pg_class'::regclass AND d.deptype = 'e') "
        "ORDER BY c.relname").fetchall()
    return {r[0]: bool(r[1]) for r in rows}


def _references(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """Foreign keys within the schema: (referencing table, referenced table)."""
    rows = conn.execute(
        "SELECT DISTINCT a.relname, b.relname FROM pg_constraint k "
        "JOIN pg_class a ON a.oid = k.conrelid JOIN pg_class b ON b.oid = k.confrelid "
        "WHERE k.contype = 'f' AND a.relnamespace = current_schema()::regnamespace "
        "AND b.relnamespace = current_schema()::regnamespace AND a.oid <> b.oid").fetchall()
    return [(r[0], r[1]) for r in rows]


def _without_replica_identity(conn: psycopg.Connection[Any]) -> list[str]:
    """Distributed tables of the schema that logical replication could not move: no
    primary key (nor another replica identity index) and ``REPLICA IDENTITY DEFAULT``
    (Citus's ``RelationCanPublishAllModifications``; e.g. migration 0016's append-only
    ``lexical_stat_deltas`` and ``memory_accesses``)."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid "
        "WHERE c.relnamespace = current_schema()::regnamespace AND p.partmethod = 'h' "
        "AND c.relreplident <> 'f' AND NOT EXISTS (SELECT 1 FROM pg_index i "
        "  WHERE i.indrelid = c.oid AND ((c.relreplident = 'd' AND i.indisprimary) "
        "    OR (c.relreplident = 'i' AND i.indisreplident))) "
        "ORDER BY c.relname").fetchall()
    return [r[0] for r in rows]


def _ordered(tables: list[str], refs: list[tuple[str, str]]) -> list[str]:
    """``tables`` with every referenced table before the tables that reference it (the
    anchor as early as that allows; ties by name)."""
    deps = {t: {b for a, b in refs if a == t and b in tables} for t in tables}
    done: list[str] = []

    def visit(t: str, path: tuple[str, ...]) -> None:
        if t in done or t in path:
            return
        for d in sorted(deps[t]):
            visit(d, (*path, t))
        done.append(t)

    for t in sorted(tables, key=lambda n: (n != ANCHOR, n)):
        visit(t, ())
    return done


def _run(conn: psycopg.Connection[Any], what: str, query: sql.Composed | sql.SQL | str,
         params: tuple[Any, ...] = ()) -> None:
    try:
        conn.execute(query, params or None)
    except psycopg.Error as exc:
        raise Unavailable(f"citus: {what} failed: {exc.diag.message_primary or exc}") from exc


def _sync_tenant_key(conn: psycopg.Connection[Any], app_role: str) -> None:
    """Copy ``mv_tenant_key`` (a plain table on the coordinator) to every worker, owner-only,
    as the same plain table."""
    row = conn.execute("SELECT key, inner_pad, outer_pad FROM mv_tenant_key WHERE id = 1"
                       ).fetchone()
    if row is None:
        return
    values = ", ".join(f"'\\x{bytes(v).hex()}'::bytea" for v in row)
    ident = sql.Identifier(app_role).as_string(conn)
    command = (
        "CREATE TABLE IF NOT EXISTS mv_tenant_key (id int PRIMARY KEY CHECK (id = 1), "
        "key bytea NOT NULL, inner_pad bytea NOT NULL, outer_pad bytea NOT NULL); "
        "REVOKE ALL ON mv_tenant_key FROM PUBLIC; "
        f"REVOKE ALL ON mv_tenant_key FROM {ident}; "
        f"INSERT INTO mv_tenant_key VALUES (1, {values}) ON CONFLICT (id) DO UPDATE SET "
        "key = excluded.key, inner_pad = excluded.inner_pad, outer_pad = excluded.outer_pad")
    # run on each worker without propagating DDL back (the table stays a plain table)
    rows = conn.execute(
        "SELECT nodename, nodeport, success, result FROM run_command_on_workers(%s)",
        (f"SET citus.enable_ddl_propagation = off; {command}",)).fetchall()
    failed = [f"{r[0]}:{r[1]}: {r[3]}" for r in rows if not r[2]]
    if failed:
        raise Unavailable(f"citus: copying the tenant signing key to the workers failed: "
                          f"{'; '.join(failed)}")


def distribute(url: str, app_role: str) -> dict[str, Any] | None:
    """Distribute the migrated schema on a Citus database (as the owner at ``url``); ``None``
    and nothing done on a server without Citus.

    Returns what this run changed: ``{"distributed": [...], "reference": [...],
    "functions": [...], "policies": [...], "triggers": [...], "replica_identity": [...]}``
    (empty lists when everything was done already).

    Raises:
        Unavailable: a Citus step failed (the message names the table and Citus's reason,
            e.g. a unique key without ``tenant_id``); the steps before it are kept.
    """
    try:
        conn = psycopg.connect(url, autocommit=True)
    except psycopg.Error as exc:
        raise Unavailable(f"citus: cannot connect as the owner ({type(exc).__name__})") from exc
    with conn:
        if not is_citus(conn):
            return None
        changed: dict[str, list[str]] = {"distributed": [], "reference": [], "functions": [],
                                          "policies": [], "triggers": [],
                                          "replica_identity": []}
        conn.execute("SET citus.multi_shard_modify_mode = 'sequential'")
        conn.execute("SET citus.enable_unsafe_triggers = on")  # row triggers on shards
        tables = _tables(conn)
        done = _distributed(conn)
        refs = _references(conn)
        todo = [t for t in tables if t not in done and t not in LOCAL_TABLES]
        for t in _subquery_policies(conn):
            _run(conn, f"rewriting the tenant policy of {t}",
                 sql.SQL("ALTER POLICY tenant_isolation ON {} USING ({}) WITH CHECK ({})")
                 .format(sql.Identifier(t), sql.SQL(CITUS_POLICY), sql.SQL(CITUS_POLICY)))
            changed["policies"].append(t)
        for t in _ordered([t for t in todo if not tables[t]], refs):
            _run(conn, f"making {t} a reference table",
                 "SELECT create_reference_table(%s::regclass)", (t,))
            changed["reference"].append(t)
        anchor = ANCHOR if done.get(ANCHOR) == "h" else next(
            (t for t, m in done.items() if m == "h" and tables.get(t)), None)
        for t in _ordered([t for t in todo if tables[t]], refs):
            colocate = anchor or "none"
            _run(conn, f"distributing {t} by tenant_id",
                 "SELECT create_distributed_table(%s::regclass, 'tenant_id', "
                 "colocate_with => %s)", (t, colocate))
            changed["distributed"].append(t)
            anchor = anchor or t
        for t in _without_replica_identity(conn):
            # a shard moves by logical replication (db add-node's default mode): Citus
            # refuses a table whose deletes and updates it could not replicate
            _run(conn, f"giving {t} a replica identity",
                 sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(sql.Identifier(t)))
            changed["replica_identity"].append(t)
        for t in reversed(changed["distributed"] + changed["reference"]):
            # the coordinator's pre-distribution copy is invisible now; drop its bytes
            _run(conn, f"truncating the local copy of {t}",
                 "SELECT truncate_local_data_after_distributing_table(%s::regclass)", (t,))
        if _function_is_plain(conn):
            _run(conn, "signing the tenant with the global pid", SIGNED_TENANT_FUNCTION)
        for fn in _local_functions(conn):
            _run(conn, f"creating {fn} on every node",
                 "SELECT create_distributed_function(%s)", (fn,))
            changed["functions"].append(fn)
        _sync_tenant_key(conn, app_role)
        for triggers in trigger_sets():
            changed["triggers"] += _install_triggers(conn, triggers)
        _run(conn, "the app role's worker settings",
             sql.SQL("ALTER ROLE {} SET citus.propagate_set_commands = 'local'").format(
                 sql.Identifier(app_role)))
        if any(changed.values()):
            log.info("citus: distributed %s, reference %s, functions %s, triggers %s",
                     changed["distributed"], changed["reference"], changed["functions"],
                     changed["triggers"])
        return dict(changed)


def trigger_sets() -> list[TriggerSet]:
    """Every migration's ``TRIGGERS`` (a :class:`TriggerSet`, or a tuple of them), in
    revision-file order: the triggers a migration creates on plain PostgreSQL only. A set
    whose functions a later revision's set defines again (all of them, by name: e.g.
    0016's statistics deltas replacing 0009's bodies) is superseded by it, which takes
    its place in the order (a set in between may create triggers that call those
    functions: 0014's). A set without functions of its own supersedes nothing and is
    superseded by nothing."""
    found: list[TriggerSet] = []
    versions = resources.files("mnemovault.store.migrations") / "versions"
    for name in sorted(p.name for p in versions.iterdir()):
        if not re.fullmatch(r"[0-9]{4}_\w+\.py", name):
            continue
        module = importlib.import_module(f"mnemovault.store.migrations.versions.{name[:-3]}")
        sets = getattr(module, "TRIGGERS", ())
        for new in [sets] if isinstance(sets, TriggerSet) else list(sets):
            names = set(new.function_names())
            old = [i for i, s in enumerate(found)
                   if names and s.function_names() and set(s.function_names()) <= names]
            if not old:
                found.append(new)
                continue
            found[old[0]] = new
            found = [s for i, s in enumerate(found) if i not in old[1:]]
    return found


def _body(create_function: str) -> str:
    return create_function.split("$fn$")[1]


def _install_triggers(conn: psycopg.Connection[Any], triggers: TriggerSet) -> list[str]:
    """Put ``triggers`` on the shards of their table (module ``triggers``): the functions
    in their Citus form on every node (replaced when the definition changed), then, in one
    transaction, the missing triggers and the recount of their targets. Creating a
    trigger locks each shard against writes until that transaction commits, so no write
    falls between the triggers and the recount. Returns the triggers created."""
    for fn, create in zip(triggers.functions, triggers.citus_functions(), strict=True):
        row = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = %s "
                           "AND pronamespace = current_schema()::regnamespace",
                           (fn.name,)).fetchone()
        if row is None or row[0] != _body(create):
            _run(conn, f"creating {fn.name} for the shards", create)
    have = {r[0] for r in conn.execute(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
        (triggers.table,))}
    missing = [(n, t) for t, n in zip(triggers.triggers, triggers.trigger_names(), strict=True)
               if n not in have]
    if not missing:
        return []
    with conn.transaction():
        for name, statement in missing:
            _run(conn, f"creating trigger {name} on {triggers.table}", statement)
        for statement in triggers.backfill:
            _run(conn, f"recounting {', '.join(triggers.targets)}", statement)
    return [n for n, _ in missing]


def _subquery_policies(conn: psycopg.Connection[Any]) -> list[str]:
    """Tables of the schema whose tenant policy is not :data:`CITUS_POLICY` yet (migration
    0005's subquery, or an earlier Citus form)."""
    rows = conn.execute(
        "SELECT tablename FROM pg_policies WHERE schemaname = current_schema() "
        "AND policyname = 'tenant_isolation' AND (qual IS DISTINCT FROM %(p)s "
        "OR with_check IS DISTINCT FROM %(p)s) ORDER BY 1",
        {"p": CITUS_POLICY_DEPARSED}).fetchall()
    return [r[0] for r in rows]


def _function_is_plain(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = 'mv_current_tenant' "
                       "AND pronamespace = current_schema()::regnamespace").fetchone()
    return row is not None and "citus_backend_gpid" not in row[0]


def _local_functions(conn: psycopg.Connection[Any]) -> list[str]:
    """The schema's own functions (not an extension's) that Citus does not yet create on
    every node."""
    rows = conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p "
        "WHERE p.pronamespace = current_schema()::regnamespace "
        "AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid "
        "  AND d.classid = 'pg_proc'::regclass AND d.deptype = 'e') "
        "AND NOT EXISTS (SELECT 1 FROM pg_dist_object o WHERE o.classid = 'pg_proc'::regclass "
        "  AND o.objid = p.oid) ORDER BY 1").fetchall()
    return [r[0] for r in rows]


def signing_id(conn: psycopg.Connection[Any]) -> int:
    """The number the tenant setting of a transaction on ``conn`` is signed with under
    Citus: the backend's global pid (the module docstring)."""
    row = conn.execute("SELECT citus_backend_gpid()").fetchone()
    assert row is not None
    return int(row[0] if not isinstance(row, dict) else row["citus_backend_gpid"])


def set_tenant(conn: psycopg.Connection[Any], setting: str, token: str) -> None:
    """``SET LOCAL setting = token``: unlike ``set_config``, Citus sends it on to every
    worker the transaction uses (with ``citus.propagate_set_commands = 'local'``)."""
    conn.execute(sql.SQL("SET LOCAL {} = {}").format(sql.Identifier(*setting.split(".")),
                                                     sql.Literal(token)))


def topology(url: str) -> dict[str, Any]:
    """The cluster as the owner sees it: ``{"citus": False}`` on plain PostgreSQL, else
    ``{"citus": True, "version", "nodes": [{"id", "host", "port", "role", "shards"}],
    "distributed": [{"table", "shards", "colocation"}], "reference": [...],
    "local": [...], "colocated": bool}`` (``colocated``: every distributed table is in the
    co-location group of ``memories``)."""
    try:
        conn = psycopg.connect(url, autocommit=True)
    except psycopg.Error as exc:
        raise Unavailable(f"database: cannot connect as the owner ({type(exc).__name__})"
                          ) from exc
    with conn:
        server = conn.execute("SHOW server_version").fetchone()
        if not is_citus(conn):
            return {"server_version": server[0] if server else None, "citus": False}
        version = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'citus'").fetchone()
        nodes = conn.execute(
            "SELECT n.nodeid, n.nodename, n.nodeport, n.groupid, n.isactive, "
            "(SELECT count(*) FROM pg_dist_placement p WHERE p.groupid = n.groupid) "
            "FROM pg_dist_node n ORDER BY n.nodeid").fetchall()
        tables = conn.execute(
            "SELECT c.relname, p.partmethod, p.colocationid, "
            "(SELECT count(*) FROM pg_dist_shard s WHERE s.logicalrelid = p.logicalrelid) "
            "FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid "
            "WHERE c.relnamespace = current_schema()::regnamespace ORDER BY c.relname"
        ).fetchall()
        plain = [t for t in _tables(conn) if t not in {r[0] for r in tables}]
    dist = [{"table": r[0], "shards": int(r[3]), "colocation": int(r[2])}
            for r in tables if r[1] == "h"]
    groups = {d["colocation"] for d in dist}
    return {
        "server_version": server[0] if server else None,
        "citus": True,
        "version": version[0] if version else None,
        "nodes": [{"id": r[0], "host": r[1], "port": r[2],
                   "role": "coordinator" if r[3] == 0 else "worker", "active": r[4],
                   "placements": int(r[5])} for r in nodes],
        "distributed": dist,
        "reference": [r[0] for r in tables if r[1] == "n"],
        "local": plain,
        "colocated": len(groups) <= 1 and any(d["table"] == ANCHOR for d in dist),
    }
