"""Importers and the CLI, end to end against the session's embedded database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mnemovault.cli import app
from mnemovault.errors import ValidationError
from mnemovault.importers import read_file
from mnemovault.vault import MemoryVault

from .conftest import SHARED

runner = CliRunner()


def _cli(data_dir: Path, tenant: str, *args: str) -> object:
    return runner.invoke(app, ["--data-dir", str(data_dir), "--tenant", tenant, *args])


def test_jsonl_import_recall_list_delete(tmp_path: Path, data_dir: Path, tenant: str,
                                        vault: MemoryVault) -> None:
    f = tmp_path / "chat.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [
        {"text": "Oskar: I repaired the old lighthouse radio today.", "subject": "oskar",
         "timestamp": "2025-02-01T10:00:00+00:00", "source_id": "m1"},
        {"text": "Lena: The ferry timetable changes in April.", "subject": "lena",
         "source_id": "m2"},
    ]) + "\n\n", encoding="utf-8")
    res = _cli(data_dir, tenant, "import", str(f), "--scope", "harbour", "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["imported"] == 2 and summary["format"] == "jsonl"
    with vault.db.transaction(tenant) as conn:  # the import folded its statistics' deltas
        assert conn.execute("SELECT count(*) AS n FROM lexical_stat_deltas WHERE "
                            "tenant_id = %s AND scope = 'harbour'",
                            (tenant,)).fetchone()["n"] == 0

    res = _cli(data_dir, tenant, "recall", "who fixed a radio?", "--scope", "harbour",
               "-k", "1", "--json")
    assert res.exit_code == 0, res.output
    hit = json.loads(res.stdout)[0]["memory"]
    assert hit["content"].startswith("Oskar") and hit["subject"] == "oskar"
    assert hit["provenance"]["source_id"] == "m1"
    assert hit["created_at"].startswith("2025-02-01")

    page = json.loads(_cli(data_dir, tenant, "list", "--scope", "harbour", "--json").stdout)
    assert len(page["items"]) == 2

    res = _cli(data_dir, tenant, "delete", hit["id"], "--yes", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["deleted"] == [hit["id"]]
    page = vault.list(scope="harbour", principal=vault.principal(tenant))
    assert [m.content[:4] for m in page.items] == ["Lena"]


def test_bad_jsonl_line_is_named_and_nothing_is_imported(tmp_path: Path, data_dir: Path,
                                                         tenant: str, vault: MemoryVault) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text('{"text": "fine"}\n{"txt": "typo"}\n', encoding="utf-8")
    with pytest.raises(ValidationError) as err:
        read_file(f)
    assert err.value.field == "line 2.text"
    res = _cli(data_dir, tenant, "import", str(f))
    assert res.exit_code == 2
    assert "line 2" in res.output
    assert vault.list(principal=vault.principal(tenant)).items == []


def test_a_json_document_imports_as_records_and_a_bad_one_is_explained(
        tmp_path: Path, data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    one = tmp_path / "one.json"  # pretty-printed: not JSON Lines, but one JSON object
    one.write_text(json.dumps({"text": "Tariq restores old bicycles.", "subject": "tariq",
                               "source_id": "b1"}, indent=2), encoding="utf-8")
    plan = read_file(one)
    assert plan.format == "json" and [i.content for i in plan.items] == [
        "Tariq restores old bicycles."]
    many = tmp_path / "many.json"
    many.write_text(json.dumps([
        {"text": "Tariq rides to work every day.", "scope": "bikes",
         "timestamp": "2025-03-01T08:00:00+00:00"},
        {"text": "Tariq wants a tandem.", "subject": "tariq"},
    ], indent=2), encoding="utf-8")
    plan = read_file(many, default_scope="garage")
    assert plan.format == "json"
    assert [(i.scope, i.subject) for i in plan.items] == [("bikes", None), ("garage", "tariq")]
    assert plan.items[0].created_at is not None and plan.items[0].created_at.month == 3

    res = _cli(data_dir, tenant, "import", str(one), "--scope", "bikes", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["imported"] == 1
    page = vault.list(scope="bikes", principal=vault.principal(tenant))
    assert [m.content for m in page.items] == ["Tariq restores old bicycles."]

    # a one-line record is still JSON Lines; a record in an array names its index
    line = tmp_path / "line.jsonl"
    line.write_text('{"text": "one line"}\n', encoding="utf-8")
    assert read_file(line).format == "jsonl"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"text": "fine"}, {"txt": "typo"}], indent=2), encoding="utf-8")
    with pytest.raises(ValidationError) as err:
        read_file(bad)
    assert err.value.field == "[1].text"
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "text": "unterminated,\n}\n', encoding="utf-8")
    res = _cli(data_dir, tenant, "import", str(broken))
    assert res.exit_code == 2
    assert "neither one JSON document" in res.output and "JSON Lines" in res.output
    scalar = tmp_path / "scalar.json"
    scalar.write_text("42", encoding="utf-8")
    with pytest.raises(ValidationError, match="got a number"):
        read_file(scalar)


def test_remember_and_keys_commands(data_dir: Path, tenant: str) -> None:
    res = _cli(data_dir, tenant, "remember", "Tea, no sugar", "--scope", "prefs", "--key",
               "drink", "--json")
    assert res.exit_code == 0, res.output
    first = json.loads(res.stdout)
    res = _cli(data_dir, tenant, "remember", "Coffee, black", "--scope", "prefs", "--key",
               "drink", "--json")
    second = json.loads(res.stdout)
    assert second["superseded"] == first["id"] and second["version"] == 2

    res = _cli(data_dir, tenant, "keys", "create", "--tenant", tenant, "--role", "service",
               "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["token"].startswith(f"mvk_{tenant}_")
    res = _cli(data_dir, tenant, "keys", "create", "--tenant", tenant, "--role", "root")
    assert res.exit_code == 2 and "role" in res.output


def test_demo_runs_and_is_idempotent(data_dir: Path, vault: MemoryVault) -> None:
    res = runner.invoke(app, ["--data-dir", str(data_dir), "demo", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    # 18 now, or by another test's demo run in this session's database earlier
    assert report["import"].get("imported", 18) == 18
    page = vault.list(scope="demo", limit=100, principal=vault.principal("demo"))
    assert len(page.items) == 18
    top = report["recall"][1]["hits"][0]["content"]
    assert "farmers market" in top
    res = runner.invoke(app, ["--data-dir", str(data_dir), "demo", "--json"])
    assert "skipped" in json.loads(res.stdout)["import"]


LOCOMO = SHARED / "datasets" / "locomo" / "locomo10.json"


@pytest.mark.skipif(not LOCOMO.exists(), reason="LoCoMo not available")
def test_locomo_reader_maps_turns() -> None:
    plan = read_file(LOCOMO)
    assert plan.format == "locomo"
    assert len(plan.items) == 5882
    first = plan.items[0]
    assert first.scope == "conv-26" and first.subject == "Caroline"
    assert first.content.startswith("Caroline: ")
    assert first.provenance.model_extra["dia_id"] == "D1:1"
    assert first.created_at is not None and first.created_at.year == 2023
    with_image = [i for i in plan.items if "[image: " in i.content]
    assert with_image, "image captions are kept"


def test_unknown_record_fields_are_refused_naming_the_line_or_index(
        tmp_path: Path, data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    typo = {"text": "Uma moved to Leeds.", "timestmap": "2020-01-01T00:00:00Z"}
    lines = tmp_path / "typo.jsonl"
    lines.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps(typo) + "\n",
                     encoding="utf-8")
    with pytest.raises(ValidationError, match=r"^line 2: timestmap: unknown field") as err:
        read_file(lines)
    assert err.value.field == "line 2.timestmap"
    array = tmp_path / "typo.json"
    array.write_text(json.dumps([{"text": "fine"}, typo], indent=2), encoding="utf-8")
    with pytest.raises(ValidationError, match=r"^\[1\]: timestmap: unknown field") as err:
        read_file(array)
    assert err.value.field == "[1].timestmap"
    res = _cli(data_dir, tenant, "import", str(lines), "--scope", "typos")
    assert res.exit_code == 2 and "line 2: timestmap" in res.output, res.output
    assert vault.list(scope="typos", principal=vault.principal(tenant)).items == []


def test_a_one_line_jsonl_file_names_its_line_in_errors(tmp_path: Path) -> None:
    one = tmp_path / "one.jsonl"
    for body, field in (({"text": "x", "sorce_id": "a"}, "line 2.sorce_id"),
                        ({"text": "x", "scope": "bad\x01scope"}, "line 2.scope"),
                        ({"txt": "x"}, "line 2.text")):
        one.write_text("\n" + json.dumps(body) + "\n", encoding="utf-8")
        with pytest.raises(ValidationError) as err:
            read_file(one)
        assert err.value.field == field, err.value.message
        assert err.value.message.startswith("line 2: ")
    one.write_text(json.dumps({"text": "x"}) + "\n", encoding="utf-8")
    assert read_file(one).format == "jsonl"


def test_a_refused_record_is_skipped_and_named_the_rest_is_stored(
        tmp_path: Path, data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    """Issue 28: one record the capture guard refuses no longer fails the import: it is
    left out and named (line and detector, never its text), the rest of its batch and the
    batches after it are stored, and the exit status is 5 (refused)."""
    secret = "AKIAQX7ZR2LKVE3MB5TW"  # an AWS access key id: refused (Critical)
    records = [{"text": f"harbour note {n}"} for n in range(1, 5)]
    records += [{"text": f"the key is {secret}"}, {"text": "harbour note 6"}]
    f = tmp_path / "notes.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    res = _cli(data_dir, tenant, "import", str(f), "--scope", "dock", "--batch-size", "2",
               "--json")
    assert res.exit_code == 5, res.output  # refused
    summary = json.loads(res.stdout)
    assert summary["imported"] == 5 and summary["scopes"] == {"dock": 5}
    assert [(r["record"], r["field"]) for r in summary["refused"]] == [("line 5", "content")]
    assert summary["refused"][0]["detector"]
    assert secret not in res.output
    page = vault.list(scope="dock", principal=vault.principal(tenant))
    assert sorted(m.content for m in page.items) == sorted(
        [f"harbour note {n}" for n in (1, 2, 3, 4, 6)])
    text = _cli(data_dir, tenant, "import", str(f), "--scope", "dock2")
    assert text.exit_code == 5
    assert "refused line 5" in text.stderr and secret not in text.output

    # --all-or-nothing: one transaction; the refusal stores nothing
    res = _cli(data_dir, tenant, "import", str(f), "--scope", "dock3", "--all-or-nothing")
    assert res.exit_code == 5, res.output
    assert "line 5" in res.stderr and "nothing was stored" in res.stderr
    assert secret not in res.output
    assert vault.list(scope="dock3", principal=vault.principal(tenant)).items == []


def test_a_lone_refused_record_is_reported_and_nothing_stored(
        tmp_path: Path, data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    f = tmp_path / "one.jsonl"
    f.write_text(json.dumps({"text": "the key is AKIAQX7ZR2LKVE3MB5TW"}) + "\n",
                 encoding="utf-8")
    res = _cli(data_dir, tenant, "import", str(f), "--scope", "dock")
    assert res.exit_code == 5 and "refused line 1" in res.stderr, res.output
    assert "AKIAQX7ZR2LKVE3MB5TW" not in res.output
    assert vault.list(scope="dock", principal=vault.principal(tenant)).items == []


def test_scope_is_for_records_without_one_and_force_scope_overrides(
        tmp_path: Path, data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    f = tmp_path / "mixed.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [
        {"text": "Ines keeps bees on the roof", "scope": "roof", "source_id": "a"},
        {"text": "The hives need checking in May", "source_id": "b"},
    ]) + "\n", encoding="utf-8")
    res = _cli(data_dir, tenant, "import", str(f), "--scope", "garden", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["scopes"] == {"garden": 1, "roof": 1}
    res = _cli(data_dir, tenant, "import", str(f), "--force-scope", "bees")
    assert res.exit_code == 0, res.output
    assert "into scope bees (2)" in " ".join(res.stdout.split())
    who = vault.principal(tenant)
    assert len(vault.list(scope="bees", principal=who).items) == 2
    assert len(vault.list(scope="roof", principal=who).items) == 1


def test_the_demo_file_imported_twice_with_force_scope_is_stored_once(
        data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    """Issue 28, done when: the demo file imported twice with --force-scope me leaves one
    copy of each record, in scope me; the second run counts them as stored already."""
    from importlib import resources

    demo = resources.files("mnemovault.examples") / "demo_conversation.jsonl"
    with resources.as_file(demo) as path:
        first = _cli(data_dir, tenant, "import", str(path), "--force-scope", "me", "--json")
        assert first.exit_code == 0, first.output
        assert json.loads(first.stdout)["imported"] == 18
        second = _cli(data_dir, tenant, "import", str(path), "--force-scope", "me", "--json")
        third = _cli(data_dir, tenant, "import", str(path), "--force-scope", "me")
    assert second.exit_code == 0, second.output
    said = " ".join(third.stdout.split())
    assert third.exit_code == 0 and "imported nothing new" in said, third.output
    assert "skipped 18 records stored already" in said and "0.0/s" not in said, said
    again = json.loads(second.stdout)
    assert (again["imported"], again["already_stored"]) == (0, 18)
    page = vault.list(scope="me", limit=100, principal=vault.principal(tenant))
    assert len(page.items) == 18
    assert len({m.provenance["source_id"] for m in page.items}) == 18
    assert vault.list(scope="demo", principal=vault.principal(tenant)).items == []


def test_an_interrupted_import_resumes_by_running_it_again(
        tmp_path: Path, data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    """The first half is stored (as an interrupted import leaves it); the same command
    again stores only the rest."""
    records = [{"text": f"logbook entry {n}", "source_id": f"e{n}"} for n in range(10)]
    f = tmp_path / "log.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in records[:5]) + "\n", encoding="utf-8")
    assert _cli(data_dir, tenant, "import", str(f), "--scope", "log").exit_code == 0
    f.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    res = _cli(data_dir, tenant, "import", str(f), "--scope", "log", "--batch-size", "3",
               "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert (summary["imported"], summary["already_stored"]) == (5, 5)
    assert summary["model_seconds"] >= 0 and summary["seconds"] >= 0
    page = vault.list(scope="log", limit=100, principal=vault.principal(tenant))
    assert sorted(m.content for m in page.items) == sorted(r["text"] for r in records)


def test_a_failed_batch_after_committed_ones_says_what_stays(
        tmp_path: Path, data_dir: Path, tenant: str, vault: MemoryVault,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29 item 8: a batch failing after earlier batches were committed must not say
    "nothing was changed" (true of that batch only): the error says how many records stay,
    where it stopped and how to go on, with the same exit status as the batch's error."""
    from mnemovault.errors import Unavailable

    records = [{"text": f"harbour log line {n}", "source_id": f"h{n}"} for n in range(6)]
    f = tmp_path / "harbour.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    real = MemoryVault.remember_many
    calls = 0

    def fail_second(self: MemoryVault, *args: object, **kw: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise Unavailable("database: the operation failed; nothing was changed")
        return real(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(MemoryVault, "remember_many", fail_second)
    res = _cli(data_dir, tenant, "import", str(f), "--scope", "harbour2", "--batch-size",
               "2")
    assert res.exit_code == 6, res.output
    text = " ".join(res.output.split())
    assert "import stopped at records 3-4 of 6" in text, text
    assert "2 records before them were committed and stay" in text, text
    assert "run the same import again" in text, text
    assert not text.rstrip(". ").endswith("nothing was changed"), text
    monkeypatch.undo()
    page = vault.list(scope="harbour2", limit=100, principal=vault.principal(tenant))
    assert sorted(m.content for m in page.items) == [r["text"] for r in records[:2]]
    res = _cli(data_dir, tenant, "import", str(f), "--scope", "harbour2", "--json")
    assert res.exit_code == 0, res.output
    assert (json.loads(res.stdout)["imported"], json.loads(res.stdout)["already_stored"]) \
        == (4, 2)
