"""How long CLI commands take, end to end, as a user runs them (issue 28).

Each command is a fresh process (``python -m mnemovault.cli …``, what the console script
runs). Reported: the median (and min, max) of ``--repeat`` runs (default 5) of ``--help``,
``list``, ``recall`` and ``remember``, without a server and with ``mnemovault server start``
running for the same data dir, each also as a ratio against ``python -c pass`` (the baseline:
interpreter start on this machine now, run once before each run of the command, so the
ratio follows the machine's load); and ``import`` of the
demo conversation (18 records) without a server, with the model load reported apart
(``model_seconds``) from the import's own time.

Targets (issue 28): ``list`` under 1.0 s without a server; with one, ``list`` under 0.3 s
and ``recall`` under 0.5 s (as ratios: list under 10x and recall under 15x the baseline).

    python bench/cli.py                 # 5 runs each, writes bench/results/cli.json
    python bench/cli.py --quick         # 1 run each, --help and list only, no server (CI)
    python bench/cli.py --server-only   # local --help and list, then all four with a server
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

SRC = str(Path(__file__).resolve().parents[1] / "src")
sys.path.insert(0, SRC)  # environment() names the tree whose commands are timed
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, progress  # noqa: E402


def _env(**extra: str) -> dict[str, str]:
    pp = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": SRC + (os.pathsep + pp if pp else ""),
            "TOKENIZERS_PARALLELISM": "false", **extra}


def _run(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    res = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    return time.perf_counter() - started, res


def _timed(name: str, args: list[str], env: dict[str, str], repeat: int,
           baseline: float | None) -> dict[str, Any]:
    """The command's median of ``repeat`` runs, each run right after one ``python -c pass``
    (the ratio is against the baseline's median in the same window: a shared machine's load
    changes by the minute, and a baseline measured once at the start does not follow it)."""
    times, base = [], []
    for _ in range(repeat):
        base.append(_run([sys.executable, "-c", "pass"], env)[0])
        seconds, res = _run(args, env)
        if res.returncode != 0:
            raise SystemExit(f"{name}: exit {res.returncode}: {res.stderr[-2000:]}")
        times.append(seconds)
    median = statistics.median(times)
    window = statistics.median(base)
    row = {"command": name, "runs": repeat, "median_s": round(median, 4),
           "min_s": round(min(times), 4), "max_s": round(max(times), 4),
           "python_pass_median_s": round(window, 4),
           "ratio_to_python": round(median / window, 1) if window else None,
           "ratio_to_start_baseline": round(median / baseline, 1) if baseline else None}
    progress(json.dumps(row))
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="one run each of --help and list, no server (CI)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--server-only", action="store_true",
                   help="skip the local recall, remember and import (each loads the model: "
                        "minutes on a loaded machine); the rest as without it")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    repeat = 1 if args.quick else args.repeat
    data_dir = Path(tempfile.mkdtemp(prefix="mv-bench-cli-"))
    mv = [sys.executable, "-m", "mnemovault.cli", "--data-dir", str(data_dir)]
    local = _env(MNEMOVAULT_USE_SERVER="false")
    report: dict[str, Any] = {"benchmark": "cli", "environment": environment(),
                              "quick": args.quick, "data_dir": str(data_dir)}

    base = [_run([sys.executable, "-c", "pass"], local)[0] for _ in range(max(repeat, 5))]
    baseline = statistics.median(base)
    report["baseline_python_pass_s"] = round(baseline, 4)
    progress(f"baseline python -c pass: {baseline:.4f} s")

    # a database with something in it (first use: creates the database, loads the model);
    # --quick: a database only (keys create embeds nothing)
    setup = (["keys", "create", "--tenant", "default", "--role", "owner"] if args.quick
             else ["remember", "Ada keeps bees on the roof", "--scope", "bench"])
    seconds, res = _run([*mv, *setup], local)
    if res.returncode != 0:
        raise SystemExit(f"setup: {res.stderr[-2000:]}")
    report["first_command_new_data_dir_s"] = round(seconds, 2)

    rows = [_timed("--help", [*mv, "--help"], local, repeat, baseline),
            _timed("list", [*mv, "list", "--scope", "bench"], local, repeat, baseline)]
    if not args.quick and not args.server_only:
        rows.append(_timed("recall", [*mv, "recall", "who keeps bees?", "--scope", "bench"],
                           local, repeat, baseline))
        rows.append(_timed("remember", [*mv, "remember", "Ada sells honey in June",
                                        "--scope", "bench"], local, repeat, baseline))
        example = resources.files("mnemovault.examples") / "demo_conversation.jsonl"
        with resources.as_file(example) as path:
            _, res = _run([*mv, "import", str(path), "--force-scope", "imp", "--json"], local)
        if res.returncode != 0:
            raise SystemExit(f"import: {res.stderr[-2000:]}")
        imp = json.loads(res.stdout)
        report["import_demo"] = {k: imp[k] for k in ("imported", "seconds", "per_second",
                                                     "model_seconds")}
        progress(json.dumps(report["import_demo"]))
    report["without_server"] = rows

    if not args.quick:
        served = _env()
        seconds, res = _run([*mv, "server", "start"], served)
        if res.returncode != 0:
            raise SystemExit(f"server start: {res.stderr[-2000:]}")
        report["server_start_s"] = round(seconds, 2)
        try:
            report["with_server"] = [
                _timed("--help", [*mv, "--help"], served, repeat, baseline),
                _timed("list", [*mv, "list", "--scope", "bench"], served, repeat, baseline),
                _timed("recall", [*mv, "recall", "who keeps bees?", "--scope", "bench"],
                       served, repeat, baseline),
                _timed("remember", [*mv, "remember", "Ada's bees swarmed in May", "--scope",
                                    "bench"], served, repeat, baseline),
            ]
        finally:
            _run([*mv, "server", "stop"], served)
    shutil.rmtree(data_dir, ignore_errors=True)
    report["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(report, indent=2)
    print(text)
    out = args.out or (None if args.quick else
                       Path(__file__).resolve().parent / "results" / "cli.json")
    if out is not None:
        out.write_text(text + "\n")


if __name__ == "__main__":
    main()
