"""Citus nodes that come and go (issue 26): prepare a node, add it, rebalance, drain and
remove it, and check that every worker holds what the tenant's signature needs.

A node is *prepared* before :func:`add_node` puts it in the cluster (so no shard can land
on a node that cannot verify a tenant), on a direct connection to it (``node_url``: the
coordinator's URL with the node's host and port unless given):

1. the extensions ``citus`` and ``vector`` (the coordinator's versions: Citus refuses a
   node of another version);
2. the roles the schema needs there (its owner, the application role, the owner of
   ``mv_tenant_key`` and the role running this), with the coordinator's attributes and,
   when the coordinator shows it (a superuser reads ``pg_authid``), the same password
   verifier; an existing role is left as it is;
3. the schema's owner and privileges as on the coordinator (a schema owner that is not a
   superuser needs ``CREATE`` there: copying the reference tables, the rebalance's first
   step, runs as it);
4. the tenant signing-key table ``mv_tenant_key`` (a plain table, owner-only, the
   coordinator's owner and key; :mod:`mnemovault.store.citus` explains why it is not a
   Citus table) — without it every tenant whose shards move there would fail.

Citus itself copies the rest when the node is added: the roles it tracks, the
distributed functions (``mv_current_tenant()`` and the triggers' functions, all created
on every node by :func:`mnemovault.store.citus.distribute`), and, with each shard it
moves there, the shard's indexes, policies and triggers. :func:`check_workers` verifies
it all on every worker afterwards (the key equal to the coordinator's, every function of
the schema present).

The rebalance runs as a Citus background job (``citus_rebalance_start``), so adding a
node returns at once unless asked to wait; :func:`rebalance_status` and
:func:`wait_rebalance` follow it. Removing a node drains it first (its
``shouldhaveshards`` off, then a drain-only rebalance job) and removes it only when no
shard is left there. Both need a superuser on the coordinator (``citus_add_node``,
``citus_remove_node``) and on the new node (extensions, roles).

``shard_transfer_mode``: ``auto`` (logical replication when every table has a replica
identity, as the schema's all do once distributed: :func:`mnemovault.store.citus.
distribute` gives the tables without a primary key ``REPLICA IDENTITY FULL``; writes keep
going during the copy and are blocked only for the final switch; needs ``wal_level =
logical`` on every node), ``force_logical`` (logical even for a table without one, whose
deletes then fail during the copy), or ``block_writes`` (writes to the moving shards wait
for the copy; reads go on).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from mnemovault.errors import ConfigError, NotFound, Unavailable, ValidationError
from mnemovault.store import citus

TRANSFER_MODES = ("auto", "force_logical", "block_writes")
KEY_TABLE = "mv_tenant_key"

_KEY_DDL = ("CREATE TABLE IF NOT EXISTS mv_tenant_key (id int PRIMARY KEY CHECK (id = 1), "
            "key bytea NOT NULL, inner_pad bytea NOT NULL, outer_pad bytea NOT NULL)")


def node_url(url: str, host: str, port: int) -> str:
    """``url`` (the coordinator's, as the owner) with ``host`` and ``port`` of a node."""
    params: dict[str, Any] = dict(conninfo_to_dict(url))
    params.update(host=host, port=str(port))
    return make_conninfo(**params)


def _connect(url: str, what: str) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise Unavailable(f"citus: cannot connect to {what} ({type(exc).__name__}: "
                          f"{str(exc).strip().splitlines()[0] if str(exc) else ''})") from exc


def _step(conn: psycopg.Connection[Any], what: str, query: Any,
          params: Any = None) -> list[Any]:
    try:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        raise Unavailable(f"citus: {what} failed: {exc.diag.message_primary or exc}") from exc


def _require_citus(conn: psycopg.Connection[Any]) -> None:
    if not citus.is_citus(conn):
        raise ConfigError("citus: the database has no citus extension (plain PostgreSQL): "
                          "there are no nodes to add or remove")


def _check_mode(mode: str) -> None:
    if mode not in TRANSFER_MODES:
        raise ValidationError(f"mode: must be one of {', '.join(TRANSFER_MODES)} "
                              f"(got {mode!r})", field="mode")


def _roles(coord: psycopg.Connection[Any], app_role: str) -> list[dict[str, Any]]:
    """The roles a node needs, with the coordinator's attributes (and password verifier
    when readable)."""
    names = {r[0] for r in coord.execute(
        "SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE oid = "
        "current_schema()::regnamespace UNION SELECT current_user UNION SELECT "
        "pg_get_userbyid(relowner) FROM pg_class WHERE oid = to_regclass(%s)",
        (KEY_TABLE,))}
    names.add(app_role)
    try:
        with coord.transaction():
            rows = coord.execute(
                "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolcanlogin, "
                "rolpassword FROM pg_authid WHERE rolname = ANY(%s) ORDER BY 1",
                (sorted(names),)).fetchall()
    except psycopg.errors.InsufficientPrivilege:
        rows = coord.execute(
            "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolcanlogin, NULL "
            "FROM pg_roles WHERE rolname = ANY(%s) ORDER BY 1", (sorted(names),)).fetchall()
    return [{"name": r[0], "super": r[1], "createrole": r[2], "createdb": r[3],
             "login": r[4], "password": r[5]} for r in rows]


def _schema_setup(coord: psycopg.Connection[Any]) -> tuple[str, str, list[tuple[str, str]]]:
    """The schema's name, owner and grants (grantee, privilege) on the coordinator."""
    row = coord.execute(
        "SELECT nspname, pg_get_userbyid(nspowner) FROM pg_namespace "
        "WHERE oid = current_schema()::regnamespace").fetchone()
    assert row is not None
    grants = coord.execute(
        "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END, "
        "a.privilege_type FROM pg_namespace n, aclexplode(n.nspacl) a "
        "WHERE n.oid = current_schema()::regnamespace AND a.grantee <> n.nspowner "
        "ORDER BY 1, 2").fetchall()
    return row[0], row[1], [(g[0], g[1]) for g in grants]


def _tenant_key(coord: psycopg.Connection[Any]) -> tuple[str, tuple[bytes, ...]] | None:
    row = coord.execute(
        "SELECT pg_get_userbyid(c.relowner) FROM pg_class c WHERE c.oid = to_regclass(%s)",
        (KEY_TABLE,)).fetchone()
    if row is None:
        return None
    key = coord.execute("SELECT key, inner_pad, outer_pad FROM mv_tenant_key WHERE id = 1"
                        ).fetchone()
    if key is None:
        return None
    return row[0], tuple(bytes(v) for v in key)


def prepare_node(url: str, host: str, port: int, app_role: str, *,
                 node: str | None = None) -> list[str]:
    """Make the node at ``host:port`` ready to hold shards of the schema (the module
    docstring's steps 1-4), idempotently; the steps that changed something.

    Raises:
        Unavailable: the coordinator or the node cannot be reached, or a step failed
            (the message names it and the server's reason).
    """
    done: list[str] = []
    with _connect(url, "the coordinator") as coord:
        _require_citus(coord)
        versions = dict(coord.execute(
            "SELECT extname, extversion FROM pg_extension WHERE extname IN "
            "('citus', 'vector')").fetchall())
        roles = _roles(coord, app_role)
        schema, owner, grants = _schema_setup(coord)
        key = _tenant_key(coord)
    with _connect(node or node_url(url, host, port), f"the node {host}:{port}") as n:
        n.execute("SET citus.enable_ddl_propagation = off")
        have = dict(n.execute("SELECT extname, extversion FROM pg_extension").fetchall())
        for ext in ("citus", "vector"):
            if ext not in have:
                _step(n, f"creating the extension {ext} on the node",
                      sql.SQL("CREATE EXTENSION {} VERSION {}").format(
                          sql.Identifier(ext), sql.Literal(versions[ext])))
                done.append(f"extension {ext} {versions[ext]}")
            elif have[ext] != versions.get(ext):
                raise Unavailable(
                    f"citus: the node has {ext} {have[ext]}, the coordinator {versions[ext]}: "
                    f"run ALTER EXTENSION {ext} UPDATE on the older one first")
        existing = {r[0] for r in n.execute("SELECT rolname FROM pg_roles")}
        for r in roles:
            if r["name"] in existing:
                continue
            attrs = [("SUPERUSER" if r["super"] else "NOSUPERUSER"),
                     ("CREATEROLE" if r["createrole"] else "NOCREATEROLE"),
                     ("CREATEDB" if r["createdb"] else "NOCREATEDB"),
                     ("LOGIN" if r["login"] else "NOLOGIN")]
            q = sql.SQL("CREATE ROLE {} " + " ".join(attrs)).format(sql.Identifier(r["name"]))
            if r["password"]:
                q = q + sql.SQL(" PASSWORD {}").format(sql.Literal(r["password"]))
            _step(n, f"creating the role {r['name']} on the node", q)
            done.append(f"role {r['name']}")
        _step(n, "creating the schema on the node",
              sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        row = n.execute("SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = %s",
                        (schema,)).fetchone()
        if row is None or row[0] != owner:
            _step(n, "handing the schema to its owner on the node",
                  sql.SQL("ALTER SCHEMA {} OWNER TO {}").format(sql.Identifier(schema),
                                                               sql.Identifier(owner)))
            done.append(f"schema {schema} owned by {owner}")
        for grantee, privilege in grants:
            who = sql.SQL("PUBLIC") if grantee == "PUBLIC" else sql.Identifier(grantee)
            _step(n, f"granting {privilege} on the schema to {grantee} on the node",
                  sql.SQL("GRANT {} ON SCHEMA {} TO {}").format(
                      sql.SQL(privilege), sql.Identifier(schema), who))
        if key is not None:
            done += _put_key(n, schema, key[0], key[1], app_role)
    return done


def _put_key(n: psycopg.Connection[Any], schema: str, owner: str, key: tuple[bytes, ...],
             app_role: str) -> list[str]:
    """The signing-key table on one node (its own connection, DDL not propagated)."""
    with n.transaction():
        n.execute("SET LOCAL citus.enable_ddl_propagation = off")
        n.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(schema)))
        current = n.execute("SELECT to_regclass(%s) IS NOT NULL", (KEY_TABLE,)).fetchone()
        same = False
        if current and current[0]:
            row = n.execute("SELECT key, inner_pad, outer_pad FROM mv_tenant_key WHERE id = 1"
                            ).fetchone()
            same = row is not None and tuple(bytes(v) for v in row) == key
        if same:
            return []
        _step(n, "creating the tenant signing-key table on the node", _KEY_DDL)
        _step(n, "restricting the tenant signing-key table on the node",
              sql.SQL("REVOKE ALL ON mv_tenant_key FROM PUBLIC; "
                      "REVOKE ALL ON mv_tenant_key FROM {}; "
                      "ALTER TABLE mv_tenant_key OWNER TO {}").format(
                          sql.Identifier(app_role), sql.Identifier(owner)))
        _step(n, "copying the tenant signing key to the node",
              "INSERT INTO mv_tenant_key VALUES (1, %s, %s, %s) ON CONFLICT (id) DO UPDATE "
              "SET key = excluded.key, inner_pad = excluded.inner_pad, "
              "outer_pad = excluded.outer_pad", key)
    return ["tenant signing key"]


def _node_row(coord: psycopg.Connection[Any], host: str, port: int) -> Any:
    return coord.execute(
        "SELECT nodeid, isactive, shouldhaveshards, groupid FROM pg_dist_node "
        "WHERE nodename = %s AND nodeport = %s", (host, port)).fetchone()


def add_node(url: str, host: str, port: int, app_role: str, *, node: str | None = None,
             rebalance: bool = True, mode: str = "auto") -> dict[str, Any]:
    """Prepare the node (:func:`prepare_node`), add it to the cluster
    (``citus_add_node``), check every worker (:func:`check_workers`) and, with
    ``rebalance``, start moving shards to it (a background job; :func:`wait_rebalance`).

    Returns ``{"node_id", "added" (False when it was in the cluster already), "prepared"
    (the steps that changed something), "job_id" (None: no rebalance started, or nothing
    to move), "mode"}``.

    Raises:
        ValidationError: ``mode`` is not one of :data:`TRANSFER_MODES`.
        Unavailable: a step failed (named), or a worker fails the check afterwards.
    """
    _check_mode(mode)
    prepared = prepare_node(url, host, port, app_role, node=node)
    with _connect(url, "the coordinator") as coord:
        row = _node_row(coord, host, port)
        added = row is None
        if added:
            (node_id,) = _step(coord, f"adding {host}:{port} to the cluster",
                               "SELECT citus_add_node(%s, %s)", (host, port))[0]
        else:
            node_id = row[0]
            if not row[2]:  # drained earlier: may hold shards again
                _step(coord, f"letting {host}:{port} hold shards again",
                      "SELECT citus_set_node_property(%s, %s, 'shouldhaveshards', true)",
                      (host, port))
    problems = check_workers(url)
    if problems:
        raise Unavailable("citus: after adding the node, " + "; ".join(problems))
    job = start_rebalance(url, mode=mode) if rebalance else None
    return {"node_id": int(node_id), "host": host, "port": port, "added": added,
            "prepared": prepared, "job_id": job, "mode": mode}


def start_rebalance(url: str, *, mode: str = "auto", drain_only: bool = False) -> int | None:
    """Start a Citus rebalance job (``citus_rebalance_start``); its id, or None when no
    shard needs to move."""
    _check_mode(mode)
    with _connect(url, "the coordinator") as coord:
        if mode != "block_writes":
            # a schema distributed by an older mnemovault may have tables that logical
            # replication cannot move (Citus refuses the job); the upgrade fixes them
            missing = citus._without_replica_identity(coord)
            if missing:
                raise Unavailable(
                    f"citus: {', '.join(missing)} {'has' if len(missing) == 1 else 'have'} "
                    "no replica identity, so logical replication cannot move their shards: "
                    "run `mnemovault db upgrade` (it sets one), or use --mode block_writes")
        rows = _step(coord, "starting the rebalance",
                     "SELECT citus_rebalance_start(drain_only => %s, "
                     "shard_transfer_mode => %s::citus.shard_transfer_mode)",
                     (drain_only, mode))
    return None if not rows or rows[0][0] is None else int(rows[0][0])


def rebalance_status(url: str, job_id: int) -> dict[str, Any]:
    """``{"job_id", "state", "tasks": {state: count}, "moves": [description...],
    "errors": [message...]}`` of the rebalance job (``state``: scheduled, running,
    finished, failed, cancelled...)."""
    with _connect(url, "the coordinator") as coord:
        row = coord.execute("SELECT state::text FROM pg_dist_background_job WHERE job_id = %s",
                            (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"job_id: no rebalance job {job_id}", field="job_id")
        counts = dict(coord.execute(
            "SELECT status::text, count(*) FROM pg_dist_background_task WHERE job_id = %s "
            "GROUP BY 1 ORDER BY 1", (job_id,)).fetchall())
        errors = [r[0] for r in coord.execute(
            "SELECT message FROM pg_dist_background_task WHERE job_id = %s "
            "AND status::text IN ('error', 'runnable') AND message <> '' ORDER BY task_id",
            (job_id,))]
        running = [r[0] for r in coord.execute(
            "SELECT command FROM pg_dist_background_task WHERE job_id = %s "
            "AND status::text = 'running' ORDER BY task_id", (job_id,))]
    return {"job_id": job_id, "state": row[0], "tasks": {k: int(v) for k, v in counts.items()},
            "running": running, "errors": errors}


_FINAL = {"finished", "failed", "cancelled", "failing", "cancelling"}


def wait_rebalance(url: str, job_id: int, *, timeout: float = 3600.0, poll: float = 1.0,
                   progress: Callable[[dict[str, Any]], None] | None = None,
                   fail_after_errors: int = 3) -> dict[str, Any]:
    """Wait for the rebalance job to end, calling ``progress`` with each new
    :func:`rebalance_status`; its last status.

    Raises:
        Unavailable: the job failed or was cancelled, a task failed ``fail_after_errors``
            times in a row (Citus would retry it for long: its message is in the error),
            or ``timeout`` passed (the job goes on in the background).
    """
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    while True:
        status = rebalance_status(url, job_id)
        if progress is not None and status != last:
            progress(status)
        last = status
        if status["state"] == "finished":
            status["old_copies_left"] = drop_old_copies(url)
            return status
        if status["state"] in _FINAL:
            raise Unavailable(f"citus: rebalance job {job_id} {status['state']}: "
                              + "; ".join(status["errors"] or ["no message"]))
        if status["errors"] and _retries(url, job_id) >= fail_after_errors:
            raise Unavailable(f"citus: rebalance job {job_id} keeps failing (Citus retries "
                              f"it; `SELECT citus_rebalance_stop()` stops it): "
                              + "; ".join(status["errors"]))
        if time.monotonic() > deadline:
            raise Unavailable(f"citus: rebalance job {job_id} still {status['state']} after "
                              f"{timeout:g} s (it goes on in the background; "
                              "`SELECT * FROM citus_rebalance_status()` follows it)")
        time.sleep(poll)


def drop_old_copies(url: str, *, timeout: float = 30.0, poll: float = 1.0) -> int:
    """Drop the old copies of the shards a rebalance moved (``CALL
    citus_cleanup_orphaned_resources()``, retried while a query still holds one, up to
    ``timeout`` s); how many are left (Citus's maintenance daemon drops those later, every
    ``citus.defer_shard_delete_interval``), -1 when the role may not do it.

    Until then a moved shard's source copy stays on its old node with the rows it had at
    the switch: an erase or purge after the move removes the live copy's rows, not that
    copy's. Dropping them when the rebalance ends leaves nothing of a tenant on a node it
    left."""
    deadline = time.monotonic() + timeout
    while True:
        with _connect(url, "the coordinator") as coord:
            try:
                coord.execute("CALL citus_cleanup_orphaned_resources()")
                row = coord.execute("SELECT count(*) FROM pg_dist_cleanup").fetchone()
            except psycopg.Error:
                return -1  # e.g. not a superuser: unknown, the daemon drops them later
        left = int(row[0]) if row else 0
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(poll)


def _retries(url: str, job_id: int) -> int:
    with _connect(url, "the coordinator") as coord:
        row = coord.execute("SELECT coalesce(max(retry_count), 0) FROM pg_dist_background_task "
                            "WHERE job_id = %s", (job_id,)).fetchone()
    return int(row[0]) if row else 0


def remove_node(url: str, host: str, port: int, *, mode: str = "auto",
                timeout: float = 3600.0,
                progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Drain the node (no new shards there, then a drain-only rebalance job moving its
    shards to the others, waited for) and remove it (``citus_remove_node``). Returns
    ``{"node_id", "job_id", "moved" (shard groups moved off), "removed": True}``.

    Raises:
        NotFound: no such node in the cluster.
        Unavailable: the drain failed (its message), or shards are still on the node.
    """
    _check_mode(mode)
    with _connect(url, "the coordinator") as coord:
        _require_citus(coord)
        row = _node_row(coord, host, port)
        if row is None:
            raise NotFound(f"node: {host}:{port} is not in the cluster (pg_dist_node)",
                           field="node")
        node_id, group = int(row[0]), int(row[3])
        if group == 0:
            raise ValidationError("node: that is the coordinator, which cannot be removed",
                                  field="node")
        _step(coord, f"stopping new shards on {host}:{port}",
              "SELECT citus_set_node_property(%s, %s, 'shouldhaveshards', false)",
              (host, port))
    job = start_rebalance(url, mode=mode, drain_only=True)
    moved = 0
    if job is not None:
        status = wait_rebalance(url, job, timeout=timeout, progress=progress)
        moved = status["tasks"].get("done", 0)
    with _connect(url, "the coordinator") as coord:
        left = coord.execute(
            "SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_partition d "
            "ON d.logicalrelid = (SELECT logicalrelid FROM pg_dist_shard s "
            "  WHERE s.shardid = p.shardid) WHERE p.groupid = %s AND d.partmethod <> 'n'",
            (group,)).fetchone()
        if left and left[0]:
            raise Unavailable(f"citus: {left[0]} shard placements are still on {host}:{port} "
                              "after the drain; nothing removed")
        # the moved shards' old copies are dropped later by Citus, but only while the node
        # is in the cluster: drop them now, or they are left behind on the node (and a
        # later add-node of it fails on "orphaned shard ... could not be cleaned up")
        _step(coord, f"dropping the moved shards' old copies on {host}:{port}",
              "CALL citus_cleanup_orphaned_resources()")
        orphans = coord.execute("SELECT count(*) FROM pg_dist_cleanup WHERE node_group_id = %s",
                                (group,)).fetchone()
        if orphans and orphans[0]:
            raise Unavailable(f"citus: {orphans[0]} old shard copies on {host}:{port} could not "
                              "be dropped yet (a query still uses them?): run remove-node "
                              "again; nothing removed")
        _step(coord, f"removing {host}:{port} from the cluster",
              "SELECT citus_remove_node(%s, %s)", (host, port))
    return {"node_id": node_id, "host": host, "port": port, "job_id": job, "moved": moved,
            "removed": True}


def check_workers(url: str) -> list[str]:
    """What a worker lacks for the schema: the signing key (missing or not the
    coordinator's) or a function of the schema that the coordinator has. Empty when every
    worker is complete. Runs as the owner (``run_command_on_workers``)."""
    problems: list[str] = []
    with _connect(url, "the coordinator") as coord:
        _require_citus(coord)
        key = _tenant_key(coord)
        functions = sorted(r[0] for r in coord.execute(
            "SELECT DISTINCT p.proname FROM pg_proc p "
            "WHERE p.pronamespace = current_schema()::regnamespace "
            "AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid "
            "  AND d.classid = 'pg_proc'::regclass AND d.deptype = 'e')"))
        if key is not None:
            digest = coord.execute("SELECT md5(key || inner_pad || outer_pad) "
                                   "FROM mv_tenant_key WHERE id = 1").fetchone()
            for host, port, ok, result in coord.execute(
                    "SELECT nodename, nodeport, success, result FROM run_command_on_workers("
                    "$$SELECT coalesce((SELECT md5(key || inner_pad || outer_pad) "
                    "FROM mv_tenant_key WHERE id = 1), 'none')$$)"):
                if not ok:
                    problems.append(f"{host}:{port} has no tenant signing key ({result}); "
                                    f"`mnemovault db add-node {host} {port}` copies it")
                elif digest is None or result != digest[0]:
                    problems.append(f"{host}:{port} holds another tenant signing key; "
                                    f"`mnemovault db add-node {host} {port}` copies it")
        if functions:
            listing = ",".join(functions)
            for host, port, ok, result in coord.execute(
                    "SELECT nodename, nodeport, success, result FROM run_command_on_workers("
                    "%s)",
                    (f"SELECT coalesce(string_agg(DISTINCT proname, ',' ORDER BY proname), '') "
                     f"FROM pg_proc WHERE pronamespace = current_schema()::regnamespace "
                     f"AND proname = ANY(string_to_array('{listing}', ','))",)):
                have = set(result.split(",")) if ok else set()
                missing = [f for f in functions if f not in have]
                if missing:
                    problems.append(f"{host}:{port} lacks the functions {', '.join(missing)} "
                                    "(`mnemovault db upgrade` creates them on every node)")
    return problems


def repair_tenant_key(url: str, app_role: str) -> None:
    """Copy the signing key to every worker that lacks it (as :func:`distribute` does).

    Raises:
        Unavailable: the owner cannot connect, or a worker refused the copy.
    """
    with _connect(url, "the coordinator as the owner") as coord:
        if citus.is_citus(coord):
            citus._sync_tenant_key(coord, app_role)
