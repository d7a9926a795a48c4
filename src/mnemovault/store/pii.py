"""SQL of the PII vault's tables: ``pii_values`` (placeholder, kind, keyed fingerprint,
ciphertext, tombstone), ``pii_deks`` (wrapped data keys, kept apart from the ciphertexts
so one value can be destroyed alone) and ``pii_tenant_keys`` (each tenant's wrapped
secret).

Nothing here encrypts or decrypts: it stores and returns sealed bytes. The recipes that
use them are in :mod:`mnemovault.pii.vault`. Every tenant statement names its tenant
(``tenant_id = ...``) besides row-level security: on Citus that routes it to one shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from mnemovault.store.db import owner_connection

Conn = psycopg.Connection[Any]


# -- tenant secret -------------------------------------------------------------------------
def insert_tenant_secret(conn: Conn, tenant: str, kek_version: int, nonce: bytes,
                         wrapped: bytes) -> None:
    """Store the tenant's wrapped secret unless it has one (a concurrent first use wins)."""
    conn.execute(
        "INSERT INTO pii_tenant_keys (tenant_id, kek_version, nonce, wrapped_secret) "
        "VALUES (%s, %s, %s, %s) ON CONFLICT (tenant_id) DO NOTHING",
        (tenant, kek_version, nonce, wrapped))


def tenant_secret(conn: Conn, tenant: str) -> dict[str, Any] | None:
    """``kek_version``, ``nonce``, ``wrapped_secret`` of the tenant, or None."""
    return conn.execute(
        "SELECT kek_version, nonce, wrapped_secret FROM pii_tenant_keys "
        "WHERE tenant_id = %s", (tenant,)).fetchone()


# -- values --------------------------------------------------------------------------------
def placeholder_by_fingerprint(conn: Conn, tenant: str, fp: bytes, *,
                               lock: bool = False) -> dict[str, Any] | None:
    """``placeholder`` and ``kind`` of the live value with this fingerprint, or None. With
    ``lock`` the row is locked ``FOR SHARE`` (a concurrent shred of it waits)."""
    return conn.execute(
        "SELECT placeholder, kind FROM pii_values WHERE tenant_id = %s AND fingerprint = %s"
        + (" FOR SHARE" if lock else ""), (tenant, fp)).fetchone()


def insert_value(conn: Conn, *, tenant: str, placeholder: str, kind: str, fp: bytes,
                 ntokens: int, head: bytes | None, nonce: bytes,
                 ciphertext: bytes) -> bool:
    """Insert a vault value; False when the placeholder or fingerprint is taken."""
    return conn.execute(
        "INSERT INTO pii_values (tenant_id, placeholder, kind, fingerprint, ntokens, "
        "head, nonce, ciphertext) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
        "ON CONFLICT DO NOTHING RETURNING placeholder",
        (tenant, placeholder, kind, fp, ntokens, head, nonce, ciphertext)).fetchone() is not None


def insert_dek(conn: Conn, *, tenant: str, placeholder: str, kek_version: int, nonce: bytes,
               wrapped: bytes) -> None:
    """Store a value's wrapped data key."""
    conn.execute(
        "INSERT INTO pii_deks (tenant_id, placeholder, kek_version, nonce, wrapped_dek) "
        "VALUES (%s, %s, %s, %s, %s)",
        (tenant, placeholder, kek_version, nonce, wrapped))


def placeholders_by_fingerprints(conn: Conn, tenant: str, fps: Sequence[bytes], *,
                                 lock: bool = True) -> dict[bytes, dict[str, Any]]:
    """The live values among ``fps`` (one statement), locked ``FOR SHARE`` as
    :func:`placeholder_by_fingerprint` with ``lock`` (without: a plain read, for a write's
    prediction ahead of its transaction): ``{fingerprint: {"placeholder", "kind"}}``
    (fingerprints the vault does not hold are absent)."""
    if not fps:
        return {}
    rows = conn.execute(
        "SELECT placeholder, kind, fingerprint FROM pii_values WHERE tenant_id = %s "
        "AND fingerprint = ANY(%s) ORDER BY fingerprint" + (" FOR SHARE" if lock else ""),
        (tenant, list(fps))).fetchall()
    return {bytes(r["fingerprint"]): r for r in rows}


def insert_values(conn: Conn, tenant: str,
                  rows: Sequence[tuple[str, str, bytes, int, bytes | None, bytes, bytes]]
                  ) -> dict[bytes, str]:
    """Insert vault values in one statement, each row ``(placeholder, kind, fingerprint,
    ntokens, head, nonce, ciphertext)``, in the order given (callers sort by fingerprint
    so concurrent writers take the unique-index entries in one order); a row whose
    placeholder or fingerprint is taken is skipped. Returns ``{fingerprint: placeholder}``
    of the rows inserted."""
    if not rows:
        return {}
    # a VALUES list, not unnest(): Citus runs INSERT ... SELECT FROM unnest() as a COPY
    # into the shards, which row-level security refuses
    out: dict[bytes, str] = {}
    for i in range(0, len(rows), _ROWS_PER_STATEMENT):
        chunk = rows[i: i + _ROWS_PER_STATEMENT]
        values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * len(chunk))
        inserted = conn.execute(
            "INSERT INTO pii_values (tenant_id, placeholder, kind, fingerprint, ntokens, "
            f"head, nonce, ciphertext) VALUES {values} ON CONFLICT DO NOTHING "
            "RETURNING placeholder, fingerprint",
            [v for row in chunk for v in (tenant, *row)]).fetchall()
        out.update((bytes(r["fingerprint"]), r["placeholder"]) for r in inserted)
    return out


_ROWS_PER_STATEMENT = 1000  # at most 8 parameters a row: far below PostgreSQL's 65,535


def insert_deks(conn: Conn, tenant: str,
                rows: Sequence[tuple[str, int, bytes, bytes]]) -> None:
    """Store wrapped data keys in one statement, each row ``(placeholder, kek_version,
    nonce, wrapped_dek)``."""
    if not rows:
        return
    for i in range(0, len(rows), _ROWS_PER_STATEMENT):  # VALUES lists: see insert_values
        chunk = rows[i: i + _ROWS_PER_STATEMENT]
        values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(chunk))
        conn.execute(
            "INSERT INTO pii_deks (tenant_id, placeholder, kek_version, nonce, wrapped_dek) "
            f"VALUES {values}", [v for row in chunk for v in (tenant, *row)])


def fingerprints(conn: Conn, tenant: str) -> list[dict[str, Any]]:
    """``fingerprint``, ``kind``, ``ntokens``, ``head`` of every live value."""
    return conn.execute(
        "SELECT fingerprint, kind, ntokens, head FROM pii_values "
        "WHERE tenant_id = %s AND fingerprint IS NOT NULL", (tenant,)).fetchall()


def sealed_values(conn: Conn, tenant: str, placeholders: Sequence[str]) -> list[dict[str, Any]]:
    """Per placeholder the vault issued: ``placeholder``, ``nonce``, ``ciphertext`` (None
    once shredded) and its DEK's ``kek_version``, ``dnonce``, ``wrapped_dek``."""
    return conn.execute(
        "SELECT v.placeholder, v.nonce, v.ciphertext, d.kek_version, d.nonce AS dnonce, "
        "d.wrapped_dek FROM pii_values v LEFT JOIN pii_deks d "
        "ON d.tenant_id = v.tenant_id AND d.placeholder = v.placeholder "
        "WHERE v.tenant_id = %s AND v.placeholder = ANY(%s)",
        (tenant, list(placeholders))).fetchall()


def shredded_among(conn: Conn, tenant: str, placeholders: Sequence[str]) -> set[str]:
    """Those of ``placeholders`` that were shredded."""
    rows = conn.execute(
        "SELECT placeholder FROM pii_values WHERE tenant_id = %s AND placeholder = ANY(%s) "
        "AND shredded_at IS NOT NULL", (tenant, list(placeholders))).fetchall()
    return {r["placeholder"] for r in rows}


def live_among(conn: Conn, tenant: str, placeholders: Sequence[str]) -> set[str]:
    """Those of ``placeholders`` the vault holds and has not shredded."""
    rows = conn.execute(
        "SELECT placeholder FROM pii_values WHERE tenant_id = %s AND placeholder = ANY(%s) "
        "AND shredded_at IS NULL", (tenant, list(placeholders))).fetchall()
    return {r["placeholder"] for r in rows}


def shred(conn: Conn, tenant: str, placeholders: Sequence[str]) -> list[str]:
    """Delete the DEKs and blank ciphertext, nonce and fingerprint of ``placeholders``,
    keeping a tombstone; the placeholders shredded now (live ones only), sorted."""
    conn.execute("DELETE FROM pii_deks WHERE tenant_id = %s AND placeholder = ANY(%s)",
                 (tenant, list(placeholders)))
    rows = conn.execute(
        "UPDATE pii_values SET ciphertext = NULL, nonce = NULL, fingerprint = NULL, "
        "ntokens = NULL, head = NULL, shredded_at = now() WHERE tenant_id = %s "
        "AND placeholder = ANY(%s) AND shredded_at IS NULL RETURNING placeholder",
        (tenant, list(placeholders))).fetchall()
    return sorted(r["placeholder"] for r in rows)


# -- entries (metadata) --------------------------------------------------------------------
_USED_BY = ("EXISTS (SELECT 1 FROM graph_node_support s JOIN memories m "
            "ON m.tenant_id = s.tenant_id AND m.id = s.memory_id "
            "WHERE s.tenant_id = v.tenant_id AND s.node_id = v.placeholder{where})")


def _limits(scope: str | None, subject: str | None, *,
            outside: bool = False) -> tuple[str, list[Any]]:
    """The memory condition of :data:`_USED_BY` for a key's limits: within them (every limit
    holds), or ``outside`` them (some limit fails; nothing is outside no limit)."""
    pairs = [(c, v) for c, v in (("m.scope", scope), ("m.subject_id", subject))
             if v is not None]
    params = [v for _, v in pairs]
    if outside:
        tests = " OR ".join(f"{c} IS DISTINCT FROM %s" for c, _ in pairs)
        return (f" AND ({tests})" if pairs else " AND false"), params
    return "".join(f" AND {c} = %s" for c, _ in pairs), params


def _used(conn: Conn, tenant: str, placeholders: Sequence[str], inner: str,
          params: list[Any]) -> set[str]:
    rows = conn.execute(
        "SELECT placeholder FROM pii_values v WHERE v.tenant_id = %s "
        "AND placeholder = ANY(%s) AND " + _USED_BY.format(where=inner),
        (tenant, list(placeholders), *params)).fetchall()
    return {r["placeholder"] for r in rows}


def used_outside(conn: Conn, tenant: str, placeholders: Sequence[str], *, scope: str | None,
                 subject: str | None) -> set[str]:
    """Those of ``placeholders`` a memory outside ``scope`` / ``subject`` also uses."""
    return _used(conn, tenant, placeholders, *_limits(scope, subject, outside=True))


def entry(conn: Conn, tenant: str, placeholder: str) -> dict[str, Any] | None:
    """The metadata of one entry (as :func:`entries`), or None."""
    return conn.execute(
        "SELECT placeholder, kind, created_at, shredded_at FROM pii_values "
        "WHERE tenant_id = %s AND placeholder = %s", (tenant, placeholder)).fetchone()


def live_entries(conn: Conn, tenant: str) -> list[dict[str, Any]]:
    """``placeholder``, ``kind``, ``created_at`` of every live entry, by placeholder."""
    return conn.execute(
        "SELECT placeholder, kind, created_at FROM pii_values "
        "WHERE tenant_id = %s AND shredded_at IS NULL ORDER BY placeholder",
        (tenant,)).fetchall()


# -- key-encryption keys ---------------------------------------------------------------------
# Lock protocol of a live rotation (mnemovault.pii.rotation): every transaction that wraps a
# new data key or tenant secret takes WRAP_LOCK in share mode *before* it picks the KEK
# version (:func:`lock_wrap`); the rotation's retire takes it exclusively
# (:func:`lock_retire`), so once it holds it every wrap under an old version has committed
# (and is seen by its final check) and none can start until the key file no longer holds
# that version. ROTATION_LOCK (a session lock on the owner's connection) lets one rotation
# run at a time. Both are advisory locks on the server the application connects to (the
# coordinator on Citus).
WRAP_LOCK = 0x6D76_6B65_6B77  # "mvkekw"
ROTATION_LOCK = 0x6D76_6B65_6B72  # "mvkekr"


def lock_wrap(conn: Conn) -> None:
    """Take the wrap lock in share mode until the end of the transaction (a writer, before
    it picks the KEK version of a new data key or tenant secret)."""
    conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (WRAP_LOCK,))


def lock_retire(conn: Conn, timeout_ms: int) -> None:
    """Take the wrap lock exclusively until the end of the transaction, waiting at most
    ``timeout_ms`` for the writers that hold it (new ones queue behind this request).

    Raises:
        psycopg.errors.LockNotAvailable: they did not finish in time (the transaction is
            aborted)."""
    conn.execute(f"SET LOCAL lock_timeout = {int(timeout_ms)}")
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRAP_LOCK,))
    conn.execute("SET LOCAL lock_timeout = 0")


def try_lock_rotation(conn: Conn) -> bool:
    """Take the rotation's session lock on ``conn`` (autocommit; held until the connection
    closes, also when its process is killed); False when another rotation holds it."""
    row = conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (ROTATION_LOCK,)).fetchone()
    assert row is not None
    return bool(row["got"] if isinstance(row, dict) else row[0])


# operator paths: the owner's connection, every tenant
def kek_versions_in_use(url: str) -> set[int]:
    """Every KEK version a wrapped DEK or tenant secret uses."""
    with owner_connection(url, autocommit=True) as conn:
        rows = conn.execute("SELECT kek_version FROM pii_deks UNION "
                            "SELECT kek_version FROM pii_tenant_keys").fetchall()
    return {r[0] for r in rows}


def tenants_not_under(conn: Conn, version: int) -> list[str]:
    """Tenants with a secret or a wrapped DEK under another KEK version than ``version``."""
    return [r["tenant_id"] if isinstance(r, dict) else r[0] for r in conn.execute(
        "SELECT tenant_id FROM pii_tenant_keys WHERE kek_version <> %(v)s UNION "
        "SELECT DISTINCT tenant_id FROM pii_deks WHERE kek_version <> %(v)s ORDER BY 1",
        {"v": version}).fetchall()]


def secrets_not_under(conn: Conn, version: int, tenant: str) -> list[dict[str, Any]]:
    """``tenant``'s secret if wrapped under another KEK version than ``version`` (locked
    for the rewrap)."""
    return conn.execute("SELECT tenant_id, kek_version, nonce, wrapped_secret "
                        "FROM pii_tenant_keys WHERE tenant_id = %s AND kek_version <> %s "
                        "FOR UPDATE", (tenant, version)).fetchall()


def rewrap_secret(conn: Conn, tenant: str, version: int, nonce: bytes, wrapped: bytes) -> None:
    conn.execute("UPDATE pii_tenant_keys SET kek_version = %s, nonce = %s, "
                 "wrapped_secret = %s WHERE tenant_id = %s", (version, nonce, wrapped, tenant))


def deks_not_under(conn: Conn, version: int, tenant: str) -> list[dict[str, Any]]:
    """``tenant``'s wrapped DEKs under another KEK version than ``version`` (locked for the
    rewrap, in placeholder order)."""
    return conn.execute("SELECT tenant_id, placeholder, kek_version, nonce, wrapped_dek "
                        "FROM pii_deks WHERE tenant_id = %s AND kek_version <> %s "
                        "ORDER BY placeholder FOR UPDATE", (tenant, version)).fetchall()


def rewrap_dek(conn: Conn, tenant: str, placeholder: str, version: int, nonce: bytes,
               wrapped: bytes) -> None:
    conn.execute("UPDATE pii_deks SET kek_version = %s, nonce = %s, wrapped_dek = %s "
                 "WHERE tenant_id = %s AND placeholder = %s",
                 (version, nonce, wrapped, tenant, placeholder))


def set_tenant(conn: Conn, tenant: str) -> None:
    """Set the row-level-security tenant for the rest of the transaction (an operator
    transaction that writes one tenant's audit row)."""
    conn.execute("SELECT set_config('mnemovault.tenant_id', %s, true)", (tenant,))
