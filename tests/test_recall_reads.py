"""Recall's access statistics are kept off the read path: every hit of every recall is
counted exactly once, concurrent recalls of the same memories lose no count and never
deadlock, ``touch=False`` counts nothing, and another tenant's rows are never touched."""

from __future__ import annotations

import threading

from mnemovault.vault import MemoryVault


def _counts(vault: MemoryVault, tenant: str, scope: str) -> dict[str, int]:
    with vault.db.transaction(tenant) as conn:
        return {r["content"]: r["access_count"] for r in conn.execute(
            "SELECT id, content, key_id, content_sealed, access_count FROM memories "
            "WHERE scope = %s", (scope,))}  # the row factory opens the sealed content


def test_each_hit_counted_once(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    vault.remember_many([{"content": f"hiking trip number {i}", "scope": "acc"}
                         for i in range(6)], principal=who)
    hits = vault.recall("hiking trip", scope="acc", k=3, principal=who)
    assert len(hits) == 3
    counts = _counts(vault, tenant, "acc")
    assert sorted(counts.values()) == [0, 0, 0, 1, 1, 1]
    assert {h.memory.content for h in hits} == {c for c, n in counts.items() if n == 1}
    with vault.db.transaction(tenant) as conn:
        assert conn.execute("SELECT count(*) AS n FROM memories WHERE scope = 'acc' "
                            "AND last_accessed_at IS NOT NULL").fetchone()["n"] == 3
    vault.recall("hiking trip", scope="acc", k=3, principal=who, touch=False)
    assert _counts(vault, tenant, "acc") == counts


def test_concurrent_recalls_lose_no_count(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    vault.remember_many([{"content": f"piano lesson {i}", "scope": "hot"} for i in range(4)],
                        principal=who)
    other = tenant + "-o"
    vault.ensure_tenant(other)
    vault.remember("piano lesson 0", scope="hot", principal=vault.principal(other))
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(5):
                assert len(vault.recall("piano lesson", scope="hot", k=4,
                                        principal=who)) == 4
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(_counts(vault, tenant, "hot").values()) == [30, 30, 30, 30]
    assert _counts(vault, other, "hot") == {"piano lesson 0": 0}
