"""The other free-text columns sealed too (issue 21, item 1; migration 0017), against a real
PostgreSQL: a memory's provenance (tags, source id, extra keys), a procedure's name,
intent and steps, and a run's provenance are ciphertext on disk, open on every read, still
filter (tags, import source ids) through keyed hashes, read as erased once their key is
destroyed, and rows written before 0017 are sealed in place by ``seal_existing``. A
subject's run on another subject's procedure is sealed under the runner's key: a restored
backup's copy of it is deleted by the start's sweep, its procedure's counters with it."""

from __future__ import annotations

import uuid
from typing import Any

from psycopg.types.json import Jsonb

from mnemovault.subjects import keys as content_keys
from mnemovault.vault import MemoryVault


def _mark() -> str:
    return f"cnry{uuid.uuid4().hex[:10]}"


def _raw(vault: MemoryVault, tenant: str, sql: str, *args: Any) -> dict[str, Any]:
    """One row as stored: no sealed column selected, so nothing is opened."""
    with vault.db.transaction(tenant) as conn:
        row = conn.execute(sql, args).fetchone()
    assert row is not None
    return dict(row)


def _steps(label: str) -> dict[str, Any]:
    return {"nodes": [{"id": "a", "tool": "lookup", "name": f"look up {label}"},
                      {"id": "b", "tool": "reply"}],
            "edges": [{"source": "a", "target": "b", "condition": f"found {label}"}]}


def test_provenance_is_sealed_and_still_filters(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    tag, src, extra = _mark(), _mark(), _mark()
    r = vault.remember("Kim plays the oboe", scope="s", subject="kim", principal=who,
                       provenance={"source": f"import {src}", "source_id": src,
                                   "tags": [tag], "note": extra})
    raw = _raw(vault, tenant, "SELECT provenance::text AS prov, provenance_sealed AS blob "
               "FROM memories WHERE tenant_id = %s AND id = %s", tenant, r.id)
    assert all(m not in raw["prov"] for m in (tag, src, extra))
    assert all(m.encode() not in bytes(raw["blob"]) for m in (tag, src, extra))
    got = vault.get(r.id, principal=who).provenance
    assert got["tags"] == [tag] and got["source_id"] == src
    assert got["source"] == f"import {src}" and got["note"] == extra
    # filters compare keyed hashes: a tag finds the row, another tag does not
    hits = vault.recall("oboe", scope="s", filters={"tags": [tag]}, principal=who)
    assert [h.memory.id for h in hits] == [r.id]
    assert vault.recall("oboe", scope="s", filters={"tags": [_mark()]}, principal=who) == []
    assert src in vault.stored_source_ids(["s"], principal=who)["s"]


def test_a_destroyed_key_erases_the_provenance_too(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    tag = _mark()
    r = vault.remember("Lu has a secret", scope="s", subject="lu", principal=who,
                       provenance={"tags": [tag], "source_id": tag})
    kid = str(_raw(vault, tenant, "SELECT key_id FROM memories WHERE tenant_id = %s AND "
                   "id = %s", tenant, r.id)["key_id"])
    vault.rt.sealer.store.destroy(tenant, [kid])
    vault.rt.sealer.cache.evict(tenant, [kid])
    got = vault.get(r.id, principal=who)
    assert "tags" not in got.provenance and "source_id" not in got.provenance
    assert tag not in vault.stored_source_ids(["s"], principal=who)["s"]


def test_procedure_texts_and_run_provenance_are_sealed(vault: MemoryVault,
                                                       tenant: str) -> None:
    who = vault.principal(tenant)
    label, note = _mark(), _mark()
    cap = vault.procedures.capture({"question": "how do I file it?", "scope": "ops",
                                    "steps": _steps(label), "name": f"file {label}",
                                    "intent": f"filing {label}"}, principal=who)
    raw = _raw(vault, tenant, "SELECT name, intent, steps::text AS steps, sealed FROM "
               "procedures WHERE tenant_id = %s AND memory_id = %s", tenant, cap.id)
    assert raw["name"] == "" and raw["intent"] == "" and raw["steps"] == "{}"
    assert label.encode() not in bytes(raw["sealed"])
    p = vault.procedures.get(cap.id, runs=5, principal=who)
    assert p.name == f"file {label}" and p.intent == f"filing {label}"
    assert p.steps.nodes[0].name == f"look up {label}"
    run = vault.procedures.record_run(cap.id, {"verdict": "success",
                                               "provenance": {"tags": [note]}},
                                      principal=who)
    rraw = _raw(vault, tenant, "SELECT key_id, provenance::text AS prov, provenance_sealed "
                "AS blob FROM procedure_runs WHERE tenant_id = %s AND id = %s",
                tenant, run.run_id)
    assert rraw["key_id"] is not None and note not in rraw["prov"]
    assert note.encode() not in bytes(rraw["blob"])
    p = vault.procedures.get(cap.id, runs=5, principal=who)
    assert [r.provenance.get("tags") for r in p.recent_runs] == [[note]]
    # the procedure search's tag filter compares keyed hashes too
    tagged = vault.procedures.capture({"question": "how do I archive it?", "scope": "ops",
                                       "steps": _steps("x"), "provenance": {"tags": [note]}},
                                      principal=who)
    found = vault.procedures.recall("archive it", scope="ops", tags=[note], principal=who)
    assert [h.procedure.id for h in found] == [tagged.id]


def test_records_written_before_0017_are_sealed_in_place(vault: MemoryVault,
                                                         tenant: str) -> None:
    who = vault.principal(tenant)
    tag, label, note = _mark(), _mark(), _mark()
    r = vault.remember("Mo keeps bees", scope="s", subject="mo", principal=who)
    cap = vault.procedures.capture({"question": "how do I smoke the hive?", "scope": "ops",
                                    "steps": _steps(label)}, principal=who)
    run = vault.procedures.record_run(cap.id, {"verdict": "success"}, principal=who)
    name = vault.procedures.get(cap.id, principal=who).name
    with vault.db.transaction(tenant) as conn:  # as a database made before 0017
        conn.execute("UPDATE memories SET provenance = %s, provenance_sealed = NULL "
                     "WHERE tenant_id = %s AND id = %s",
                     (Jsonb({"tags": [tag], "source_id": tag}), tenant, r.id))
        conn.execute("UPDATE procedures SET sealed = NULL, name = %s, intent = 'x', "
                     "steps = %s WHERE tenant_id = %s AND memory_id = %s",
                     (name, Jsonb(_steps(label)), tenant, cap.id))
        conn.execute("UPDATE procedure_runs SET key_id = NULL, provenance_sealed = NULL, "
                     "provenance = %s WHERE tenant_id = %s AND id = %s",
                     (Jsonb({"tags": [note]}), tenant, run.run_id))
    assert vault.get(r.id, principal=who).provenance["tags"] == [tag]  # clear until sealed
    n = content_keys.seal_existing(vault.rt, batch=1)
    assert n is not None and n >= 3
    m = _raw(vault, tenant, "SELECT provenance::text AS prov FROM memories WHERE "
             "tenant_id = %s AND id = %s", tenant, r.id)
    assert tag not in m["prov"]
    assert vault.get(r.id, principal=who).provenance["tags"] == [tag]
    pr = _raw(vault, tenant, "SELECT name, steps::text AS steps FROM procedures WHERE "
              "tenant_id = %s AND memory_id = %s", tenant, cap.id)
    assert pr["name"] == "" and label not in pr["steps"]
    p = vault.procedures.get(cap.id, runs=5, principal=who)
    assert p.name == name and p.steps.nodes[0].name == f"look up {label}"
    assert [x.provenance.get("tags") for x in p.recent_runs] == [[note]]
    assert content_keys.seal_existing(vault.rt) == 0  # resumable: nothing left


def test_a_restored_run_under_a_destroyed_key_is_swept_with_its_counters(
        vault: MemoryVault, tenant: str) -> None:
    """Nia runs Oz's procedure; Nia is erased (her run goes, Oz's counters drop); a backup
    taken before brings the run back; the start's sweep deletes it again by its key."""
    who = vault.principal(tenant)
    cap = vault.procedures.capture({"question": "how do I water the ferns?", "scope": "ops",
                                    "subject": "oz", "steps": _steps("ferns")},
                                   principal=who)
    run = vault.procedures.record_run(cap.id, {"verdict": "success", "subject": "nia"},
                                      principal=who)
    with vault.db.transaction(tenant) as conn:
        saved = conn.execute("SELECT * FROM procedure_runs WHERE tenant_id = %s AND id = %s",
                             (tenant, run.run_id)).fetchone()
        counters = conn.execute("SELECT runs, successes, judged_runs, judged_successes, "
                                "first_used, last_used FROM procedures WHERE tenant_id = %s "
                                "AND memory_id = %s", (tenant, cap.id)).fetchone()
    assert saved is not None and saved["key_id"] is not None and counters is not None
    vault.subjects.erase("nia", scope="ops", principal=who)
    assert vault.procedures.get(cap.id, principal=who).counters.runs == 0
    assert not vault.rt.sealer.store.current(tenant, _owner(vault, tenant, "ops", "nia"))
    with vault.db.transaction(tenant) as conn:  # the restore: the run and the counters back
        cols = [c for c in saved if c not in ("success", "judged")]
        conn.execute(f"INSERT INTO procedure_runs ({', '.join(cols)}) VALUES "
                     f"({', '.join(['%s'] * len(cols))})",
                     [Jsonb(saved[c]) if isinstance(saved[c], dict) else saved[c]
                      for c in cols])
        conn.execute("UPDATE procedures SET runs = %s, successes = %s, judged_runs = %s, "
                     "judged_successes = %s, first_used = %s, last_used = %s "
                     "WHERE tenant_id = %s AND memory_id = %s",
                     (*counters.values(), tenant, cap.id))
    swept = content_keys.sweep(vault.rt)
    assert tenant in swept.tenants
    with vault.db.transaction(tenant) as conn:
        left = conn.execute("SELECT count(*) AS n FROM procedure_runs WHERE tenant_id = %s "
                            "AND id = %s", (tenant, run.run_id)).fetchone()
    assert left is not None and left["n"] == 0
    assert vault.procedures.get(cap.id, principal=who).counters.runs == 0
    with vault.db.transaction(tenant) as conn:
        last = conn.execute("SELECT operation FROM audit_log WHERE tenant_id = %s "
                            "ORDER BY seq DESC LIMIT 1", (tenant,)).fetchone()
    assert last is not None and last["operation"] == "REAPPLY"


def _owner(vault: MemoryVault, tenant: str, scope: str, subject: str) -> Any:
    from mnemovault.pii.sealing import owner_of

    with vault.db.transaction(tenant) as conn:
        fp = vault.rt.pii.tenant_keys(conn, tenant).fingerprint_key
    return owner_of(fp, scope, subject)
