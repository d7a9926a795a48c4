#!/usr/bin/env python
"""The edge of the HTTP API (issue 22): body limits before authentication, and the cost of
rate limiting, against ``mnemovault serve`` in subprocesses.

Starts two servers on one fresh temporary ``--data-dir`` (one embedded PostgreSQL, started
by the first; ``DATABASE_URL`` removed from their environment): one as configured (rate
limits on, the default) and one with ``MNEMOVAULT_RATE_LIMITS=false``, each on a free
loopback port, after an owner key is made with ``mnemovault keys create``. Then:

* **413 time**: an unauthenticated ``POST /v1/memories`` declaring a body of ``--big-mb``
  MB (quick: 10, full: 100), its body streamed from a raw socket until the server answers;
  seconds from the first byte sent to the status line, median of ``--repeats``; against
  the same for a small unauthenticated request (100 bytes, answered 401). Also an
  unauthenticated chunked body of the same size (no ``Content-Length``: 401 before a byte
  of it is read) and an authenticated chunked one (read up to the 1 MiB limit, then 413).
  Target: the 413 ratio under 2x. The three (small, declared, declared with only the
  head sent) are interleaved, ``2 x --repeats`` rounds, so they see the same load.
* **RSS growth**: the server's resident memory (psutil) before and after 20 such big
  requests (the declared, unauthenticated ones and the chunked authenticated ones, 10
  each). Target under 20 MB.
* **Throughput, rate limits on against off**: ``--clients`` threads (one keep-alive
  ``httpx.Client`` each) sending ``GET /v1/memories?scope=..&limit=10`` with the owner key
  (a cheap route, so the edge's share shows) for ``--seconds`` per round, rounds
  alternating between the two servers (``--rounds`` each); the ratio of the median
  req/s. Target at least 0.95x.

The clients share the machine's cores with the servers: figures are of one machine doing
both. JSON on stdout and in ``bench/results/edge.json`` (``--quick``: not written unless
``--out``); progress on stderr. Exit 1 if a server did not start or a check answered
otherwise than expected (a status other than 413/401).

Usage::

    python bench/edge.py            # 100 MB bodies, 5 repeats, 4 clients x 4 rounds x 5 s
    python bench/edge.py --quick    # CI: 10 MB, 3 repeats, 2 clients x 2 rounds x 2 s
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, progress, wait_for_health

TENANT = "bench-edge"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "edge.json"
START_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "mnemovault.cli", "--data-dir", str(data_dir), *args]


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "MNEMOVAULT_APP_DATABASE_URL")
           and not k.startswith("OTEL_")}
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["MNEMOVAULT_CHAT_PROVIDER"] = "offline"
    env.update(extra)
    return env


def start(data_dir: Path, name: str, **env: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    log = data_dir / f"serve-{name}.log"
    with log.open("wb") as f:
        proc = subprocess.Popen(cli(data_dir, "serve", "--host", "127.0.0.1", "--port",
                                    str(port)), stdout=f, stderr=subprocess.STDOUT,
                                env=child_env(**env), stdin=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}", log


def post_raw(base: str, path: str, size: int, *, chunked: bool = False,
             token: str | None = None, timeout: float = 60.0,
             send_body: bool = True) -> tuple[int, float, int]:
    """POST a body of ``size`` bytes from a raw socket, sending until the server answers;
    (status, seconds from the first byte to the status line, body bytes sent). Without
    ``send_body`` only the head goes out (declaring ``size``): the server's own time to
    answer, without the client's writing competing with it for the cores."""
    host, port = base.removeprefix("http://").split(":")
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if token:
        head.append(f"Authorization: Bearer {token}")
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}")
    request = ("\r\n".join(head) + "\r\n\r\n").encode()
    chunk = b"x" * 65536
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        t0 = time.perf_counter()
        sock.sendall(request)
        sock.setblocking(False)
        pending, sent, reply = b"", 0, b""
        deadline = t0 + timeout
        while b"\r\n" not in reply and time.perf_counter() < deadline:
            if send_body and not pending and sent < size:
                part = chunk[:size - sent]
                pending = (b"%x\r\n" % len(part) + part + b"\r\n") if chunked else part
                sent += len(part)
            want_write = [sock] if pending else []
            readable, writable, _ = select.select([sock], want_write, [], 1.0)
            if readable:
                try:
                    data = sock.recv(65536)
                except ConnectionResetError:
                    break
                if not data:
                    break
                reply += data
                continue
            if writable:
                try:
                    n = sock.send(pending)
                except (BlockingIOError, InterruptedError):
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    pending = b""
                    sent = size
                    continue
                pending = pending[n:]
        seconds = time.perf_counter() - t0
    line = reply.split(b"\r\n", 1)[0].split()
    status = int(line[1]) if len(line) > 1 and line[1].isdigit() else 0
    return status, seconds, sent - len(pending)


def timed(base: str, repeats: int, **kw: Any) -> dict[str, Any]:
    return summary([post_raw(base, "/v1/memories", **kw) for _ in range(repeats)])


def interleaved(base: str, repeats: int, kinds: dict[str, dict[str, Any]]
                ) -> dict[str, dict[str, Any]]:
    """Each kind of request once a round, ``repeats`` rounds: the kinds see the same load
    (the machine is shared; one kind after the other would compare two moments)."""
    runs: dict[str, list[tuple[int, float, int]]] = {k: [] for k in kinds}
    for _ in range(repeats):
        for k, kw in kinds.items():
            runs[k].append(post_raw(base, "/v1/memories", **kw))
    return {k: summary(v) for k, v in runs.items()}


def summary(runs: list[tuple[int, float, int]]) -> dict[str, Any]:
    return {"statuses": sorted({r[0] for r in runs}),
            "median_ms": round(statistics.median(r[1] for r in runs) * 1000, 2),
            "max_ms": round(max(r[1] for r in runs) * 1000, 2),
            "median_body_bytes_sent": int(statistics.median(r[2] for r in runs))}


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def throughput(base: str, token: str, clients: int, seconds: float) -> float:
    counts = [0] * clients
    errors: list[int] = []
    stop = time.perf_counter() + seconds

    def loop(i: int) -> None:
        with httpx.Client(base_url=base, timeout=30.0,
                          headers={"Authorization": f"Bearer {token}"}) as c:
            while time.perf_counter() < stop:
                r = c.get("/v1/memories", params={"scope": "edge", "limit": 10})
                if r.status_code == 200:
                    counts[i] += 1
                else:
                    errors.append(r.status_code)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"throughput: {len(errors)} answers were not 200: "
                           f"{sorted(set(errors))}")
    return sum(counts) / (time.perf_counter() - t0)


def stop(proc: subprocess.Popen[bytes]) -> int | None:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=30)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="CI size (about 30 s)")
    p.add_argument("--big-mb", type=float, default=None)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--clients", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--seconds", type=float, default=None)
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    q = args.quick
    big = int((args.big_mb or (10 if q else 100)) * 1_000_000)
    repeats = args.repeats or (3 if q else 5)
    clients = args.clients or (2 if q else 4)
    rounds = args.rounds or (2 if q else 4)
    seconds = args.seconds or (2.0 if q else 5.0)
    out = args.out if args.out is not None else (None if q else DEFAULT_OUT)
    report: dict[str, Any] = {
        "benchmark": "edge", "quick": q, "environment": environment(),
        "settings": {"big_body_bytes": big, "repeats": repeats, "clients": clients,
                     "rounds_per_server": rounds, "seconds_per_round": seconds,
                     "throughput_route": "GET /v1/memories?scope=edge&limit=10"}}
    data_dir = Path(tempfile.mkdtemp(prefix="mv-edge-"))
    os.chmod(data_dir, 0o755)  # the embedded server runs as another user under root
    servers: list[subprocess.Popen[bytes]] = []
    ok = True
    try:
        t0 = time.perf_counter()
        made = subprocess.run(cli(data_dir, "keys", "create", "--tenant", TENANT, "--role",
                                  "owner", "--json"), capture_output=True, text=True,
                              env=child_env(), timeout=START_TIMEOUT, check=False)
        if made.returncode != 0:
            raise RuntimeError(f"keys create failed: {made.stderr[-1500:]}")
        token = json.loads(made.stdout)["token"]
        on, base_on, log_on = start(data_dir, "limits-on")
        servers.append(on)
        wait_for_health(base_on, on, log_on, timeout=START_TIMEOUT)
        off, base_off, log_off = start(data_dir, "limits-off", MNEMOVAULT_RATE_LIMITS="false")
        servers.append(off)
        wait_for_health(base_off, off, log_off, timeout=START_TIMEOUT)
        report["startup_seconds"] = round(time.perf_counter() - t0, 2)
        progress(f"servers up in {report['startup_seconds']} s")
        with httpx.Client(base_url=base_on, headers={"Authorization": f"Bearer {token}"},
                          timeout=60) as c:
            for n in range(10):
                c.post("/v1/memories", json={"content": f"edge note {n}", "scope": "edge"}
                       ).raise_for_status()

        kinds = interleaved(base_on, repeats * 2, {
            "small": {"size": 100}, "declared": {"size": big},
            "head_only": {"size": big, "send_body": False}})
        small, declared, head_only = kinds["small"], kinds["declared"], kinds["head_only"]
        chunked_anon = timed(base_on, repeats, size=big, chunked=True)
        chunked_auth = timed(base_on, repeats, size=big, chunked=True, token=token)
        ratio = declared["median_ms"] / max(small["median_ms"], 0.01)
        report["time_to_refuse"] = {
            "small_unauthenticated_401": small, "declared_unauthenticated_413": declared,
            "chunked_unauthenticated_401": chunked_anon,
            "chunked_authenticated_413": chunked_auth,
            # the same declared 413 with no body byte sent: what is left of the ratio
            # above is then the client's own writing (kernel copies on the same 2 cores)
            "declared_413_head_only": head_only,
            "ratio_head_only_to_small": round(
                head_only["median_ms"] / max(small["median_ms"], 0.01), 2),
            "ratio_413_to_small": round(ratio, 2), "target_ratio": 2.0,
            "met": ratio < 2.0}
        ok = ok and small["statuses"] == [401] and declared["statuses"] == [413]
        ok = ok and head_only["statuses"] == [413]
        ok = ok and chunked_anon["statuses"] == [401] and chunked_auth["statuses"] == [413]
        progress(f"413 in {declared['median_ms']} ms against {small['median_ms']} ms for a "
                 f"small request (x{ratio:.2f})")

        before = rss(on.pid)
        for n in range(20):
            if n % 2:
                post_raw(base_on, "/v1/memories", big, chunked=True, token=token)
            else:
                post_raw(base_on, "/v1/memories", big)
        time.sleep(0.5)
        after = rss(on.pid)
        growth = (after - before) / 1e6
        report["rss"] = {"requests": 20, "body_bytes_each": big,
                         "before_mb": round(before / 1e6, 1), "after_mb": round(after / 1e6, 1),
                         "growth_mb": round(growth, 1), "target_mb": 20, "met": growth < 20}
        progress(f"RSS {before / 1e6:.1f} -> {after / 1e6:.1f} MB over 20 big bodies")

        throughput(base_on, token, clients, 1.0)  # warm both
        throughput(base_off, token, clients, 1.0)
        rps_on, rps_off = [], []
        for _ in range(rounds):
            rps_on.append(throughput(base_on, token, clients, seconds))
            rps_off.append(throughput(base_off, token, clients, seconds))
        tr = statistics.median(rps_on) / statistics.median(rps_off)
        report["throughput"] = {"rps_limits_on": [round(x, 1) for x in rps_on],
                                "rps_limits_off": [round(x, 1) for x in rps_off],
                                "ratio_on_to_off": round(tr, 3), "target_ratio": 0.95,
                                "met": tr >= 0.95}
        progress(f"throughput on/off: {statistics.median(rps_on):.1f} / "
                 f"{statistics.median(rps_off):.1f} req/s (x{tr:.3f})")
    except (RuntimeError, OSError, httpx.HTTPError, subprocess.TimeoutExpired) as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        progress(report["error"])
        ok = False
    finally:
        report["shutdown_returncodes"] = [stop(p) for p in reversed(servers)]
        from _common import stop_embedded

        stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
        report["environment"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["ok"] = ok
    text = json.dumps(report, indent=2)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
