#!/usr/bin/env python
"""Black-box check of KEK rotation on a live deployment (issue 29, "Done when").

With ``mnemovault serve`` running and a client writing over HTTP, ``mnemovault kek rotate
--retire`` from the CLI (same data dir) completes; the server answers no 5xx during or
after it; every value written before, during and after reveals for the owner; and
``serve`` restarts cleanly afterwards.

What it does, all as a user would (subprocesses of the CLI, HTTP to the server):

1. a fresh temporary data dir (a fresh embedded PostgreSQL); ``mnemovault keys create
   --tenant kek --role owner --json`` (the tenant is created with its first key);
2. ``mnemovault serve --host 127.0.0.1 --port PORT`` (the local embedder, the default);
3. ``--preload`` memories through ``POST /v1/memories/batch`` (each with its own e-mail
   address and phone number, so each goes to the vault with its own data keys: the rotation
   has that many to rewrap);
4. one client thread writes ``POST /v1/memories`` continuously (three in four hold an
   e-mail address and a UK phone number, the fourth is plain text), and every fifth write
   also reveals an earlier memory (``GET /v1/memories/{id}?reveal=true``, compared with
   what was written) and recalls with ``reveal: true``; every status is recorded with its
   phase (before, during a rotation, between two, after);
5. after ``--before`` seconds, ``mnemovault kek rotate --retire --json`` runs ``--rotations``
   times (``--gap`` seconds apart; 0: in a row), timed, while the writer goes on; then
   ``--after`` seconds more of writes;
6. every memory written is revealed as the owner and compared with what was written; the
   key file must hold one version, the current one;
7. ``serve`` gets SIGTERM (it must exit, and the embedded PostgreSQL with it), is started
   again on the same port, answers ``/health``, and every memory is revealed again;
   ``mnemovault audit verify`` (the tenant and ``_system``), ``audit verify`` of the JSON
   Lines mirror file (``_system`` passes with exit 3, no rows yet: the name is accepted),
   and ``mnemovault vault export`` (every value written must be in it)
   run against the restarted deployment; the ``KEK_ROTATE`` rows of the database
   (``audit export``) and of the mirror are counted; then ``serve`` is stopped again.

Usage::

    python scripts/kek_rotate_check.py            # two rotations in a row; the result file
    python scripts/kek_rotate_check.py --rotations 1 --out /tmp/k1.json
    python scripts/kek_rotate_check.py --preload 2000 --rotations 3 --gap 2 --out /tmp/k.json

JSON on stdout and in ``--out`` (default ``bench/results/kek_rotate_check.json``), a
summary on stderr. Exit 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "src"))  # environment() reports the tree the subprocesses run
from _common import environment, progress, wait_for_health  # noqa: E402
from load import postgres_pids  # noqa: E402

DEFAULT_OUT = ROOT / "bench" / "results" / "kek_rotate_check.json"
TENANT = "kek"
START_TIMEOUT = 300.0
STOP_TIMEOUT = 90.0
CLI_TIMEOUT = 600.0
REQUEST_TIMEOUT = 60.0
SUBJECTS = 40  # per scope: each (scope, subject) has its content key, rewrapped by a rotation


def child_env() -> dict[str, str]:
    """The environment of every subprocess: this tree's ``src`` first on PYTHONPATH (the
    code checked is the code of this checkout), the embedded database (no DATABASE_URL),
    the local embedder, one key file (the data dir's default ``kek.json``)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "MNEMOVAULT_APP_DATABASE_URL", "MNEMOVAULT_KEK",
                        "MNEMOVAULT_KEK_FILE", "MNEMOVAULT_KEY_STORE", "MNEMOVAULT_EMBEDDER",
                        "MNEMOVAULT_DATA_DIR", "MNEMOVAULT_USE_SERVER")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                      env.get("PYTHONPATH")]))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["MNEMOVAULT_CHAT_PROVIDER"] = "offline"
    env["MNEMOVAULT_USE_SERVER"] = "false"
    return env


def cli(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "mnemovault.cli", "--data-dir", str(data_dir),
            "--tenant", TENANT, *args]


def run_cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli(data_dir, *args), capture_output=True, text=True,
                          env=child_env(), timeout=CLI_TIMEOUT, check=False,
                          stdin=subprocess.DEVNULL)


def content_for(i: int) -> tuple[str, bool]:
    """The i-th memory's text, and whether it holds personal values (3 in 4 do: an e-mail
    address unique to it and a phone number of the UK drama range 020 7946 0xxx)."""
    if i % 4 == 3:
        return f"Plain note {i}: water the tomatoes before the trip", False
    email = f"kek{i}.{uuid.uuid4().hex[:8]}@example.org"
    phone = f"+44 20 7946 {i % 1000:04d}"
    return f"Write to {email} or call {phone} about note {i}", True


class Server:
    def __init__(self, data_dir: Path, port: int, label: str) -> None:
        self.data_dir = data_dir
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = data_dir / f"serve-{label}.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(cli(data_dir, "serve", "--host", "127.0.0.1",
                                             "--port", str(port)),
                                         stdout=log, stderr=subprocess.STDOUT,
                                         env=child_env(), stdin=subprocess.DEVNULL)
        self.startup_seconds = round(
            wait_for_health(self.base, self.proc, self.log_path, timeout=START_TIMEOUT), 2)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> dict[str, Any]:
        """SIGTERM; whether the server and the embedded PostgreSQL exited in time."""
        report: dict[str, Any] = {}
        t0 = time.perf_counter()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            report["returncode"] = self.proc.wait(timeout=STOP_TIMEOUT)
            report["exited"] = True
        except subprocess.TimeoutExpired:
            report["exited"] = False
            self.proc.kill()
            self.proc.wait(timeout=30)
        report["stop_seconds"] = round(time.perf_counter() - t0, 2)
        pgdata = self.data_dir / "pg"
        deadline = time.perf_counter() + 20
        while postgres_pids(pgdata) and time.perf_counter() < deadline:
            time.sleep(0.5)
        left = postgres_pids(pgdata)
        report["postgres_left"] = left
        for pid in left:  # never leave a server behind (by PID: the postmaster first)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        log = self.log()
        report["tracebacks_in_log"] = log.count("Traceback")
        report["log_errors"] = [ln[:300] for ln in log.splitlines()
                                if " ERROR " in ln or ln.startswith("ERROR")][:10]
        report["clean"] = (report["exited"] and report.get("returncode") in (0, -15, 143)
                           and not left and report["tracebacks_in_log"] == 0)
        return report


class Writer(threading.Thread):
    """One client writing continuously; every status recorded with the phase it fell in."""

    def __init__(self, base: str, token: str, start_index: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.base, self.token = base, token
        self.i = start_index
        self.rng = random.Random(seed)
        self.phase = "before"  # set by the main thread
        self.stop_event = threading.Event()
        self.written: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.statuses: Counter[str] = Counter()  # "phase op status"
        self.errors: list[str] = []
        self.live_mismatches = 0
        self.latencies: dict[str, list[float]] = {}

    def _note(self, phase_at_send: str, op: str, status: str, seconds: float) -> str:
        phase = "during" if "during" in (phase_at_send, self.phase) else phase_at_send
        self.statuses[f"{phase} {op} {status}"] += 1
        self.latencies.setdefault(f"{phase} {op}", []).append(seconds)
        return phase

    def _call(self, client: httpx.Client, op: str, method: str, url: str,
              **kw: Any) -> tuple[httpx.Response | None, str]:
        sent = self.phase
        t0 = time.perf_counter()
        try:
            r = client.request(method, url, **kw)
        except httpx.HTTPError as exc:
            phase = self._note(sent, op, type(exc).__name__, time.perf_counter() - t0)
            self.errors.append(f"{phase} {op}: {type(exc).__name__}: {exc}"[:300])
            return None, phase
        phase = self._note(sent, op, str(r.status_code), time.perf_counter() - t0)
        if r.status_code >= 500:
            self.errors.append(f"{phase} {op} {r.status_code}: {r.text[:300]}")
        return r, phase

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.base, headers=headers,
                          timeout=REQUEST_TIMEOUT) as client:
            while not self.stop_event.is_set():
                text, personal = content_for(self.i)
                r, phase = self._call(client, "remember", "POST", "/v1/memories",
                                      json={"content": text, "scope": "s",
                                            "subject": f"person{self.i % SUBJECTS}"})
                if r is not None and r.status_code == 201:
                    with self.lock:
                        self.written.append({"id": r.json()["id"], "content": text,
                                             "phase": phase, "personal": personal})
                if self.i % 5 == 0 and self.written:
                    with self.lock:
                        pick = self.rng.choice(self.written)
                    r, _ = self._call(client, "reveal", "GET", f"/v1/memories/{pick['id']}",
                                      params={"reveal": "true"})
                    if r is not None and r.status_code == 200 \
                            and r.json().get("content") != pick["content"]:
                        self.live_mismatches += 1
                    self._call(client, "recall", "POST", "/v1/recall",
                               json={"query": "who to write to about the note", "scope": "s",
                                     "k": 3, "reveal": True})
                self.i += 1


def preload(base: str, token: str, n: int) -> tuple[list[dict[str, Any]], Counter[str]]:
    """``n`` memories with personal values, 100 per ``POST /v1/memories/batch``."""
    written: list[dict[str, Any]] = []
    statuses: Counter[str] = Counter()
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=300.0) as client:
        for start in range(0, n, 100):
            texts = [content_for(1_000_000 + j * 4)[0]
                     for j in range(start, min(n, start + 100))]
            r = client.post("/v1/memories/batch", json={"items": [
                {"content": t, "scope": "pre", "subject": f"pre{k % SUBJECTS}"}
                for k, t in enumerate(texts)]})
            statuses[str(r.status_code)] += 1
            if r.status_code == 201:
                written += [{"id": rec["id"], "content": t, "phase": "preload",
                             "personal": True} for rec, t in zip(r.json(), texts, strict=True)]
            else:
                progress(f"preload batch answered {r.status_code}: {r.text[:300]}")
    return written, statuses


def reveal_all(base: str, token: str, written: list[dict[str, Any]]) -> dict[str, Any]:
    """Reveal every memory as the owner; count what does not come back as written."""
    headers = {"Authorization": f"Bearer {token}"}
    statuses: Counter[str] = Counter()
    mismatches: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with httpx.Client(base_url=base, headers=headers, timeout=REQUEST_TIMEOUT) as client:
        for w in written:
            try:
                r = client.get(f"/v1/memories/{w['id']}", params={"reveal": "true"})
            except httpx.HTTPError as exc:
                statuses[type(exc).__name__] += 1
                mismatches.append({"id": w["id"], "phase": w["phase"], "error": str(exc)})
                continue
            statuses[str(r.status_code)] += 1
            got = r.json().get("content") if r.status_code == 200 else None
            if got != w["content"]:
                mismatches.append({"id": w["id"], "phase": w["phase"],
                                   "status": r.status_code, "expected": w["content"],
                                   "got": got if got is not None else r.text[:300]})
    by_phase = Counter(m["phase"] for m in mismatches)
    return {"revealed": len(written), "statuses": dict(statuses),
            "mismatches": len(mismatches), "mismatches_by_phase": dict(by_phase),
            "first_mismatches": mismatches[:5],
            "seconds": round(time.perf_counter() - t0, 2)}


def key_file(data_dir: Path) -> dict[str, Any]:
    body = json.loads((data_dir / "kek.json").read_text())
    return {"current": int(body["current"]), "versions": sorted(int(v) for v in body["keys"])}


def after_restart_cli(data_dir: Path, written: list[dict[str, Any]],
                      rotations: int) -> dict[str, Any]:
    """audit verify (tenant, _system, the mirror file), vault export, KEK_ROTATE rows."""
    res: dict[str, Any] = {}
    for label, args in (("audit_verify", ("audit", "verify", "--json")),
                        ("audit_verify_system", ("--tenant", "_system", "audit", "verify",
                                                 "--json"))):
        argv = list(args)
        if argv[0] == "--tenant":  # a global option: before the command
            r = subprocess.run([sys.executable, "-m", "mnemovault.cli", "--data-dir",
                                str(data_dir), *argv], capture_output=True, text=True,
                               env=child_env(), timeout=CLI_TIMEOUT, check=False,
                               stdin=subprocess.DEVNULL)
        else:
            r = run_cli(data_dir, *argv)
        res[label] = {"exit": r.returncode, "out": r.stdout.strip()[-600:],
                      "err": r.stderr.strip()[-600:]}
    mirror = data_dir / "audit" / f"{TENANT}.jsonl"
    if mirror.exists():
        r = run_cli(data_dir, "audit", "verify", str(mirror), "--json")
        res["audit_verify_mirror"] = {"exit": r.returncode, "out": r.stdout.strip()[-600:],
                                      "err": r.stderr.strip()[-600:]}
        mirror_ops = Counter(json.loads(ln).get("operation")
                             for ln in mirror.read_text().splitlines() if ln.strip())
    else:
        res["audit_verify_mirror"] = {"exit": None, "err": f"no mirror file {mirror}"}
        mirror_ops = Counter()
    r = run_cli(data_dir, "audit", "export")
    db_ops = Counter(json.loads(ln).get("operation")
                     for ln in r.stdout.splitlines() if ln.strip()) if r.returncode == 0 \
        else Counter()
    res["audit_export_exit"] = r.returncode
    res["kek_rotate_rows"] = {"database": db_ops.get("KEK_ROTATE", 0),
                              "mirror": mirror_ops.get("KEK_ROTATE", 0),
                              "rotations": rotations}
    res["audit_rows"] = {"database": sum(db_ops.values()), "mirror": sum(mirror_ops.values())}
    r = run_cli(data_dir, "vault", "export")
    res["vault_export_exit"] = r.returncode
    if r.returncode == 0:
        values = {json.loads(ln)["value"] for ln in r.stdout.splitlines() if ln.strip()}
        wanted = set()
        for w in written:
            if not w["personal"]:
                continue
            words = w["content"].split()
            wanted.add(words[2])                 # the e-mail address
            wanted.add(" ".join(words[5:9]))     # the phone number as written
        missing = sorted(wanted - values)
        res["vault_export"] = {"entries": len(values), "values_written": len(wanted),
                               "missing": len(missing), "first_missing": missing[:5]}
    else:
        res["vault_export"] = {"err": r.stderr.strip()[-600:]}
    return res


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=9820)
    p.add_argument("--rotations", type=int, default=2, help="kek rotate --retire runs")
    p.add_argument("--gap", type=float, default=0.0,
                   help="seconds of writes between two rotations (0: in a row)")
    p.add_argument("--preload", type=int, default=500,
                   help="memories with personal values stored before the writer starts")
    p.add_argument("--before", type=float, default=5.0,
                   help="seconds of writes before the first rotation")
    p.add_argument("--after", type=float, default=5.0,
                   help="seconds of writes after the last rotation")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report: dict[str, Any] = {
        "check": "kek_rotate_check", "issue": 29,
        "command": "python scripts/kek_rotate_check.py " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "environment": environment(),
        "settings": {"rotations": args.rotations, "gap_seconds": args.gap,
                     "preload": args.preload, "before_seconds": args.before,
                     "after_seconds": args.after, "port": args.port, "tenant": TENANT,
                     "embedder": "local (default)", "database": "embedded"}}
    data_dir = Path(tempfile.mkdtemp(prefix="mv-kekcheck-"))
    os.chmod(data_dir, 0o755)  # the embedded server runs as another user under root
    server: Server | None = None
    writer: Writer | None = None
    checks: dict[str, bool] = {}
    try:
        made = run_cli(data_dir, "keys", "create", "--role", "owner", "--json")
        if made.returncode != 0:
            raise RuntimeError(f"keys create failed ({made.returncode}): {made.stderr[-2000:]}")
        token = json.loads(made.stdout)["token"]
        server = Server(data_dir, args.port, "first")
        report["startup_seconds"] = server.startup_seconds
        progress(f"serve up on {server.base} in {server.startup_seconds} s")

        t0 = time.perf_counter()
        pre, pre_status = preload(server.base, token, args.preload)
        report["preload"] = {"memories": len(pre), "batch_statuses": dict(pre_status),
                             "seconds": round(time.perf_counter() - t0, 2)}
        progress(f"preloaded {len(pre)} memories in {report['preload']['seconds']} s")

        writer = Writer(server.base, token, 0, args.seed)
        writer.start()
        time.sleep(args.before)
        rotations = []
        for n in range(args.rotations):
            if n and args.gap:
                writer.phase = "between"
                time.sleep(args.gap)
            writes_at_start = len(writer.written)
            writer.phase = "during"
            t0 = time.perf_counter()
            r = run_cli(data_dir, "kek", "rotate", "--retire", "--json")
            seconds = round(time.perf_counter() - t0, 2)
            writer.phase = "between" if n + 1 < args.rotations else "after"
            try:
                out = json.loads(r.stdout) if r.returncode == 0 else None
            except json.JSONDecodeError:
                out = None
            rotations.append({"exit": r.returncode, "seconds": seconds, "result": out,
                              "writes_during": len(writer.written) - writes_at_start,
                              "stderr_tail": r.stderr.strip()[-1500:]})
            progress(f"rotation {n + 1}: exit {r.returncode} in {seconds} s, {out}, "
                     f"{len(writer.written) - writes_at_start} writes during it")
        report["rotations"] = rotations
        time.sleep(args.after)
        writer.stop_event.set()
        writer.join(REQUEST_TIMEOUT + 10)

        written = pre + writer.written
        statuses = dict(sorted(writer.statuses.items()))
        five = {k: v for k, v in statuses.items() if k.rsplit(" ", 1)[1].startswith("5")}
        transport = {k: v for k, v in statuses.items()
                     if not k.rsplit(" ", 1)[1].isdigit()}
        phases = Counter(w["phase"] for w in written)
        report["client"] = {
            "writes": len(written), "writes_by_phase": dict(phases),
            "writes_with_personal_values": sum(w["personal"] for w in written),
            "statuses": statuses, "5xx": sum(five.values()), "5xx_by_kind": five,
            "transport_errors": sum(transport.values()), "first_errors": writer.errors[:10],
            "live_reveal_mismatches": writer.live_mismatches,
            "latency_ms_median": {k: round(1000 * sorted(v)[len(v) // 2], 1)
                                  for k, v in sorted(writer.latencies.items())},
            "latency_ms_max": {k: round(1000 * max(v), 1)
                               for k, v in sorted(writer.latencies.items())}}
        report["key_file_after"] = key_file(data_dir)
        report["reveal_after_rotation"] = reveal_all(server.base, token, written)
        progress(f"{len(written)} written ({dict(phases)}); 5xx "
                 f"{report['client']['5xx']}; reveal mismatches "
                 f"{report['reveal_after_rotation']['mismatches']}")

        report["stop_first"] = server.stop()
        server = None
        try:
            server = Server(data_dir, args.port, "restart")
            report["restart"] = {"ok": True, "startup_seconds": server.startup_seconds}
        except RuntimeError as exc:
            report["restart"] = {"ok": False, "error": str(exc)[-2000:]}
        if server is not None:
            health = httpx.get(f"{server.base}/health", timeout=10)
            report["restart"]["health"] = {"status": health.status_code, "body": health.json()}
            report["reveal_after_restart"] = reveal_all(server.base, token, written)
            report["cli_after_restart"] = after_restart_cli(data_dir, written, args.rotations)
            report["stop_restart"] = server.stop()
            server = None

        cl = report.get("cli_after_restart", {})
        kf = report["key_file_after"]
        checks = {
            "rotations_completed": all(r["exit"] == 0 for r in rotations),
            "no_5xx": report["client"]["5xx"] == 0 and not any(
                k.startswith("5") for k in report["reveal_after_rotation"]["statuses"]),
            "no_transport_errors": report["client"]["transport_errors"] == 0,
            "writes_in_every_phase": all(phases.get(p, 0) > 0
                                         for p in ("before", "during", "after")),
            "reveal_after_rotation": report["reveal_after_rotation"]["mismatches"] == 0
                                     and writer.live_mismatches == 0,
            "key_file_one_version": kf["versions"] == [kf["current"]]
                                    and kf["current"] == args.rotations + 1,
            "first_stop_clean": report["stop_first"]["clean"],
            "restart_ok": report["restart"]["ok"]
                          and report["restart"].get("health", {}).get("status") == 200,
            "reveal_after_restart": report.get("reveal_after_restart", {}).get(
                "mismatches", 1) == 0,
            "audit_verify": cl.get("audit_verify", {}).get("exit") == 0,
            # _system: accepted as a name (exit 2 would refuse it); 3 = no rows on it yet
            "audit_verify_system": cl.get("audit_verify_system", {}).get("exit") in (0, 3),
            "audit_verify_mirror": cl.get("audit_verify_mirror", {}).get("exit") == 0,
            "kek_rotate_rows_in_mirror": bool(cl) and cl["kek_rotate_rows"]["database"]
                                         == cl["kek_rotate_rows"]["mirror"]
                                         >= args.rotations,
            "vault_export_complete": cl.get("vault_export", {}).get("missing", 1) == 0,
            "second_stop_clean": report.get("stop_restart", {}).get("clean", False),
        }
    except (RuntimeError, OSError, httpx.HTTPError, subprocess.TimeoutExpired,
            json.JSONDecodeError, KeyError) as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        progress(report["error"])
        checks["no_error"] = False
    finally:
        if writer is not None:
            writer.stop_event.set()
        if server is not None:
            report["stop_on_error"] = server.stop()
            report["server_log_tail"] = server.log()[-3000:]
        report["environment"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        if args.keep:
            report["data_dir"] = str(data_dir)
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
    ok = bool(checks) and all(checks.values())
    report["checks"] = checks
    report["figures"] = {
        "writes": report.get("client", {}).get("writes"),
        "5xx": report.get("client", {}).get("5xx"),
        "reveal_mismatches": (report.get("reveal_after_rotation", {}).get("mismatches"),
                              report.get("reveal_after_restart", {}).get("mismatches")),
        "rotation_seconds": [r["seconds"] for r in report.get("rotations", [])],
        "restart_ok": report.get("restart", {}).get("ok"),
    }
    report["ok"] = ok
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    progress(("OK" if ok else "FAILED") + f": {report['figures']}; failed checks: "
             f"{[k for k, v in checks.items() if not v]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
