"""The embedding view: the embedder reads each placeholder as its kind word (never the
placeholder, never the value), the same on the memory and the query side; the view is
recorded per database (a legacy record keeps reading placeholders) and a setting that
names another view is refused. Against the real PostgreSQL and the real local embedder."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from mnemovault.config import Settings
from mnemovault.embed.base import Embedder, Vectors
from mnemovault.embed.view import ViewEmbedder
from mnemovault.errors import ConfigError
from mnemovault.pii.vault import PLACEHOLDER_RE, embedding_view
from mnemovault.store.db import owner_connection
from mnemovault.vault import MemoryVault

EMAIL = "ada.lovelace@example.org"
PHONE = "+44 20 7946 0958"


class Recording:
    """The real embedder, keeping every text it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model = inner.model
        self.seen: list[str] = []

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: list[str]) -> Vectors:
        self.seen.extend(texts)
        return self.inner.embed(texts)


def _bare(vault: MemoryVault) -> Embedder:
    e = vault.embedder
    while isinstance(e, ViewEmbedder):
        e = e.inner
    return e


def _embedder_record(vault: MemoryVault) -> dict[str, object]:
    with owner_connection(vault.db.url) as conn:
        row = conn.execute("SELECT value FROM mv_meta WHERE key = 'embedder'").fetchone()
    assert row is not None
    return dict(row[0])


def _stored(vault: MemoryVault, tenant: str, memory_id: uuid.UUID) -> tuple[str, np.ndarray]:
    with vault.db.transaction(tenant) as conn:
        # with key_id and content_sealed the row factory opens the sealed content
        row = conn.execute("SELECT id, content, key_id, content_sealed, embedding::text AS e "
                           "FROM memories WHERE id = %s", (memory_id,)).fetchone()
    return row["content"], np.asarray(json.loads(row["e"]), dtype=np.float32)


def test_view_function_cuts_each_placeholder_to_its_kind() -> None:
    text = "{person:p_a970874a8a} called {phone_number:p_0123456789abc} at {email:p_00ff00ff00}"
    assert embedding_view(text) == "person called {phone_number:p_0123456789abc} at email"
    assert embedding_view("{phone_number:p_0123456789}") == "phone number"
    assert embedding_view("no placeholders {here}") == "no placeholders {here}"


def test_the_embedder_sees_kind_words_never_placeholders_or_values(
        vault: MemoryVault, tenant: str) -> None:
    assert _embedder_record(vault)["text_view"] == "kinds"  # a new database
    rec = Recording(_bare(vault))
    mv = MemoryVault(vault.db, rec, vault.settings, vault.keyring)
    assert mv.rt.text_view == "kinds" and isinstance(mv.embedder, ViewEmbedder)
    who = mv.principal(tenant)
    r = mv.remember(f"Ada Byron can be reached at {EMAIL} or on {PHONE}", scope="s",
                    entities=[{"kind": "person", "value": "Ada Byron"}], principal=who)
    content, _ = _stored(mv, tenant, r.id)
    assert len(PLACEHOLDER_RE.findall(content)) == 3  # the row holds placeholders
    mv.recall(f"how do I contact Ada Byron? {EMAIL}", scope="s", principal=who)
    mv.subjects.rectify(r.id, f"Ada Byron's address is now {EMAIL}", principal=who)
    # a later replacement of the embedder is wrapped too: no caller can bypass the view
    late = Recording(_bare(vault))
    mv.embedder = late
    assert isinstance(mv.rt.embedder, ViewEmbedder)
    mv.recall("where does Ada Byron live?", scope="s", principal=who)

    seen = rec.seen + late.seen
    assert len(rec.seen) == 3 and len(late.seen) == 1  # memory, query, rectify; query
    for text in seen:
        assert not PLACEHOLDER_RE.search(text) and ":p_" not in text, text
        for value in ("Ada", "Byron", "lovelace", "example.org", "7946", "0958"):
            assert value not in text, text
    assert rec.seen[0] == "person can be reached at email or on phone"
    assert "email" in rec.seen[1] and "person" in rec.seen[1]


def test_query_and_memory_sides_embed_the_same_view(vault: MemoryVault, tenant: str) -> None:
    rec = Recording(_bare(vault))
    mv = MemoryVault(vault.db, rec, vault.settings, vault.keyring)
    who = mv.principal(tenant)
    text = f"write to {EMAIL} about the quarterly report"
    r = mv.remember(text, scope="s", principal=who)
    content, vector = _stored(mv, tenant, r.id)
    # the stored vector is the bare embedder's vector of the view of the stored text
    expected = _bare(vault).embed([embedding_view(content)])[0]
    assert float(vector @ expected) == pytest.approx(1.0, abs=1e-4)
    # the same sentence as a query: pseudonymised to the same placeholder, viewed the same
    hits = mv.recall(text, scope="s", principal=who, touch=False)
    assert rec.seen[-1] == rec.seen[0] == "write to email about the quarterly report"
    assert hits and hits[0].memory.id == r.id


def test_recall_still_finds_by_meaning(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    ents = [{"kind": "person", "value": "Grace Hopper"}]
    texts = [
        f"Grace Hopper asked that invoices be sent to {EMAIL} every Monday",
        "Grace Hopper's cat is called Admiral and sleeps on the keyboard",
        f"the dentist moved Grace Hopper's appointment; call {PHONE} to confirm",
        "we deployed the compiler to the staging cluster on Friday",
    ]
    ids = [vault.remember(t, scope="s", entities=ents, principal=who).id for t in texts]
    cases = {"when should the billing documents be delivered?": ids[0],
             "what is the name of her pet?": ids[1],
             "how do I confirm the medical visit?": ids[2]}
    for query, want in cases.items():
        hits = vault.recall(query, scope="s", k=2, principal=who, touch=False)
        assert hits[0].memory.id == want, (query, [h.memory.content for h in hits])


@pytest.fixture
def legacy_record(vault: MemoryVault) -> Iterator[None]:
    """The session database's embedder record as a database made before views were
    recorded ({"model", "dimension"} only), restored afterwards."""
    before = _embedder_record(vault)
    with owner_connection(vault.db.url, autocommit=True) as conn:
        conn.execute("UPDATE mv_meta SET value = value - 'text_view' WHERE key = 'embedder'")
    try:
        yield
    finally:
        with owner_connection(vault.db.url, autocommit=True) as conn:
            conn.execute("UPDATE mv_meta SET value = value || jsonb_build_object("
                         "'text_view', %s::text) WHERE key = 'embedder'",
                         (before["text_view"],))
        assert _embedder_record(vault) == before


def test_a_legacy_database_keeps_embedding_placeholders(
        vault: MemoryVault, settings: Settings, tenant: str, legacy_record: None) -> None:
    rec = Recording(_bare(vault))
    legacy = MemoryVault.open(settings, embedder=rec)
    try:
        assert legacy.rt.text_view == "placeholders"
        who = legacy.principal(tenant)
        r = legacy.remember(f"send the minutes to {EMAIL}", scope="s", principal=who)
        content, _ = _stored(legacy, tenant, r.id)
        assert rec.seen == [content] and PLACEHOLDER_RE.search(rec.seen[0])
        legacy.recall(f"minutes for {EMAIL}", scope="s", principal=who, touch=False)
        assert PLACEHOLDER_RE.search(rec.seen[1])  # the query side reads the same view
        assert EMAIL not in " ".join(rec.seen)
        assert "text_view" not in _embedder_record(vault)  # nothing rewritten
        # forcing the new view onto the legacy database is refused, naming the setting
        with pytest.raises(ConfigError) as err:
            MemoryVault.open(settings.model_copy(update={"embed_text_view": "kinds"}),
                             embedder=rec)
        assert err.value.field == "embed_text_view" and "placeholders" in str(err.value)
        # naming the database's own view is fine
        same = MemoryVault.open(
            settings.model_copy(update={"embed_text_view": "placeholders"}), embedder=rec)
        assert same.rt.text_view == "placeholders"
        same.close()
    finally:
        legacy.close()


def test_a_setting_that_mismatches_the_database_is_refused(
        vault: MemoryVault, settings: Settings) -> None:
    forced = settings.model_copy(update={"embed_text_view": "placeholders"})
    with pytest.raises(ConfigError) as err:
        MemoryVault.open(forced, embedder=_bare(vault))
    assert err.value.field == "embed_text_view" and "'kinds'" in str(err.value)
    # a runtime made from another's parts checks the setting against the view too
    with pytest.raises(ConfigError) as err:
        MemoryVault(vault.db, vault.embedder, forced, vault.keyring)
    assert err.value.field == "embed_text_view"
    assert _embedder_record(vault)["text_view"] == "kinds"
