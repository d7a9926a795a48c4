"""Helpers shared by the benchmark scripts (not a benchmark itself: .ci/run skips ``_*.py``)."""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)

def quiet_logging() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    for name in ("sentence_transformers", "transformers", "alembic", "httpx", "psycopg.pool",
                 "bm25s"):
        logging.getLogger(name).setLevel(logging.ERROR)

def environment() -> dict[str, Any]:
    """Machine, load and the code measured: the mnemovault package's path and the git commit
    of the tree it lives in (``git_dirty``: tracked files modified), or a ``REVISION`` file
    at the root of an exported tree."""
    import mnemovault

    env: dict[str, Any] = {
        "python": platform.python_version(), "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        import torch

        env["torch"] = torch.__version__
        env["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    pkg = Path(mnemovault.__file__).resolve().parent
    env["mnemovault_path"] = str(pkg)
    try:
        env["git_commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=pkg, capture_output=True, text=True,
            check=True).stdout.strip()
        env["git_dirty"] = bool(subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=pkg,
            capture_output=True, text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        for parent in pkg.parents:
            if (parent / "REVISION").is_file():
                env["git_commit"] = (parent / "REVISION").read_text().strip()
                env["git_dirty"] = False
                break
    return env

def stop_embedded(data_dir: Path) -> None:
    """Stop this process's embedded server for ``data_dir`` before the directory is removed
    (:func:`mnemovault.store.embedded.stop`)."""
    from mnemovault.store.embedded import stop

    stop(data_dir)


def skip_without(path: Path, *, benchmark: str, quick: bool) -> None:
    """A ``--quick`` run (CI) on a machine without the data set ``path`` is a skip, not a
    failure: print ``{"skipped": true, ...}`` and exit 0. A full run goes on, and its loader
    says what is missing."""
    if quick and not Path(path).is_file():
        import json

        print(json.dumps({"benchmark": benchmark, "quick": True, "skipped": True,
                          "reason": f"not found: {path}"}))
        sys.exit(0)


class RandomEmbedder:
    """Deterministic unit vectors from a hash of the text (no model): for benches that
    measure the store, not recall quality, so building 100k rows takes no embedding time."""

    model = "bench/random-384"
    dimension = 384

    def embed(self, texts: list[str]) -> Any:
        from mnemovault.embed.base import normalise

        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "big")
            out[i] = np.random.default_rng(seed).standard_normal(self.dimension)
        return normalise(out)


def wait_for_health(base: str, server: subprocess.Popen[bytes], log_path: Path, *,
                    timeout: float) -> float:
    """Seconds until ``base``/health answers 200 from a ``mnemovault serve`` subprocess.

    Raises:
        RuntimeError: the server exited first (with the end of its log), or ``timeout``
            seconds passed.
    """
    import httpx

    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited ({server.returncode}) before answering "
                               f"/health: {log_path.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=2.0).status_code == 200:
                return time.perf_counter() - started
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"no answer on {base}/health within {timeout:.0f} s")
