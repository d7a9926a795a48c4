"""Issue 23's Done-when, through the CLI on a fresh data directory: three near-duplicate
episodes and two contradicting statements about one subject over time; the librarian
makes one fact with lineage to the three, ranked first; recall returns the current
statement, and the old one only ``--as-of`` its time; forgetting one source removes the
fact; a name passed as an entity after an earlier record mentioned it is a placeholder in
that record after ``pii watch``, and its clear form is on no page of the listing."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mnemovault.audit import log as audit_log
from mnemovault.cli import app as cli_app
from mnemovault.store.embedded import stop

SAME = ("I love hiking in the mountains with my dog.",
        "I love hiking in the mountains with my dog!",
        "I really love hiking in the mountains with my dog.")


@pytest.fixture
def data() -> Iterator[Path]:
    # 0755: as root, the embedded PostgreSQL runs as 'pgserver', which must get in
    parent = Path(tempfile.mkdtemp(prefix="mv-done23-"))
    os.chmod(parent, 0o755)
    try:
        yield parent / "mv"
    finally:
        stop(parent / "mv" / "pg")
        shutil.rmtree(parent, ignore_errors=True)


def test_librarian_valid_time_and_pii_watch_end_to_end(
        data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the CLI configures the process's audit log (its signing key) for its own data dir:
    # put the session's back afterwards
    monkeypatch.setattr(audit_log, "config", audit_log.config)
    runner = CliRunner()

    def cli(*args: str) -> Any:
        res = runner.invoke(cli_app, ["--data-dir", str(data), "--tenant", "acme", *args,
                                      "--json"])
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)

    sources = [cli("remember", t, "--scope", "s", "--subject", "carol")["id"] for t in SAME]
    old = cli("remember", "Carol lives in Lisbon.", "--scope", "s", "--subject", "carol",
              "--key", "carol-home", "--valid-from", "2024-01-01T00:00:00Z")["id"]
    new = cli("remember", "Carol lives in Oslo now.", "--scope", "s", "--subject", "carol",
              "--key", "carol-home", "--valid-from", "2025-06-01T00:00:00Z")["id"]

    run = cli("librarian", "run")
    assert run["merged"] == 1 and len(run["written"]) >= 1, run
    hits = cli("recall", "hiking in the mountains with my dog", "--scope", "s", "-k", "5")
    ids = [h["memory"]["id"] for h in hits]
    fact = ids[0]
    assert fact not in sources and set(sources) <= set(ids), ids  # the fact above them
    assert hits[0]["memory"]["type"] == "fact"

    def homes(*extra: str) -> list[str]:
        got = cli("recall", "where does Carol live?", "--scope", "s", "-k", "10", *extra)
        return [h["memory"]["id"] for h in got]

    now = homes()
    assert new in now and old not in now
    then = homes("--as-of", "2024-06-01T00:00:00Z")
    assert old in then and new not in then

    # forgetting one source takes the fact along (the existing cascade)
    gone = cli("forget", sources[1], "--confirm")
    assert fact in [str(i) for i in gone["deleted"]], gone
    assert fact not in [h["memory"]["id"] for h in cli(
        "recall", "hiking in the mountains with my dog", "--scope", "s", "-k", "10")]

    # the PII watch: a name mentioned first in plain text, later passed as an entity
    name = f"Ilsabet Varga{uuid.uuid4().hex[:4]}"
    early = cli("remember", f"Met {name} at the harbour", "--scope", "crm")["id"]
    cli("remember", f"{name} called again", "--scope", "crm", "--entity", f"person={name}")
    cli("pii", "watch")
    listing = json.dumps(cli("list", "--scope", "crm", "--limit", "100"))
    assert name not in listing
    first = next(m for m in cli("list", "--scope", "crm", "--limit", "100")["items"]
                 if m["id"] == early)
    assert first["content"].startswith("Met {person:") and name not in first["content"]
