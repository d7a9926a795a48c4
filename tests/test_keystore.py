"""The content-key store (issue 21, item 1), both implementations against real storage:
create/get/destroy/list, a destroyed key reads as gone (tombstone, never a crash), a
subject written again after its erase gets a new key, the wrapped bytes leave the disk,
two stores on one place agree on one key per owner, a KEK rotation rewraps them and the
per-process cache drops what another process destroyed."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from mnemovault.errors import ConfigError
from mnemovault.pii.crypto import DecryptionError, KekUnavailable, KeyRing
from mnemovault.pii.keystore import (
    DirectoryKeyStore,
    KeyCache,
    KeyDestroyed,
    KeyStore,
    Owner,
    PostgresKeyStore,
    open_key_store,
)
from mnemovault.pii.sealing import ERASED, Sealer, content_aad, open_text, seal_text
from mnemovault.store.db import owner_connection
from mnemovault.vault import MemoryVault


@pytest.fixture
def pg_keys_url(vault: MemoryVault) -> Iterator[str]:
    """A separate small database on the test server for the PostgreSQL key store (one per
    test: each test has its own key ring)."""
    name = f"mv_keys_{uuid.uuid4().hex[:8]}"
    with owner_connection(vault.db.url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    params = conninfo_to_dict(vault.db.url)
    params["dbname"] = name
    yield make_conninfo(**params)  # type: ignore[arg-type]
    with owner_connection(vault.db.url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["directory", "postgresql"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path,
               pg_keys_url: str) -> Iterator[tuple[KeyRing, object]]:
    ring = KeyRing.load(env_value=None, key_file=tmp_path / "kek.json")
    made: list[KeyStore] = []

    def make() -> KeyStore:
        s: KeyStore
        if request.param == "directory":
            s = DirectoryKeyStore(ring, tmp_path / "keys")
        else:
            s = PostgresKeyStore(ring, pg_keys_url)
        made.append(s)
        return s

    yield ring, make
    for s in made:
        s.close()


def _tenant() -> str:
    return f"ks-{uuid.uuid4().hex[:8]}"


def test_create_get_destroy_and_list(make_store: tuple[KeyRing, object]) -> None:
    ring, make = make_store
    store: KeyStore = make()  # type: ignore[operator]
    t = _tenant()
    ada, bob = Owner("hmac-sha256:scope", "hmac-sha256:ada"), Owner("hmac-sha256:scope",
                                                                      "hmac-sha256:bob")
    scope_owner = Owner("hmac-sha256:scope")
    k_ada, key_ada = store.get_or_create(t, ada)
    assert store.get_or_create(t, ada) == (k_ada, key_ada)  # one key per owner
    k_bob, _ = store.get_or_create(t, bob)
    k_scope, _ = store.get_or_create(t, scope_owner)
    assert len({k_ada, k_bob, k_scope}) == 3 and len(key_ada) == 32
    assert store.get(t, k_ada) == key_ada
    assert store.current(t, ada) == k_ada
    assert store.owned(t, "hmac-sha256:scope", "hmac-sha256:ada") == [k_ada]
    assert store.owned(t, "hmac-sha256:scope", None) == sorted([k_ada, k_bob, k_scope])
    assert store.versions() == {ring.current: 3} or sum(store.versions().values()) >= 3

    assert store.destroy(t, [k_ada]) == [k_ada]
    assert store.destroy(t, [k_ada]) == []  # idempotent
    with pytest.raises(KeyDestroyed):
        store.get(t, k_ada)
    got, gone = store.unwrap_many(t, [k_ada, k_bob, "00000000-0000-4000-8000-000000000000"])
    assert set(got) == {k_bob} and gone == {k_ada, "00000000-0000-4000-8000-000000000000"}
    assert [e.key_id for e in store.destroyed(t)] == [k_ada]
    tomb = store.destroyed(t)[0]
    assert tomb.wrapped is None and tomb.nonce is None and tomb.destroyed_at
    # written again after the erase: a new key, never the old one
    assert store.current(t, ada) is None
    k_ada2, key_ada2 = store.get_or_create(t, ada)
    assert k_ada2 != k_ada and key_ada2 != key_ada
    # other tenants see none of it
    assert store.owned(_tenant(), "hmac-sha256:scope", None) == []
    with pytest.raises(KeyDestroyed):
        store.get(_tenant(), k_bob)


def test_two_stores_on_one_place_agree_on_one_key(make_store: tuple[KeyRing, object]) -> None:
    _ring, make = make_store
    a: KeyStore = make()  # type: ignore[operator]
    b: KeyStore = make()  # type: ignore[operator]
    t = _tenant()
    owner = Owner("hmac-sha256:s", "hmac-sha256:x")
    results: list[tuple[str, bytes]] = []

    def go(s: KeyStore) -> None:
        results.append(s.get_or_create(t, owner))

    threads = [threading.Thread(target=go, args=(s,)) for s in (a, b, a, b)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(set(results)) == 1
    assert a.owned(t, "hmac-sha256:s", "hmac-sha256:x") == [results[0][0]]


def test_rotation_rewraps_and_a_retired_version_cannot_open_old_copies(
        make_store: tuple[KeyRing, object]) -> None:
    ring, make = make_store
    store: KeyStore = make()  # type: ignore[operator]
    t = _tenant()
    kid, key = store.get_or_create(t, Owner("hmac-sha256:s", "hmac-sha256:r"))
    old = ring.current
    new = ring.add_version()
    assert any(e.key_id == kid for e in store.not_under(new))
    assert store.rewrap(new) >= 1
    assert not store.not_under(new)
    ring.retire([old])
    assert store.get(t, kid) == key  # under the new version
    entry = next(e for e in store.entries(t) if e.key_id == kid)
    assert entry.kek_version == new
    with pytest.raises(KekUnavailable):
        ring.kek(old)


def test_directory_destroy_leaves_no_wrapped_bytes_on_disk(tmp_path: Path) -> None:
    ring = KeyRing.load(env_value=None, key_file=tmp_path / "kek.json")
    store = DirectoryKeyStore(ring, tmp_path / "keys")
    t = _tenant()
    kid, _key = store.get_or_create(t, Owner("hmac-sha256:s", "hmac-sha256:z"))
    entry = next(e for e in store.entries(t))
    assert entry.wrapped is not None
    import base64

    wrapped_b64 = base64.b64encode(entry.wrapped)
    path = tmp_path / "keys" / t / f"{kid}.json"
    assert wrapped_b64 in path.read_bytes()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    store.destroy(t, [kid])
    for f in (tmp_path / "keys").rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert wrapped_b64 not in data and entry.wrapped not in data, f
    assert not list((tmp_path / "keys" / t).glob(".*.tmp"))


def test_cache_follows_a_destroy_by_another_process(make_store: tuple[KeyRing, object]) -> None:
    _ring, make = make_store
    mine: KeyStore = make()  # type: ignore[operator]
    other: KeyStore = make()  # type: ignore[operator]
    cache = KeyCache(mine, recheck_seconds=0.0)
    t = _tenant()
    owner = Owner("hmac-sha256:s", "hmac-sha256:c")
    kid, key = cache.for_owner(t, owner)
    assert cache.keys(t, [kid]) == ({kid: key}, set())
    other.destroy(t, [kid])
    assert cache.keys(t, [kid]) == ({}, {kid})
    kid2, _ = cache.for_owner(t, owner)  # a new key, not the destroyed one
    assert kid2 != kid
    cache.evict(t, [kid2])
    assert cache.keys(t, [kid2])[0].keys() == {kid2}  # evicted locally, still live


def test_sealed_text_is_bound_to_row_column_and_key(tmp_path: Path) -> None:
    ring = KeyRing.load(env_value=None, key_file=tmp_path / "kek.json")
    sealer = Sealer.of(DirectoryKeyStore(ring, tmp_path / "keys"))
    t = _tenant()
    kid, key = sealer.key_for(t, Owner("hmac-sha256:s", "hmac-sha256:a"))
    blob = sealer.seal(t, kid, key, "memories", "content", "row-1", "Ada has diabetes")
    assert b"diabetes" not in blob
    assert open_text(key, blob, content_aad(t, "memories", "content", "row-1", kid)) \
        == "Ada has diabetes"
    for aad in (content_aad(t, "memories", "content", "row-2", kid),
                content_aad(t, "memories", "key", "row-1", kid),
                content_aad("other", "memories", "content", "row-1", kid)):
        with pytest.raises(DecryptionError):
            open_text(key, blob, aad)
    rows = [{"id": "row-1", "key_id": kid, "content_sealed": blob, "content": ""}]
    assert sealer.open_rows(t, rows, "memories", ["content"])[0]["content"] \
        == "Ada has diabetes"
    sealer.store.destroy(t, [kid])
    sealer.cache.evict(t, [kid])
    rows = [{"id": "row-1", "key_id": kid, "content_sealed": blob, "content": ""}]
    out = sealer.open_rows(t, rows, "memories", ["content"])[0]
    assert out["content"] == ERASED and out["erased"] is True
    assert seal_text(key, "x", b"a") != seal_text(key, "x", b"a")  # fresh nonces


def test_open_key_store_settings(tmp_path: Path) -> None:
    ring = KeyRing.load(env_value=None, key_file=tmp_path / "k" / "kek.json")
    s = open_key_store(ring, None, tmp_path)
    assert isinstance(s, DirectoryKeyStore) and s.root == tmp_path / "k" / "keys"
    assert isinstance(open_key_store(ring, str(tmp_path / "x"), tmp_path), DirectoryKeyStore)
    with pytest.raises(ConfigError) as e:
        open_key_store(ring, "s3://bucket/keys", tmp_path)
    assert e.value.field == "key_store"
    with pytest.raises(ConfigError) as e:
        open_key_store(ring, "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1",
                       tmp_path)
    assert e.value.field == "key_store"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError):
        DirectoryKeyStore(ring, tmp_path / "file")


def test_pg_destroy_nulls_the_wrapped_bytes(pg_keys_url: str, tmp_path: Path) -> None:
    ring = KeyRing.load(env_value=None, key_file=tmp_path / "kek.json")
    store = PostgresKeyStore(ring, pg_keys_url)
    t = _tenant()
    kid, _ = store.get_or_create(t, Owner("hmac-sha256:s", "hmac-sha256:p"))
    store.destroy(t, [kid])
    with psycopg.connect(pg_keys_url) as conn:
        row = conn.execute("SELECT wrapped, nonce, destroyed_at FROM mv_content_keys "
                           "WHERE key_id = %s", (kid,)).fetchone()
    assert row is not None and row[0] is None and row[1] is None and row[2] is not None
    store.close()


def test_directory_rewrap_and_destroy_never_show_a_reader_a_zeroed_file(
        tmp_path: Path) -> None:
    """Issue 29 (found by scripts/kek_rotate_check.py: one 500 "… is not a valid key file
    (UnicodeDecodeError)" while `kek rotate` ran beside a writing `serve`): a rewrap or a
    destroy zeroed the key file in place before the new one was renamed over it, and a
    reader, which takes no lock, read the zeros. Another store on the same directory reads
    every key throughout many rewraps, and sees a tombstone, never an error, during a
    destroy."""
    ring = KeyRing.load(env_value=None, key_file=tmp_path / "kek.json")
    writer = DirectoryKeyStore(ring, tmp_path / "keys")
    reader = DirectoryKeyStore(ring, tmp_path / "keys")
    t = _tenant()
    keys = dict(writer.get_or_create(t, Owner("hmac-sha256:s", f"hmac-sha256:{i}"))
                for i in range(4))
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = 0

    def read() -> None:
        nonlocal reads
        while not stop.is_set():
            try:
                got, gone = reader.unwrap_many(t, list(keys))
                assert got == {k: v for k, v in keys.items() if k not in gone}, "wrong key"
                list(reader.entries(t))
                reads += 1
            except BaseException as exc:  # reported below
                errors.append(exc)
                return

    th = threading.Thread(target=read)
    th.start()
    try:
        for _ in range(40):
            assert writer.rewrap(ring.add_version()) == len(keys)
            if errors:
                break
        writer.destroy(t, [next(iter(keys))])
    finally:
        stop.set()
        th.join(30)
    assert not errors, errors[0]
    assert reads > 0


def test_directory_rewrap_killed_before_its_rename_leaves_the_old_key_readable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rotation killed while it rewraps a key file (here: the rename never happens) must
    leave the file under its old version, whole: it used to be zeroed first, and the key
    (every record under it) was lost."""
    import mnemovault.pii.keystore as ks

    ring = KeyRing.load(env_value=None, key_file=tmp_path / "kek.json")
    store = DirectoryKeyStore(ring, tmp_path / "keys")
    t = _tenant()
    kid, key = store.get_or_create(t, Owner("hmac-sha256:s", "hmac-sha256:k"))
    old = ring.current
    new = ring.add_version()

    def killed(path: Path, body: bytes, **kw: object) -> None:
        raise KeyboardInterrupt("killed before the rename")

    monkeypatch.setattr(ks, "write_private", killed)
    with pytest.raises(KeyboardInterrupt):
        store.rewrap(new)
    monkeypatch.undo()
    fresh = DirectoryKeyStore(ring, tmp_path / "keys")
    assert fresh.get(t, kid) == key
    assert next(e for e in fresh.entries(t) if e.key_id == kid).kek_version == old
    assert fresh.rewrap(new) == 1 and fresh.get(t, kid) == key
