#!/usr/bin/env python
"""Load: N concurrent HTTP clients against ``mnemovault serve`` (issue 9, measurements).

Starts ``mnemovault serve`` as a subprocess on 127.0.0.1 (a free port, a fresh temporary
``--data-dir``, so a fresh embedded PostgreSQL; ``DATABASE_URL`` is removed from its
environment), creates an owner key with ``mnemovault keys create`` first, waits for
``/health``, and then, for each N (default 1, 4 and 16), runs N client threads (one
``httpx.Client`` each) that alternate ``POST /v1/memories`` (remember, one synthetic
sentence) and ``POST /v1/recall`` (k = 5, a query of two words from the same vocabulary),
1:1, all in one scope per N, until the N clients together have sent ``--requests`` (N)
requests or ``--seconds`` have passed. Every request is bounded by a client timeout.

Reported per N: requests, wall seconds, throughput (req/s), p50/p95/mean/max latency per
operation (client side, ms), errors (non-2xx answers by status, transport errors by kind)
and lost writes: at the end every acknowledged write (201 with an id) is read back with
``GET /v1/memories/{id}``, and a missing id (or one whose content differs) counts as lost.

Then the server gets SIGTERM (uvicorn's graceful shutdown, then the embedded server's
stop), and the script reports whether the server process exited in time and whether a
PostgreSQL of that data directory survived it (``postgres_survived``); a survivor is then
stopped (SIGTERM to the postmaster named in its ``postmaster.pid``) so no process is left.

The clients share the 2 cores with the server: the figures are those of one machine doing
both, not of the server alone.

Usage::

    python bench/load.py                     # N = 1, 4, 16; writes bench/results/load.json
    python bench/load.py --quick             # CI: a few seconds per N, small counts
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
from _common import environment, progress

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


def wait_for_health(base: str, server: subprocess.Popen[bytes], log_path: Path) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < START_TIMEOUT:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited ({server.returncode}) before answering "
                               f"/health: {log_path.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=2.0).status_code == 200:
                return time.perf_counter() - started
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"no answer on {base}/health within {START_TIMEOUT:.0f} s")


class Round:
    """One N: the shared budget, the measurements, the acknowledged writes."""

    def __init__(self, clients: int, requests: int, seconds: float) -> None:
        self.clients = clients
        self.budget = requests
        self.deadline = time.perf_counter() + seconds
        self.scope = f"load-{clients}"
        self.lock = threading.Lock()
        self.sent = 0
        self.latency: dict[str, list[float]] = {"remember": [], "recall": []}
        self.errors: Counter[str] = Counter()
        self.server_errors = 0
        self.writes: dict[str, str] = {}  # acknowledged id -> content

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


def client_loop(base: str, token: str, rnd: Round, index: int, seed: int) -> None:
    rng = random.Random(seed * 1000 + index)
    headers = {"Authorization": f"Bearer {token}"}
    n = 0
    with httpx.Client(base_url=base, headers=headers, timeout=REQUEST_TIMEOUT) as client:
        while rnd.take():
            op = "remember" if (n + index) % 2 == 0 else "recall"  # 1:1 over the clients
            content = sentence(rng, index * 1_000_000 + n)
            body: dict[str, Any] = ({"content": content, "scope": rnd.scope}
                                    if op == "remember" else
                                    {"query": query(rng), "scope": rnd.scope, "k": 5})
            path = "/v1/memories" if op == "remember" else "/v1/recall"
            t0 = time.perf_counter()
            status: int | None = None
            error: str | None = None
            try:
                r = client.post(path, json=body)
                status = r.status_code
                if op == "remember" and status == 201:
                    with rnd.lock:
                        rnd.writes[str(r.json()["id"])] = content
            except httpx.HTTPError as exc:
                error = type(exc).__name__
            rnd.record(op, time.perf_counter() - t0, status, error)
            n += 1


def run_round(base: str, token: str, clients: int, requests: int, seconds: float,
              seed: int) -> tuple[dict[str, Any], Round]:
    rnd = Round(clients, requests, seconds)
    threads = [threading.Thread(target=client_loop, args=(base, token, rnd, i, seed),
                                name=f"load-{clients}-{i}") for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done = sum(len(v) for v in rnd.latency.values()) + sum(rnd.errors.values())
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
        "stopped_by": "count" if rnd.sent >= rnd.budget else "time",
    }
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
    p.add_argument("--clients", default="1,4,16", help="comma-separated N (1,4,16)")
    p.add_argument("--requests", type=int, default=None,
                   help="requests per N, all clients together (full: 100 x N, at least 400)")
    p.add_argument("--seconds", type=float, default=None,
                   help="time limit per N (full: 120; quick: 5)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed requests before the first N (full: 20; quick: 4)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=None,
                   help=f"write the JSON here too (full run default: {DEFAULT_OUT})")
    p.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    counts = [int(x) for x in args.clients.split(",") if x.strip()]
    seconds = args.seconds if args.seconds is not None else (5.0 if args.quick else 120.0)
    warmup = args.warmup if args.warmup is not None else (4 if args.quick else 20)
    out = args.out if args.out is not None else (None if args.quick else DEFAULT_OUT)

    report: dict[str, Any] = {"benchmark": "load", "quick": args.quick,
                              "environment": environment(),
                              "settings": {"clients": counts, "seconds_per_n": seconds,
                                           "mix": "remember:recall 1:1", "recall_k": 5,
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
        report["startup_seconds"] = round(wait_for_health(base, server, log_path), 2)
        progress(f"server up on {base} in {report['startup_seconds']} s")
        warm, _ = run_round(base, token, 1, warmup, 60.0, args.seed + 99)
        report["warmup"] = {"requests": warm["requests"], "errors": warm["errors"]}

        rounds, writes = [], {}
        for n in counts:
            budget = args.requests if args.requests is not None else (
                40 if args.quick else max(400, 100 * n))
            res, rnd = run_round(base, token, n, budget, seconds, args.seed)
            rounds.append((res, rnd))
            writes[n] = rnd.writes
            ok = ok and rnd.server_errors == 0
            progress(f"N={n}: {res['requests']} requests in {res['seconds']} s "
                     f"({res['throughput_rps']} req/s), errors {res['error_count']}")
        results = []
        for res, rnd in rounds:
            res["lost_writes"] = lost_writes(base, token, rnd.writes)
            lost = res["lost_writes"]
            ok = ok and not (lost["missing"] or lost["changed"] or lost["read_failed"])
            results.append(res)
        report["results"] = results
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
