"""Lexical search without plaintext (issue 21 item 2, migration 0014): the Python analyser
gives PostgreSQL's ``to_tsvector('english', ...)`` lexemes, the database holds only their
keyed hashes (memories.tsv, the postings, the statistics), and BM25 still finds them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from mnemovault.errors import MnemoError
from mnemovault.recall import terms
from mnemovault.store import search
from mnemovault.store.db import owner_connection
from mnemovault.vault import MemoryVault
from tests import lexical
from tests.dbcheck import scratch_database

# the parser's token kinds, as the default parser of PostgreSQL gives them
SAMPLES = [
    "Caroline: Hi Melanie! Hope you're doing good. I took the first step - adoption!",
    "state-of-the-art covid-19 e.g. U.S. 3.5 -5 5-6 10:30 I'm don't",
    "café naïve-ish 3rd 1990s foo.txt a@b.com http://x.com/path /usr/bin 1.2.3 1e5",
    "co-op's end.Start $100 1,000 <b>bold</b> x_y",
    "advice/assistance team/support fun.. Yeah.. Thanks",
    "running runs ran easily fairly The THE the, generously communication",
    "Zoë über-cool São Paulo résumé 😊 it’s 20-year-old mother-in-law's",
    "",
    "the and of",  # stop words only: positions, no lexeme
]


def _pg(conn: psycopg.Connection[Any], text: str) -> dict[str, list[int]]:
    rows = conn.execute("SELECT lexeme, positions FROM unnest(to_tsvector('english', %s))",
                        (text,)).fetchall()
    return {r["lexeme"]: list(r["positions"]) for r in rows}


@pytest.mark.parametrize("text", SAMPLES)
def test_the_analyser_gives_postgresqls_lexemes_and_positions(vault: MemoryVault,
                                                              text: str) -> None:
    with vault.db.unscoped() as conn:
        assert terms.analyse(text) == _pg(conn, text)


def test_positions_and_repeats_are_capped_as_postgresql_caps_them(vault: MemoryVault) -> None:
    text = "word " * 300 + "filler " * 17000 + "late"
    with vault.db.unscoped() as conn:
        pg = _pg(conn, text)
    mine = terms.analyse(text)
    assert len(mine["word"]) == len(pg["word"]) == 255
    assert mine["late"] == pg["late"] == [16383]
    assert mine == pg


def test_hashes_are_keyed_per_tenant_and_valid_lexemes(vault: MemoryVault) -> None:
    a, b = terms.term_key(b"a" * 32), terms.term_key(b"b" * 32)
    assert terms.hash_lexeme(a, "violin") != terms.hash_lexeme(b, "violin")
    assert terms.hash_lexeme(a, "violin") == terms.hash_lexeme(a, "violin")
    tsv, n = terms.document(a, "violin violins concert")
    assert n == 2
    with vault.db.unscoped() as conn:
        back = conn.execute("SELECT %s::tsvector::text AS t", (tsv,)).fetchone()["t"]
    assert terms.hash_lexeme(a, "violin") in back and ":1,2" in back
    assert len(terms.hash_lexeme(a, "x")) == 12  # 72 bits


STEPS = {"nodes": [{"id": "n0", "tool": "tuner", "args": ["query"]}], "edges": []}
WORD = "xylophonist"  # stems to "xylophonist"; no other text of the tests holds it


def _plaintext_hits(vault: MemoryVault, needle: str) -> dict[str, int]:
    """Rows holding ``needle`` in the lexical columns and tables (as the owner: every
    tenant)."""
    like = f"%{needle}%"
    with owner_connection(vault.db.url, autocommit=True) as conn:
        return {
            "memories.tsv": conn.execute("SELECT count(*) FROM memories WHERE tsv::text "
                                         "LIKE %s", (like,)).fetchone()[0],
            "lexical_postings": conn.execute("SELECT count(*) FROM lexical_postings WHERE "
                                             "lexeme LIKE %s", (like,)).fetchone()[0],
            "lexical_df": conn.execute("SELECT count(*) FROM lexical_df WHERE lexeme LIKE %s",
                                       (like,)).fetchone()[0],
        }


def test_no_word_of_a_memory_is_in_the_lexical_tables(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    r = vault.remember(f"My cousin is a {WORD} in Lisbon", scope="ht", principal=who)
    vault.remember_many([{"content": f"another {WORD} story {i}", "scope": "ht"}
                         for i in range(3)], principal=who)
    assert _plaintext_hits(vault, WORD) == {"memories.tsv": 0, "lexical_postings": 0,
                                            "lexical_df": 0}
    assert _plaintext_hits(vault, "lisbon")["lexical_postings"] == 0
    where, params = search.filter_sql(tenant, "ht")
    with vault.db.transaction(tenant) as conn:
        q = lexical.q(vault, conn, f"where does the {WORD} live? lisbon")
        hashed = lexical.lx(vault, conn, WORD)
        posted = conn.execute("SELECT count(*) AS n FROM lexical_postings WHERE lexeme = %s",
                              (hashed,)).fetchone()["n"]
        fast = search.text_candidates(conn, q, where, params, 10)
        slow = search.text_candidates_recount(conn, q, where, params, 10)
        stats, recount = search.lexical_stats(conn, "ht"), search.lexical_recount(conn, "ht")
    assert posted == 4  # the hash is what the postings hold
    assert fast and fast[0]["id"] == r.id  # the only memory with both terms
    assert [x["id"] for x in fast] == [x["id"] for x in slow]
    assert stats == recount
    hits = vault.recall(f"{WORD} lisbon", scope="ht", principal=who, touch=False)
    assert hits[0].memory.id == r.id and hits[0].text_rank == 1


def test_a_rectified_memory_is_found_by_its_new_words_only(vault: MemoryVault,
                                                           tenant: str) -> None:
    who = vault.principal(tenant)
    r = vault.remember("the tuba lesson is on monday", scope="rc", principal=who)
    vault.remember("a note about gardening", scope="rc", principal=who)
    vault.subjects.rectify(r.id, "the harp lesson is on friday", principal=who)
    where, params = search.filter_sql(tenant, "rc")
    with vault.db.transaction(tenant) as conn:
        old = search.text_candidates(conn, lexical.q(vault, conn, "tuba"), where, params, 5)
        new = search.text_candidates(conn, lexical.q(vault, conn, "harp"), where, params, 5)
        stats, recount = search.lexical_stats(conn, "rc"), search.lexical_recount(conn, "rc")
        keyed = conn.execute("SELECT terms_keyed FROM memories WHERE id = %s",
                             (r.id,)).fetchone()["terms_keyed"]
    assert old == [] and [x["id"] for x in new] == [r.id]
    assert stats == recount and keyed


def test_a_procedure_is_indexed_with_keyed_terms(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    vault.procedures.capture({"name": f"tune the {WORD} kit", "intent": "prepare a concert",
                              "question": "how do I tune it", "scope": "pr",
                              "steps": STEPS},
                             principal=who)
    assert _plaintext_hits(vault, WORD)["memories.tsv"] == 0
    where, params = search.filter_sql(tenant, "pr")
    with vault.db.transaction(tenant) as conn:
        rows = search.text_candidates(conn, lexical.q(vault, conn, WORD), where, params, 5)
    assert len(rows) == 1


def test_a_text_is_refused_where_terms_are_expected(vault: MemoryVault, tenant: str) -> None:
    where, params = search.filter_sql(tenant, "x")
    with vault.db.transaction(tenant) as conn, pytest.raises(TypeError, match="terms"):
        search.text_candidates(conn, "violin", where, params, 5)


def test_a_write_without_terms_is_refused_by_the_database(vault: MemoryVault,
                                                          tenant: str) -> None:
    who = vault.principal(tenant)
    r = vault.remember("a row to copy", scope="nt", principal=who)
    with pytest.raises(MnemoError) as err, vault.db.transaction(tenant) as conn:
        conn.execute("INSERT INTO memories (tenant_id, id, scope, type, content, embedding) "
                     "SELECT tenant_id, %s, scope, 'fact', 'no terms', embedding "
                     "FROM memories WHERE id = %s", (uuid.uuid4(), r.id))
    cause = err.value.__cause__
    assert isinstance(cause, psycopg.errors.NotNullViolation)
    assert cause.diag.column_name == "tsv"


OLD_TEXTS = [f"the {WORD} played a sonata number {i} in the harbour" for i in range(7)] + [
    "gardening tips for tomatoes", "a trip to the museum with tickets"]


def _hits_in(url: str, needle: str) -> dict[str, int]:
    like = f"%{needle}%"
    with psycopg.connect(url, autocommit=True) as conn:
        return {t: conn.execute(sql, (like,)).fetchone()[0] for t, sql in (  # type: ignore[index]
            ("memories.tsv", "SELECT count(*) FROM memories WHERE tsv::text LIKE %s"),
            ("lexical_postings", "SELECT count(*) FROM lexical_postings WHERE lexeme LIKE %s"),
            ("lexical_df", "SELECT count(*) FROM lexical_df WHERE lexeme LIKE %s"))}


@pytest.fixture
def old_database(vault: MemoryVault) -> Iterator[str]:
    """A database made at 0013 (terms generated by PostgreSQL) with memories of tenant
    ``old``: its owner URL."""

    from alembic import command

    from mnemovault.store.db import Database

    with scratch_database(vault.db.url, "mv_terms") as url:
        command.upgrade(Database(url).alembic_config(vault.embedder.dimension), "0013_edge")
        vec = "[" + ",".join(["0.05"] * vault.embedder.dimension) + "]"
        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO tenants (tenant_id) VALUES ('old')")
            for i, text in enumerate(OLD_TEXTS):
                conn.execute("INSERT INTO memories (tenant_id, id, scope, type, content, "
                             "embedding, archived) VALUES ('old', %s, 's', 'episode', %s, "
                             "%s, %s)", (uuid.uuid4(), text, vec, i == 8))
        assert _hits_in(url, WORD)["lexical_postings"] == 7  # plain, as before 0014
        yield url


def _open(vault: MemoryVault, url: str, **kw: Any) -> MemoryVault:
    settings = vault.settings.model_copy(update={"database_url": url, "tenant": "old"})
    return MemoryVault.open(settings, embedder=vault.embedder, **kw)


def test_an_old_database_is_reindexed_at_open_and_recall_finds_its_rows(
        vault: MemoryVault, old_database: str) -> None:
    mv = _open(vault, old_database)
    try:
        assert mv.lexical.pending() == {}
        assert _hits_in(old_database, WORD) == {"memories.tsv": 0, "lexical_postings": 0,
                                                "lexical_df": 0}
        assert _hits_in(old_database, "harbour")["lexical_postings"] == 0
        where, params = search.filter_sql("old", "s")
        with mv.db.transaction("old") as conn:
            q = lexical.q(mv, conn, f"{WORD} sonata number 3")
            fast = search.text_candidates(conn, q, where, params, 10)
            slow = search.text_candidates_recount(conn, q, where, params, 10)
            stats, recount = search.lexical_stats(conn, "s"), search.lexical_recount(conn, "s")
            posted = conn.execute("SELECT count(*) AS n FROM lexical_postings WHERE lexeme = %s",
                                  (lexical.lx(mv, conn, WORD),)).fetchone()["n"]
            # the content is sealed at open (issue 21): read it through the row factory
            three = next(r["id"] for r in conn.execute(
                "SELECT id, content, key_id, content_sealed FROM memories").fetchall()
                if "number 3 " in r["content"])
        assert stats == recount and stats["doc_count"] == 8  # the archived row not counted
        assert posted == 7
        assert len(fast) == 7 and fast[0]["id"] == three
        assert [r["id"] for r in fast] == [r["id"] for r in slow]
        hits = mv.recall(f"{WORD} sonata number 3", scope="s", touch=False)
        assert hits[0].memory.id == three and hits[0].text_rank == 1
    finally:
        mv.close()


def test_the_reindex_is_resumable_and_waits_for_another_process(
        vault: MemoryVault, old_database: str) -> None:
    import threading

    from mnemovault.store import lexical as lexical_store

    mv = _open(vault, old_database, reindex=False)
    try:
        assert mv.lexical.pending() == {"old": 9}

        def stop(done: int, total: int) -> None:
            raise KeyboardInterrupt  # an operator's ^C after the first batch

        with pytest.raises(KeyboardInterrupt):
            mv.lexical.reindex(batch=2, progress=stop)
        assert mv.lexical.pending() == {"old": 7}  # the first batch stayed done
        with mv.db.transaction("old") as conn:  # and counted: the statistics are exact
            assert search.lexical_stats(conn, "s") == search.lexical_recount(conn, "s")
        seen: list[tuple[int, int]] = []
        with psycopg.connect(old_database, autocommit=True) as other:
            lexical_store.lock_reindex(other)  # another process re-indexing
            t = threading.Thread(target=lambda: mv.lexical.reindex(
                batch=3, progress=lambda d, n: seen.append((d, n))))
            t.start()
            t.join(1.5)
            assert t.is_alive() and seen == []  # it waits for the lock
        t.join(30)
        assert seen == [(3, 7), (6, 7), (7, 7)]
        assert mv.lexical.pending() == {}
        assert _hits_in(old_database, WORD)["memories.tsv"] == 0
        with mv.db.transaction("old") as conn:
            assert search.lexical_stats(conn, "s") == search.lexical_recount(conn, "s")
        assert mv.lexical.reindex().total == 0  # nothing left
    finally:
        mv.close()
