"""Black-box check of issue 26's "Done when": grow a running Citus cluster under load.

On a fresh cluster (a coordinator and its workers, ``../shared/citus/cluster.sh start``) and
one more node outside it (``cluster.sh node``), as docs/scaling.md ("Scaling out") has a
deployer do it:

1. ``citus.shard_count`` (``--shard-count``, default 8: a short rebalance) and ``mnemovault
   db upgrade`` (step 3, step 6);
2. one tenant per shard of ``memories`` (so whatever moves, some tenants move), an owner
   key each (``mnemovault keys create``), ``mnemovault serve`` on the coordinator;
3. every tenant remembers and recalls over HTTP continuously (``--clients`` threads, each
   remember naming its tenant), for ``--before`` s;
4. ``mnemovault db add-node HOST PORT --wait --json`` (step 9, as the superuser) while the
   load goes on: the node is prepared and added, and the rebalance runs to its end;
5. the load goes on for ``--after`` s, then stops;
6. the checks: every remember and recall answered 2xx (a 503 is counted apart: refused
   cleanly, retrying is safe; anything else is a failure), no recall returned another
   tenant's memory, every acknowledged write is listed by its tenant afterwards (and
   nothing is listed that was not written), the new node holds shards;
7. a tenant whose shard moved to the new node gets a memory with an e-mail address (vault
   entries), is deleted (``POST /v1/admin/tenants/{t}/delete``) and purged (``mnemovault
   tenant purge --now`` past the grace period); then its rows are counted on every node
   directly, as the superuser, in every table with a ``tenant_id`` column (the shards,
   the moved shards' old copies if any are left, the coordinator's own tables): 0
   expected; its key answers 401, another tenant still recalls.

Everything the app does goes through the CLI and the HTTP API, in subprocesses; only the
row counts and the placements are read in the database directly.

Usage::

    bash ../shared/citus/cluster.sh start /tmp/grow 9800        # prints the coordinator URL
    bash ../shared/citus/cluster.sh node /tmp/grow 9803
    python scripts/citus_grow_check.py --url postgresql://postgres@127.0.0.1:9800/postgres \\
        --new-node 127.0.0.1:9803 --port 9805

JSON summary on stdout and in ``bench/results/citus_grow.json`` (``--out``); progress on
stderr. Exit 1 when a check failed, 2 when the cluster is not fresh or not reachable.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from _common import environment, progress, wait_for_health  # noqa: E402

REQUEST_TIMEOUT = 120.0
SCOPE = "grow"


def cli(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "mnemovault.cli", "--data-dir", str(data_dir), *args]


def child_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOVAULT_")}
    env.update(DATABASE_URL=url, TOKENIZERS_PARALLELISM="false",
               MNEMOVAULT_CHAT_PROVIDER="offline")
    return env


def run_cli(data_dir: Path, url: str, *args: str,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cli(data_dir, *args), capture_output=True, text=True,
                       env=child_env(url), timeout=timeout, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"mnemovault {' '.join(args)} failed ({r.returncode}): "
                           f"{r.stderr[-2000:]}")
    return r


def node_url(url: str, host: str, port: int) -> str:
    params: dict[str, Any] = dict(conninfo_to_dict(url))
    params.update(host=host, port=str(port))
    return make_conninfo(**params)


def nodes(url: str) -> list[tuple[str, int]]:
    with psycopg.connect(url) as conn:
        return [(r[0], int(r[1])) for r in conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_node ORDER BY groupid, nodeport")]


def port_of(url: str, tenant: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n "
            "ON n.groupid = p.groupid WHERE p.shardid = "
            "get_shard_id_for_distribution_column('memories', %s::text)", (tenant,)).fetchone()
    assert row is not None
    return int(row[0])


def placements(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return {f"{r[0]}:{r[1]}": int(r[2]) for r in conn.execute(
            "SELECT n.nodename, n.nodeport, count(*) FROM pg_dist_placement p "
            "JOIN pg_dist_node n USING (groupid) GROUP BY 1, 2 ORDER BY 2")}


def rows_on_every_node(url: str, tenant: str) -> dict[str, int]:
    """``port:table -> rows`` of ``tenant`` (only the non-zero ones) in every table with a
    ``tenant_id`` column on every node, read on each node directly: its shards, the old
    copies of moved shards not dropped yet, and plain tables; the Citus tables' shells on
    a node are checked to hold no local rows (their reads would be distributed queries)."""
    found: dict[str, int] = {}
    for host, port in nodes(url):
        with psycopg.connect(node_url(url, host, port)) as conn:
            conn.execute("SET citus.override_table_visibility = off")
            tables = [r[0] for r in conn.execute(
                "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_attribute a "
                "ON a.attrelid = c.oid WHERE a.attname = 'tenant_id' AND NOT a.attisdropped "
                "AND c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace "
                "AND NOT EXISTS (SELECT 1 FROM pg_dist_partition d "
                "  WHERE d.logicalrelid = c.oid)")]
            shells_row = conn.execute(
                "SELECT count(*) FROM pg_dist_partition d JOIN pg_class c "
                "ON c.oid = d.logicalrelid WHERE pg_relation_size(c.oid) > 0 "
                "AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid "
                "  AND a.attname = 'tenant_id')").fetchone()
            shells = shells_row[0] if shells_row else 0
            if shells:
                found[f"{port}:shells with local rows"] = int(shells)
            for t in tables:
                got = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE tenant_id = %s")
                                   .format(sql.SQL(t)), (tenant,)).fetchone()
                n = got[0] if got else 0
                if n:
                    found[f"{port}:{t}"] = int(n)
    return found


def one_tenant_per_shard(url: str, prefix: str) -> list[str]:
    with psycopg.connect(url) as conn:
        got = conn.execute("SELECT count(*) FROM pg_dist_shard "
                           "WHERE logicalrelid = 'memories'::regclass").fetchone()
        count = int(got[0]) if got else 0
        by_shard: dict[int, str] = {}
        n = 0
        while len(by_shard) < count and n < 100 * count:
            names = [f"{prefix}-{n + i}" for i in range(64)]
            n += 64
            for t, s in conn.execute(
                    "SELECT t, get_shard_id_for_distribution_column('memories', t) "
                    "FROM unnest(%s::text[]) t", (names,)):
                by_shard.setdefault(int(s), t)
    return sorted(by_shard.values())


class Load:
    """Client threads remembering and recalling for their tenants until stopped; every
    outcome recorded by phase (``before``, ``during``, ``after`` the add-node)."""

    def __init__(self, base: str, tokens: dict[str, str], clients: int) -> None:
        self.base, self.tokens = base, tokens
        self.phase = "before"
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.status: dict[str, Counter[str]] = {}
        self.latency: dict[str, list[float]] = {}
        self.failures: list[str] = []
        self.leaks: list[str] = []
        self.acked: dict[str, dict[str, str]] = {t: {} for t in tokens}  # id -> content
        self.unsure: Counter[str] = Counter()  # a remember refused with 503, per tenant
        tenants = sorted(tokens)
        self.threads = [threading.Thread(target=self._run, args=(tenants[i::clients], i),
                                         daemon=True) for i in range(clients)]

    def start(self) -> None:
        for th in self.threads:
            th.start()

    def finish(self) -> None:
        self.stop.set()
        for th in self.threads:
            th.join(timeout=REQUEST_TIMEOUT + 10)

    def _record(self, op: str, phase: str, status: int | str, ms: float) -> None:
        with self.lock:
            self.status.setdefault(f"{phase}:{op}", Counter())[str(status)] += 1
            if status in (200, 201):
                self.latency.setdefault(f"{phase}:{op}", []).append(ms)

    def _run(self, mine: list[str], index: int) -> None:
        clients = {t: httpx.Client(base_url=self.base, timeout=REQUEST_TIMEOUT,
                                   headers={"Authorization": f"Bearer {self.tokens[t]}"})
                   for t in mine}
        i = 0
        try:
            while not self.stop.is_set():
                t = mine[i % len(mine)]
                i += 1
                c = clients[t]
                content = f"note {index}-{i} of tenant {t}"
                for op in ("remember", "recall"):
                    phase = self.phase
                    t0 = time.perf_counter()
                    try:
                        if op == "remember":
                            r = c.post("/v1/memories", json={"content": content,
                                                             "scope": SCOPE})
                        else:
                            r = c.post("/v1/recall", json={"query": "note of tenant",
                                                           "scope": SCOPE, "k": 20})
                    except httpx.HTTPError as exc:
                        self._record(op, phase, type(exc).__name__, 0)
                        with self.lock:
                            self.failures.append(f"{phase} {op} {t}: {type(exc).__name__}")
                        continue
                    ms = (time.perf_counter() - t0) * 1000
                    self._record(op, phase, r.status_code, ms)
                    if op == "remember" and r.status_code == 201:
                        with self.lock:
                            self.acked[t][str(r.json()["id"])] = content
                    elif op == "recall" and r.status_code == 200:
                        bad = [h["memory"]["content"] for h in r.json()["hits"]
                               if not h["memory"]["content"].endswith(f"of tenant {t}")]
                        if bad:
                            with self.lock:
                                self.leaks.append(f"{t} saw {bad[:3]}")
                    elif r.status_code == 503:
                        if op == "remember":
                            with self.lock:
                                self.unsure[t] += 1
                    else:
                        with self.lock:
                            self.failures.append(f"{phase} {op} {t}: {r.status_code} "
                                                 f"{r.text[:300]}")
        finally:
            for c in clients.values():
                c.close()


def listed(base: str, token: str) -> dict[str, str]:
    """Every memory of the key's tenant in ``SCOPE``: id -> content."""
    out: dict[str, str] = {}
    cursor: str | None = None
    with httpx.Client(base_url=base, timeout=REQUEST_TIMEOUT,
                      headers={"Authorization": f"Bearer {token}"}) as c:
        while True:
            params: dict[str, Any] = {"scope": SCOPE, "limit": 100}
            if cursor:
                params["cursor"] = cursor
            r = c.get("/v1/memories", params=params)
            r.raise_for_status()
            page = r.json()
            out.update({str(m["id"]): m["content"] for m in page["items"]})
            cursor = page["next_cursor"]
            if not cursor:
                return out


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[max(0, min(len(s) - 1, round(q / 100 * len(s) + 0.5) - 1))], 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True,
                    help="the coordinator of a fresh cluster, as a superuser")
    ap.add_argument("--new-node", required=True, metavar="HOST:PORT",
                    help="a node outside the cluster (cluster.sh node DIR PORT)")
    ap.add_argument("--port", type=int, default=9805, help="mnemovault serve's port")
    ap.add_argument("--shard-count", type=int, default=8)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--before", type=float, default=15.0, help="load before add-node (s)")
    ap.add_argument("--after", type=float, default=20.0, help="load after add-node (s)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "citus_grow.json")
    args = ap.parse_args()
    host, port_s = args.new_node.rsplit(":", 1)
    new_port = int(port_s)
    url = args.url

    report: dict[str, Any] = {"check": "citus_grow", "environment": environment(),
                              "settings": {"shard_count": args.shard_count,
                                           "clients": args.clients,
                                           "before_s": args.before, "after_s": args.after,
                                           "new_node": args.new_node}}
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            fresh = conn.execute("SELECT to_regclass('memories') IS NULL").fetchone()
            if not fresh or not fresh[0]:
                progress("not a fresh cluster: the schema is there already")
                return 2
            conn.execute(f"ALTER SYSTEM SET citus.shard_count = {int(args.shard_count)}")
            conn.execute("SELECT pg_reload_conf()")
        if (host, new_port) in nodes(url):
            progress(f"{args.new_node} is in the cluster already")
            return 2
    except psycopg.Error as exc:
        progress(f"cannot use the cluster: {exc}")
        return 2

    data_dir = Path(tempfile.mkdtemp(prefix="mv-grow-"))
    os.chmod(data_dir, 0o755)
    server: subprocess.Popen[bytes] | None = None
    load: Load | None = None
    ok = True
    try:
        t0 = time.perf_counter()
        run_cli(data_dir, url, "db", "upgrade")
        report["upgrade_s"] = round(time.perf_counter() - t0, 1)
        tenants = one_tenant_per_shard(url, f"g{uuid.uuid4().hex[:6]}")
        t0 = time.perf_counter()
        tokens = {t: json.loads(run_cli(data_dir, url, "keys", "create", "--tenant", t,
                                        "--role", "owner", "--json").stdout)["token"]
                  for t in tenants}
        report["keys_s"] = round(time.perf_counter() - t0, 1)
        report["tenants"] = len(tenants)
        report["placements_before"] = placements(url)
        port_before = {t: port_of(url, t) for t in tenants}
        progress(f"{len(tenants)} tenants, one per shard; placements "
                 f"{report['placements_before']}")

        base = f"http://127.0.0.1:{args.port}"
        log_path = data_dir / "serve.log"
        with log_path.open("wb") as log:
            server = subprocess.Popen(cli(data_dir, "serve", "--host", "127.0.0.1",
                                          "--port", str(args.port)),
                                      stdout=log, stderr=subprocess.STDOUT,
                                      env=child_env(url), stdin=subprocess.DEVNULL)
        report["startup_s"] = round(wait_for_health(base, server, log_path, timeout=300), 1)
        progress(f"serving on {base}")

        load = Load(base, tokens, args.clients)
        load.start()
        time.sleep(args.before)
        load.phase = "during"
        progress(f"db add-node {host} {new_port} --wait (load going on)")
        t0 = time.perf_counter()
        add = subprocess.run(cli(data_dir, "db", "add-node", host, str(new_port), "--wait",
                                 "--json"), capture_output=True, text=True,
                             env=child_env(url), timeout=1800, check=False)
        report["add_node_s"] = round(time.perf_counter() - t0, 1)
        load.phase = "after"
        report["add_node_exit"] = add.returncode
        try:
            add_out = json.loads(add.stdout)
        except json.JSONDecodeError:
            add_out = {"stdout": add.stdout[-2000:]}
        report["add_node"] = {k: add_out.get(k) for k in ("added", "prepared", "job_id",
                                                          "mode", "rebalance")}
        if add.returncode != 0:
            report["add_node"]["stderr"] = add.stderr[-2000:]
            ok = False
        progress(f"add-node exit {add.returncode} in {report['add_node_s']} s; load "
                 f"{args.after} s more")
        time.sleep(args.after)
        load.finish()

        report["placements_after"] = placements(url)
        moved = [t for t in tenants if port_of(url, t) == new_port]
        report["tenants_moved"] = len(moved)
        report["tenants_moved_from"] = dict(Counter(str(port_before[t]) for t in moved))
        report["status"] = {k: dict(v) for k, v in sorted(load.status.items())}
        report["latency_ms"] = {k: {"n": len(v), "p50": pct(v, 50), "p95": pct(v, 95),
                                    "max": pct(v, 100)}
                                for k, v in sorted(load.latency.items())}
        retryable = sum(c.get("503", 0) for c in load.status.values())
        report["retryable_503"] = retryable
        report["failures"] = len(load.failures)
        report["failure_samples"] = load.failures[:10]
        report["leaks"] = len(load.leaks)
        report["leak_samples"] = load.leaks[:5]
        # every acknowledged write is there; nothing is there that was not written
        lost, extra = 0, 0
        for t in tenants:
            have = listed(base, tokens[t])
            lost += sum(1 for mid, c in load.acked[t].items() if have.get(mid) != c)
            unknown = [mid for mid in have if mid not in load.acked[t]]
            if len(unknown) > load.unsure[t] or any(
                    not have[m].endswith(f"of tenant {t}") for m in unknown):
                extra += len(unknown)
        report["acknowledged_writes"] = sum(len(a) for a in load.acked.values())
        report["lost_writes"] = lost
        report["unexpected_rows"] = extra
        ok = ok and moved != [] and not load.failures and not load.leaks and not lost \
            and not extra
        progress(f"moved {len(moved)} of {len(tenants)} tenants; status {report['status']}; "
                 f"failures {len(load.failures)}, leaks {len(load.leaks)}, lost {lost}")

        # erase a tenant moved to the new node: delete over HTTP, purge with the CLI
        if moved:
            t = moved[0]
            with httpx.Client(base_url=base, timeout=REQUEST_TIMEOUT,
                              headers={"Authorization": f"Bearer {tokens[t]}"}) as c:
                r = c.post("/v1/memories", json={
                    "content": f"Ada Lovelace (ada@{t}.example.org) wrote of tenant {t}",
                    "scope": SCOPE})
                r.raise_for_status()
                before = rows_on_every_node(url, t)
                r = c.post(f"/v1/admin/tenants/{t}/delete", json={"confirm": f"DELETE-{t}"})
                report["erase"] = {"tenant": t, "delete_status": r.status_code}
                at = (datetime.now(UTC) + timedelta(days=31)).strftime("%Y-%m-%dT%H:%M:%SZ")
                purge = json.loads(run_cli(data_dir, url, "tenant", "purge", "--now", at,
                                           "--json").stdout)
                after = rows_on_every_node(url, t)
                report["erase"].update(
                    rows_before=sum(before.values()),
                    nodes_before=sorted({k.split(":")[0] for k in before}),
                    purged=[p["tenant"] for p in purge.get("purged", [])],
                    purge_errors=purge.get("errors"),
                    rows_left=after,
                    key_after_status=c.post("/v1/recall", json={
                        "query": "x", "scope": SCOPE}).status_code)
            other = next(o for o in tenants if o != t)
            with httpx.Client(base_url=base, timeout=REQUEST_TIMEOUT,
                              headers={"Authorization": f"Bearer {tokens[other]}"}) as c:
                r = c.post("/v1/recall", json={"query": "Ada Lovelace", "scope": SCOPE,
                                               "k": 50})
                report["erase"]["other_tenant_recall"] = r.status_code
                report["erase"]["other_tenant_saw_it"] = t in r.text
            e = report["erase"]
            ok = ok and e["delete_status"] == 200 and t in e["purged"] and not after \
                and e["key_after_status"] == 401 and e["other_tenant_recall"] == 200 \
                and not e["other_tenant_saw_it"] and str(new_port) in e["nodes_before"]
            progress(f"erase of {t} (on {new_port}): {e['rows_before']} rows before, "
                     f"left {after or 0}")
    except (RuntimeError, OSError, httpx.HTTPError, psycopg.Error,
            subprocess.TimeoutExpired) as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        progress(report["error"])
        ok = False
    finally:
        if load is not None:
            load.finish()
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=30)
        shutil.rmtree(data_dir, ignore_errors=True)
    report["ok"] = ok
    text = json.dumps(report, indent=2, default=str)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
