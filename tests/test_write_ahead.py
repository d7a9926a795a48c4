"""The write path embeds before its transaction (issue 29, item 2): the embedder runs with
no transaction open and no lock held, and every stored vector is still the embedding of the
stored (pseudonymised) text, also when a concurrent write made a value known between the
prediction and the transaction."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import numpy as np

from mnemovault.embed import Embedder
from mnemovault.embed.base import Vectors
from mnemovault.embed.view import ViewEmbedder
from mnemovault.pii.vault import PLACEHOLDER_RE, embedding_view
from mnemovault.store.db import owner_connection
from mnemovault.vault import MemoryVault


class Probe:
    """The real embedder; ``during`` runs inside each of its calls (once per call)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model = inner.model
        self.calls: list[list[str]] = []
        self.during: Any = None
        self._busy = threading.local()

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: list[str]) -> Vectors:
        self.calls.append(list(texts))
        if self.during is not None and not getattr(self._busy, "on", False):
            self._busy.on = True
            try:
                self.during(texts)
            finally:
                self._busy.on = False
        return self.inner.embed(texts)


def _bare(vault: MemoryVault) -> Embedder:
    e = vault.embedder
    while isinstance(e, ViewEmbedder):
        e = e.inner
    return e


def _stored(vault: MemoryVault, tenant: str, memory_id: uuid.UUID) -> tuple[str, np.ndarray]:
    with vault.db.transaction(tenant) as conn:
        # with key_id and content_sealed the row factory opens the sealed content
        row = conn.execute("SELECT id, content, key_id, content_sealed, embedding::text AS e "
                           "FROM memories WHERE id = %s", (memory_id,)).fetchone()
    return row["content"], np.asarray(json.loads(row["e"]), dtype=np.float32)


def _open_transactions(vault: MemoryVault) -> int:
    """Backends of the application role inside a transaction (other than idle)."""
    with owner_connection(vault.db.url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s "
            "AND state LIKE 'idle in transaction%%' OR (usename = %s AND state = 'active' "
            "AND backend_xid IS NOT NULL)", (vault.db.app_role, vault.db.app_role)).fetchone()
        held = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                            ).fetchone()
    assert row is not None and held is not None
    return int(row[0]) + int(held[0])


def test_the_embedder_runs_with_no_transaction_open_and_no_lock_held(
        vault: MemoryVault, tenant: str) -> None:
    probe = Probe(_bare(vault))
    mv = MemoryVault(vault.db, probe, vault.settings, vault.keyring)
    who = mv.principal(tenant)
    mv.remember("ada.lovelace@example.org wrote first", scope="s", subject="ada",
                principal=who)  # the tenant's vault exists: predictions are exact
    seen: list[int] = []
    probe.during = lambda texts: seen.append(_open_transactions(vault))
    probe.calls.clear()
    receipts = mv.remember_many(
        [{"content": f"note {i} for ada.lovelace@example.org and b{i}@example.org",
          "scope": "s", "subject": "ada"} for i in range(5)], principal=who)
    assert seen == [0]  # one embedder call, made outside any transaction
    assert len(probe.calls) == 1 and len(probe.calls[0]) == 5
    for r, text in zip(receipts, probe.calls[0], strict=True):
        content, _ = _stored(vault, tenant, r.id)
        assert PLACEHOLDER_RE.search(content)
        assert text == embedding_view(content)  # what was embedded is the stored text


def test_a_value_made_known_meanwhile_is_embedded_again_as_stored(
        vault: MemoryVault, tenant: str) -> None:
    probe = Probe(_bare(vault))
    mv = MemoryVault(vault.db, probe, vault.settings, vault.keyring)
    who = mv.principal(tenant)
    mv.remember("the vault is in use: c@example.org", scope="s", principal=who)
    name = f"Quentin Zarkov{uuid.uuid4().hex[:4]}"

    def meanwhile(texts: list[str]) -> None:  # between the prediction and the transaction
        if any(name in t for t in texts):
            mv.remember("a contact", scope="s", principal=who,
                        entities=[{"kind": "person", "value": name}])

    probe.during = meanwhile
    probe.calls.clear()
    r = mv.remember(f"met {name} at the station", scope="s", principal=who)
    content, vector = _stored(vault, tenant, r.id)
    assert name not in content and PLACEHOLDER_RE.search(content)  # pseudonymised as stored
    expected = np.asarray(_bare(vault).embed([embedding_view(content)])[0], dtype=np.float32)
    assert np.allclose(vector, expected, atol=1e-5)
    # predicted (the name unknown), the other write, then the stored text embedded again
    assert [c for c in probe.calls if any("station" in t for t in c)][-1] == [
        embedding_view(content)]


def test_with_pseudonymisation_off_the_text_is_embedded_once_outside(
        vault: MemoryVault, tenant: str, monkeypatch: Any) -> None:
    probe = Probe(_bare(vault))
    mv = MemoryVault(vault.db, probe, vault.settings, vault.keyring)
    monkeypatch.setattr(mv.settings, "pii_pseudonymize", False)
    seen: list[int] = []
    probe.during = lambda texts: seen.append(_open_transactions(vault))
    r = mv.remember("plain text, stored as written", scope="s", principal=mv.principal(tenant))
    assert seen == [0] and len(probe.calls) == 1
    content, vector = _stored(vault, tenant, r.id)
    assert content == "plain text, stored as written"
    assert np.allclose(vector, np.asarray(_bare(vault).embed([content])[0]), atol=1e-5)
