#!/usr/bin/env python
"""Load: N concurrent HTTP clients against ``mnemovault serve`` (issue 9, measurements).

Starts ``mnemovault serve`` as a subprocess on 127.0.0.1 (a free port, a fresh temporary
``--data-dir``, so a fresh embedded PostgreSQL; ``DATABASE_URL`` is removed from its
environment), creates an owner key with ``mnemovault keys create`` first, waits for
``/health``, and then, for each N (default 1, 4, 16 and 32), runs N client threads (one
``httpx.Client`` each) that cycle through ``POST /v1/memories`` (remember, one synthetic
sentence), ``POST /v1/recall`` (k = 5, a query of two words from the same vocabulary) and
``DELETE /v1/memories/{id}`` (forget one of the client's own acknowledged writes), 1:1:1,
all in one scope per N, until the N clients together have sent ``--requests`` (N) requests
or ``--seconds`` have passed. One more thread probes ``GET /health`` every 50 ms meanwhile:
its latency is the floor of what N clients on two shared cores cost any request (HTTP,
threads, the GIL), against which the governed operations are read. Every request is
bounded by a client timeout.

Reported per N: requests, wall seconds, throughput (req/s), p50/p95/mean/max latency per
operation (client side, ms), errors (non-2xx answers by status, transport errors by kind)
and lost writes: at the end every acknowledged write that was not forgotten (201 with an
id) is read back with ``GET /v1/memories/{id}``, and a missing id (or one whose content
differs) counts as lost. ``ratios``: each operation's p50 at N over its p50 at 1 client
(issue 29 targets at 32 clients: remember and forget at most 6, recall at most 4).

Then the erase round (``--erase``, default 5 erases; 0 skips it): 4 writer threads
remember continuously for one subject in a scope of their own while the main thread erases
that subject every 0.5 s, without retrying: each erase's latency and status (a 409 is an
erase that did not get through against the writers; target: none, each under 2 s), and the
writers' answers by status (a write refused with 409 while an erase holds the subject is
expected and safe to retry).

Then the server gets SIGTERM (uvicorn's graceful shutdown, then the embedded server's
stop), and the script reports whether the server process exited in time and whether a
PostgreSQL of that data directory survived it (``postgres_survived``); a survivor is then
stopped (SIGTERM to the postmaster named in its ``postmaster.pid``) so no process is left.

The clients share the 2 cores with the server: the figures are those of one machine doing
both, not of the server alone.

Usage::

    python bench/load.py                     # N = 1, 4, 16, 32; writes bench/results/load.json
    python bench/load.py --quick             # CI: N = 1 and 32, 40 requests each, 3 erases
    python bench/load.py --clients 1,8 --requests 100 --seconds 20 --out /tmp/load.json

JSON on stdout (and ``--out``); progress on stderr. Exit 1 if a write was lost, a request
failed with a 5xx or a transport error, or the server did not start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, progress, wait_for_health

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results" / "load.json"
TENANT = "load"
REQUEST_TIMEOUT = 60.0
START_TIMEOUT = 300.0
STOP_TIMEOUT = 60.0

WHO = ["Ada", "the neighbour", "my sister", "the team", "Bruno", "the landlord", "Chen"]
DID = ["planted", "painted", "repaired", "sold", "bought", "booked", "cancelled", "moved"]
WHAT = ["the tomatoes", "the bike", "the kitchen shelf", "a train ticket", "the piano",
        "the garden fence", "a dentist appointment", "the blue sofa", "the beehive"]
WHEN = ["on Monday", "last week", "before the holidays", "in the morning", "after work"]


def sentence(rng: random.Random, n: int) -> str:
    return (f"{rng.choice(WHO)} {rng.choice(DID)} {rng.choice(WHAT)} {rng.choice(WHEN)} "
            f"(note {n}).")


def query(rng: random.Random) -> str:
    return f"{rng.choice(DID)} {rng.choice(WHAT).split()[-1]}"


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "mnemovault.cli", "--data-dir", str(data_dir), *args]


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "MNEMOVAULT_APP_DATABASE_URL")}
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["MNEMOVAULT_CHAT_PROVIDER"] = "offline"
    return env


def create_owner_key(data_dir: Path) -> str:
    r = subprocess.run(cli(data_dir, "keys", "create", "--tenant", TENANT, "--role", "owner",
                           "--json"), capture_output=True, text=True, env=child_env(),
                       timeout=START_TIMEOUT, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"keys create failed ({r.returncode}): {r.stderr[-2000:]}")
    return str(json.loads(r.stdout)["token"])


class Round:
    """One N: the shared budget, the measurements, the acknowledged writes."""

    def __init__(self, clients: int, requests: int, seconds: float) -> None:
        self.clients = clients
        self.budget = requests
        self.deadline = time.perf_counter() + seconds
        self.scope = f"load-{clients}"
        self.lock = threading.Lock()
        self.sent = 0
        self.latency: dict[str, list[float]] = {"remember": [], "recall": [], "forget": [],
                                                "health": []}
        self.errors: Counter[str] = Counter()
        self.server_errors = 0
        self.writes: dict[str, str] = {}  # acknowledged id -> content
        self.forgotten: set[str] = set()  # acknowledged, then forgotten (not read back)
        self.done = threading.Event()  # the clients finished (stops the health probe)

    def take(self) -> bool:
        with self.lock:
            if self.sent >= self.budget or time.perf_counter() >= self.deadline:
                return False
            self.sent += 1
            return True

    def record(self, op: str, seconds: float, status: int | None, error: str | None) -> None:
        with self.lock:
            if error is None and status is not None and 200 <= status < 300:
                self.latency[op].append(seconds * 1000)
                return
            key = f"{op}:{status}" if status is not None else f"{op}:{error}"
            self.errors[key] += 1
            if status is None or status >= 500:
                self.server_errors += 1


OPS = ("remember", "recall", "forget")


def client_loop(base: str, token: str, rnd: Round, index: int, seed: int) -> None:
    rng = random.Random(seed * 1000 + index)
    headers = {"Authorization": f"Bearer {token}"}
    own: list[str] = []  # this client's acknowledged writes not yet forgotten
    n = 0
    with httpx.Client(base_url=base, headers=headers, timeout=REQUEST_TIMEOUT) as client:
        while rnd.take():
            op = OPS[(n + index) % len(OPS)]  # 1:1:1 over the clients
            if op == "forget" and not own:
                op = "remember"
            content = sentence(rng, index * 1_000_000 + n)
            t0 = time.perf_counter()
            status: int | None = None
            error: str | None = None
            try:
                if op == "remember":
                    r = client.post("/v1/memories", json={"content": content,
                                                          "scope": rnd.scope})
                elif op == "recall":
                    r = client.post("/v1/recall", json={"query": query(rng),
                                                        "scope": rnd.scope, "k": 5})
                else:
                    mid = own.pop(0)
                    r = client.delete(f"/v1/memories/{mid}")
                    if r.status_code == 200:
                        with rnd.lock:
                            rnd.forgotten.add(mid)
                    else:
                        own.insert(0, mid)
                status = r.status_code
                if op == "remember" and status == 201:
                    mid = str(r.json()["id"])
                    own.append(mid)
                    with rnd.lock:
                        rnd.writes[mid] = content
            except httpx.HTTPError as exc:
                error = type(exc).__name__
            rnd.record(op, time.perf_counter() - t0, status, error)
            n += 1


def health_loop(base: str, rnd: Round) -> None:
    """``GET /health`` every 50 ms until the round's clients are done (the floor)."""
    with httpx.Client(base_url=base, timeout=REQUEST_TIMEOUT) as client:
        while not rnd.done.wait(0.05):
            t0 = time.perf_counter()
            status: int | None = None
            error: str | None = None
            try:
                status = client.get("/health").status_code
            except httpx.HTTPError as exc:
                error = type(exc).__name__
            rnd.record("health", time.perf_counter() - t0, status, error)


def waits_loop(pgdata: Path, rnd: Round, counts: Counter[str]) -> None:
    """Every 20 ms until the round ends, what the server's active backends wait on
    (``wait_event_type:wait_event`` and the first words of the statement), counted."""
    import psycopg

    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        conn = psycopg.connect(host=lines[4].strip(), port=int(lines[3]), user="postgres",
                               dbname="mnemovault", autocommit=True)
    except (OSError, IndexError, ValueError, psycopg.Error) as exc:
        counts[f"sampler failed: {type(exc).__name__}"] += 1
        return
    with conn:
        while not rnd.done.wait(0.02):
            counts["_ticks"] += 1
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                               "'mnemovault' AND xact_start IS NOT NULL AND pid <> "
                               "pg_backend_pid()").fetchone()
            counts["_in_transaction"] += int(row[0]) if row else 0
            for r in conn.execute(
                    "SELECT CASE WHEN state <> 'active' THEN 'client (in a writing "
                    "transaction, after)' ELSE coalesce(wait_event_type || ':' || "
                    "wait_event, 'cpu') END AS w, "
                    "left(regexp_replace(query, '\\s+', ' ', 'g'), 50) AS q "
                    "FROM pg_stat_activity WHERE datname = 'mnemovault' AND pid <> "
                    "pg_backend_pid() AND (state = 'active' OR (state LIKE 'idle in trans%%'"
                    " AND backend_xid IS NOT NULL))").fetchall():
                counts[f"{r[0]} | {r[1]}"] += 1


def run_round(base: str, token: str, clients: int, requests: int, seconds: float,
              seed: int, pgdata: Path | None = None) -> tuple[dict[str, Any], Round]:
    rnd = Round(clients, requests, seconds)
    waits: Counter[str] = Counter()
    threads = [threading.Thread(target=client_loop, args=(base, token, rnd, i, seed),
                                name=f"load-{clients}-{i}") for i in range(clients)]
    probe = threading.Thread(target=health_loop, args=(base, rnd), name="load-health")
    sampler = (threading.Thread(target=waits_loop, args=(pgdata, rnd, waits),
                                name="load-waits") if pgdata is not None else None)
    t0 = time.perf_counter()
    probe.start()
    if sampler is not None:
        sampler.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    rnd.done.set()
    probe.join()
    if sampler is not None:
        sampler.join()
    done = sum(len(v) for k, v in rnd.latency.items() if k != "health") + sum(
        n for k, n in rnd.errors.items() if not k.startswith("health:"))
    ops = {}
    for op, values in rnd.latency.items():
        ops[op] = {
            "ok": len(values),
            "p50_ms": _r(percentile(values, 50)), "p95_ms": _r(percentile(values, 95)),
            "mean_ms": _r(statistics.fmean(values) if values else None),
            "max_ms": _r(max(values) if values else None),
        }
    result = {
        "clients": clients, "requests": done, "seconds": round(wall, 3),
        "throughput_rps": round(done / wall, 2) if wall else None,
        "ops": ops, "errors": dict(sorted(rnd.errors.items())),
        "error_count": sum(rnd.errors.values()), "writes_acknowledged": len(rnd.writes),
        "writes_forgotten": len(rnd.forgotten),
        "stopped_by": "count" if rnd.sent >= rnd.budget else "time",
    }
    if pgdata is not None:
        ticks, open_tx = waits.pop("_ticks", 0), waits.pop("_in_transaction", 0)
        governed = sum(len(rnd.latency[op]) for op in OPS)
        # Little's law: backends inside a transaction on average, over the rate of governed
        # operations: the transaction time (pooled connection held) per operation, in ms
        in_progress = open_tx / ticks if ticks else None
        result["transactions_open_mean"] = (round(in_progress, 2)
                                            if in_progress is not None else None)
        result["transaction_ms_per_op"] = (round(in_progress / (governed / wall) * 1000, 1)
                                           if in_progress is not None and governed else None)
        result["waits_top"] = dict(waits.most_common(12))
    return result, rnd


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def lost_writes(base: str, token: str, writes: dict[str, str]) -> dict[str, int]:
    """Read every acknowledged write back by id: missing (404), changed content, or a
    failed read."""
    missing = changed = failed = 0
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"},
                      timeout=REQUEST_TIMEOUT) as client:
        for mid, content in writes.items():
            try:
                r = client.get(f"/v1/memories/{mid}")
            except httpx.HTTPError:
                failed += 1
                continue
            if r.status_code == 404:
                missing += 1
            elif r.status_code != 200:
                failed += 1
            elif r.json()["content"] != content:
                changed += 1
    return {"checked": len(writes), "missing": missing, "changed": changed,
            "read_failed": failed}


ERASE_WRITERS = 4
ERASE_SCOPE = "load-erase"
ERASE_SUBJECT = "erase-subject"


def erase_round(base: str, token: str, erases: int, seed: int) -> dict[str, Any]:
    """4 writers remember for one subject; the main thread erases it ``erases`` times, one
    every 0.5 s, never retrying (module docstring)."""
    headers = {"Authorization": f"Bearer {token}"}
    stop = threading.Event()
    lock = threading.Lock()
    writes: Counter[str] = Counter()
    write_ms: list[float] = []

    def writer(index: int) -> None:
        rng = random.Random(seed * 7919 + index)
        n = 0
        with httpx.Client(base_url=base, headers=headers, timeout=REQUEST_TIMEOUT) as client:
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    r = client.post("/v1/memories", json={
                        "content": sentence(rng, index * 1_000_000 + n),
                        "scope": ERASE_SCOPE, "subject": ERASE_SUBJECT})
                    key = str(r.status_code)
                except httpx.HTTPError as exc:
                    key = type(exc).__name__
                with lock:
                    writes[key] += 1
                    if key == "201":
                        write_ms.append((time.perf_counter() - t0) * 1000)
                n += 1

    threads = [threading.Thread(target=writer, args=(i,), name=f"erase-writer-{i}")
               for i in range(ERASE_WRITERS)]
    for t in threads:
        t.start()
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    erased = 0
    try:
        time.sleep(1.0)  # the writers get going
        with httpx.Client(base_url=base, headers=headers, timeout=REQUEST_TIMEOUT) as client:
            for _ in range(erases):
                t0 = time.perf_counter()
                try:
                    r = client.post(f"/v1/subjects/{ERASE_SUBJECT}/erase",
                                    json={"scope": ERASE_SCOPE})
                    key = str(r.status_code)
                    if r.status_code == 200:
                        erased += len(r.json()["deleted"])
                except httpx.HTTPError as exc:
                    key = type(exc).__name__
                statuses[key] += 1
                latencies.append((time.perf_counter() - t0) * 1000)
                time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join()
    return {
        "writers": ERASE_WRITERS, "erases": erases,
        "erase_status": dict(sorted(statuses.items())),
        "erase_ms": [round(x, 1) for x in latencies],
        "erase_p50_ms": _r(percentile(latencies, 50)),
        "erase_max_ms": _r(max(latencies) if latencies else None),
        "memories_erased": erased,
        "writer_status": dict(sorted(writes.items())),
        "writer_p50_ms": _r(percentile(write_ms, 50)),
        "within_target": (statuses.get("200", 0) == erases
                          and max(latencies, default=0.0) < 2000.0),
    }


def ratios(results: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Each operation's p50 at N over its p50 at the smallest N (1 client by default)."""
    if not results:
        return {}
    base = results[0]["ops"]
    out: dict[str, dict[str, float | None]] = {}
    for res in results[1:]:
        row: dict[str, float | None] = {}
        for op, figures in res["ops"].items():
            b, x = base.get(op, {}).get("p50_ms"), figures.get("p50_ms")
            row[op] = round(x / b, 2) if b and x else None
        out[str(res["clients"])] = row
    return out


def postgres_pids(pgdata: Path) -> list[int]:
    """PIDs of processes whose command line names ``pgdata`` (the postmaster, ``-D
    <pgdata>``; its backends name only themselves, so the postmaster.pid file is read too)."""
    pids: set[int] = set()
    pidfile = pgdata / "postmaster.pid"
    try:
        first = pidfile.read_text().split("\n", 1)[0].strip()
        if first.isdigit():
            pids.add(int(first))
    except OSError:
        pass
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
        except OSError:
            continue
        if "postgres" in cmdline and str(pgdata) in cmdline:
            pids.add(int(proc.name))
    return sorted(p for p in pids if _alive(p))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has exited
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def stop_server(server: subprocess.Popen[bytes], pgdata: Path) -> dict[str, Any]:
    """SIGTERM, wait; report whether the server and a PostgreSQL of ``pgdata`` exited.
    Whatever survived is then stopped, by PID (SIGKILL for the server after the wait,
    SIGTERM for the postmaster: PostgreSQL's own smart shutdown)."""
    report: dict[str, Any] = {"signal": "SIGTERM"}
    t0 = time.perf_counter()
    server.send_signal(signal.SIGTERM)
    try:
        report["server_returncode"] = server.wait(timeout=STOP_TIMEOUT)
        report["server_exited"] = True
    except subprocess.TimeoutExpired:
        report["server_exited"] = False
        server.kill()
        server.wait(timeout=30)
    report["server_stop_seconds"] = round(time.perf_counter() - t0, 2)
    deadline = time.perf_counter() + 15  # the postmaster may take a moment after its client
    survivors = postgres_pids(pgdata)
    while survivors and time.perf_counter() < deadline:
        time.sleep(0.5)
        survivors = postgres_pids(pgdata)
    report["postgres_survived"] = bool(survivors)
    if survivors:
        report["postgres_pids"] = survivors
        progress(f"PostgreSQL of {pgdata} survived the server: pids {survivors}; stopping it")
        postmaster = _postmaster_pid(pgdata)
        for pid in [postmaster] if postmaster in survivors else survivors:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.perf_counter() + 30
        while postgres_pids(pgdata) and time.perf_counter() < deadline:
            time.sleep(0.5)
        report["postgres_left_after_cleanup"] = postgres_pids(pgdata)
    return report


def _postmaster_pid(pgdata: Path) -> int | None:
    try:
        first = (pgdata / "postmaster.pid").read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(first) if first.isdigit() else None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="CI size: 40 requests or 5 s per N, no result file")
    p.add_argument("--clients", default=None,
                   help="comma-separated N (full: 1,4,16,32; quick: 1,32)")
    p.add_argument("--requests", type=int, default=None,
                   help="requests per N, all clients together (full: 100 x N, at least 400)")
    p.add_argument("--seconds", type=float, default=None,
                   help="time limit per N (full: 120; quick: 5)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed requests before the first N (full: 20; quick: 4)")
    p.add_argument("--erase", type=int, default=None,
                   help="erases against 4 busy writers after the rounds (full: 10; quick: "
                        "3; 0: no erase round)")
    p.add_argument("--waits", action="store_true",
                   help="sample what the server's backends wait on (pg_stat_activity, every "
                        "20 ms) and report the most frequent per N")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=None,
                   help=f"write the JSON here too (full run default: {DEFAULT_OUT})")
    p.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    clients = args.clients or ("1,32" if args.quick else "1,4,16,32")
    counts = [int(x) for x in clients.split(",") if x.strip()]
    seconds = args.seconds if args.seconds is not None else (5.0 if args.quick else 120.0)
    warmup = args.warmup if args.warmup is not None else (4 if args.quick else 20)
    out = args.out if args.out is not None else (None if args.quick else DEFAULT_OUT)

    report: dict[str, Any] = {"benchmark": "load", "quick": args.quick,
                              "environment": environment(),
                              "settings": {"clients": counts, "seconds_per_n": seconds,
                                           "mix": "remember:recall:forget 1:1:1",
                                           "recall_k": 5,
                                           "warmup_requests": warmup, "seed": args.seed}}
    data_dir = Path(tempfile.mkdtemp(prefix="mv-load-"))
    os.chmod(data_dir, 0o755)  # the embedded server runs as another user under root
    log_path = data_dir / "serve.log"
    server: subprocess.Popen[bytes] | None = None
    ok = True
    try:
        t0 = time.perf_counter()
        token = create_owner_key(data_dir)
        report["key_seconds"] = round(time.perf_counter() - t0, 2)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with log_path.open("wb") as log:
            server = subprocess.Popen(cli(data_dir, "serve", "--host", "127.0.0.1",
                                          "--port", str(port)),
                                      stdout=log, stderr=subprocess.STDOUT, env=child_env(),
                                      stdin=subprocess.DEVNULL)
        report["startup_seconds"] = round(
            wait_for_health(base, server, log_path, timeout=START_TIMEOUT), 2)
        progress(f"server up on {base} in {report['startup_seconds']} s")
        warm, _ = run_round(base, token, 1, warmup, 60.0, args.seed + 99)
        report["warmup"] = {"requests": warm["requests"], "errors": warm["errors"]}

        rounds, writes = [], {}
        for n in counts:
            budget = args.requests if args.requests is not None else (
                40 if args.quick else max(400, 100 * n))
            res, rnd = run_round(base, token, n, budget, seconds, args.seed,
                                 data_dir / "pg" if args.waits else None)
            rounds.append((res, rnd))
            writes[n] = rnd.writes
            ok = ok and rnd.server_errors == 0
            progress(f"N={n}: {res['requests']} requests in {res['seconds']} s "
                     f"({res['throughput_rps']} req/s), errors {res['error_count']}")
        results = []
        for res, rnd in rounds:
            res["lost_writes"] = lost_writes(base, token, {
                k: v for k, v in rnd.writes.items() if k not in rnd.forgotten})
            lost = res["lost_writes"]
            ok = ok and not (lost["missing"] or lost["changed"] or lost["read_failed"])
            results.append(res)
        report["results"] = results
        report["ratios_p50"] = ratios(results)
        erases = args.erase if args.erase is not None else (3 if args.quick else 10)
        if erases:
            report["erase"] = erase_round(base, token, erases, args.seed)
            progress(f"erase against {ERASE_WRITERS} writers: {report['erase']['erase_status']}"
                     f", p50 {report['erase']['erase_p50_ms']} ms, max "
                     f"{report['erase']['erase_max_ms']} ms")
            ok = ok and not any(k.startswith("5") or not k.isdigit()
                                for k in [*report["erase"]["erase_status"],
                                          *report["erase"]["writer_status"]])
    except (RuntimeError, OSError, httpx.HTTPError, subprocess.TimeoutExpired) as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        progress(report["error"])
        ok = False
    finally:
        if server is not None:
            report["shutdown"] = stop_server(server, data_dir / "pg")
        report["environment"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        if not ok and log_path.exists():
            report["server_log_tail"] = log_path.read_text(errors="replace")[-3000:]
        if args.keep:
            report["data_dir"] = str(data_dir)
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
    report["ok"] = ok
    text = json.dumps(report, indent=2)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
