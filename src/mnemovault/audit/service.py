"""Audit operations for interfaces: export, checkpoints, proofs, verification from the
database. Each call runs under the caller's tenant (row-level security) and needs
``audit:read``. Also where the deployment's checkpoint signing key lives
(:func:`signing_key_path`) and its public half (:func:`deployment_public_key`), which the
verifiers use by default."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from mnemovault.audit import log
from mnemovault.audit.chain import export_line
from mnemovault.audit.checkpoint import (
    Checkpoint,
    CheckpointError,
    open_checkpoint,
    signing_public_key,
)
from mnemovault.audit.merkle import (
    consistency_proof,
    consistency_proof_node_ids,
    inclusion_proof,
    inclusion_proof_node_ids,
    leaf_hash,
    range_root,
    verify_inclusion,
)
from mnemovault.audit.verify import VerifyResult, verify_rows
from mnemovault.auth import Principal
from mnemovault.config import Settings
from mnemovault.errors import ConfigError, NotFound, ValidationError
from mnemovault.store import audit as store
from mnemovault.store.db import Database

EXPORT_BATCH = 5000
ROW_FIELDS = ("seq", "ts", "operation", "actor", "agent", "trigger", "request_id")
"""The fields of a row that :meth:`AuditService.rows` shows (ids and names, never text)."""


def signing_key_path(settings: Settings) -> Path:
    """The checkpoint signing key file: ``MNEMOVAULT_AUDIT_SIGNING_KEY``, else
    ``<data dir>/audit_signing.key`` (its public half is ``<that>.pub``)."""
    return settings.audit_signing_key or Path(settings.data_dir).expanduser() / "audit_signing.key"


def deployment_public_key(settings: Settings) -> tuple[Ed25519PublicKey, Path] | None:
    """The deployment's own checkpoint public key and the file it was read from: derived
    from the signing key (:func:`signing_key_path`), else read from its ``.pub``; None
    when neither file exists (nothing has been signed here yet).

    Raises:
        ConfigError: a key file exists but can't be read or holds no usable key.
    """
    path = signing_key_path(settings)
    try:
        return signing_public_key(path)
    except CheckpointError as exc:
        raise ConfigError(f"audit signing key: {exc}", field="audit_signing_key") from None
    except OSError as exc:
        raise ConfigError(f"audit signing key: cannot read {exc.filename or path}: "
                          f"{exc.strerror or exc}", field="audit_signing_key") from None


class AuditService:
    def __init__(self, db: Database) -> None:
        self.db = db

    def size(self, who: Principal) -> int:
        who.require("audit:read")
        with self.db.transaction(who.tenant) as conn:
            return store.head_seq(conn, who.tenant)

    def export(self, who: Principal, start: int | None = None,
               end: int | None = None) -> Iterator[bytes]:
        """JSON Lines of rows ``start <= seq <= end`` (inclusive; default all), in order,
        read in batches so a large log streams."""
        who.require("audit:read")
        lo = 1 if start is None else start
        hi = end
        if lo < 1 or (hi is not None and hi < lo):
            raise ValidationError("from: must be >= 1 and <= to", field="from")
        seq = lo - 1
        while True:
            with self.db.transaction(who.tenant) as conn:
                rows = store.rows_between(conn, who.tenant, seq, hi, EXPORT_BATCH)
            if not rows:
                return
            yield b"".join(export_line(bytes(r["row_bytes"]), bytes(r["prev_hash"]),
                                       bytes(r["row_hash"])) for r in rows)
            seq = rows[-1]["seq"]

    def checkpoint(self, who: Principal, *, sign_now: bool = False) -> dict[str, Any]:
        """The latest signed checkpoint (with ``sign_now``, first sign one at the current
        size). Raises NotFound when the tenant has none yet."""
        who.require("audit:read")
        with self.db.transaction(who.tenant) as conn:
            row = (log.checkpoint_now(conn, who.tenant) if sign_now
                   else log.latest_checkpoint(conn, who.tenant))
        if row is None:
            raise NotFound("checkpoint: this tenant has no signed checkpoint yet")
        return {"size": row["size"], "root": bytes(row["root"]).hex(), "note": row["note"],
                "created_at": row["created_at"]}

    def _nodes(self, who: Principal, ids: list[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        if not ids:
            return {}
        with self.db.transaction(who.tenant) as conn:
            return store.node_hashes(conn, who.tenant, ids)

    def _check_size(self, who: Principal, size: int, name: str) -> None:
        current = self.size(who)
        if not 1 <= size <= current:
            raise ValidationError(f"{name}: must be in 1..{current} (the tree size)", field=name)

    def inclusion(self, who: Principal, seq: int, size: int) -> dict[str, Any]:
        """RFC 9162 inclusion proof of row ``seq`` (leaf ``seq - 1``) in the tree of
        ``size`` rows: audit path hashes (hex), leaf hash."""
        self._check_size(who, size, "size")
        if not 1 <= seq <= size:
            raise ValidationError("seq: must be in 1..size", field="seq")
        ids = inclusion_proof_node_ids(seq - 1, size)
        nodes = self._nodes(who, [*ids, (0, seq - 1)])
        proof = inclusion_proof(seq - 1, size, lambda level, i: nodes[(level, i)])
        return {"seq": seq, "leaf_index": seq - 1, "size": size,
                "leaf_hash": nodes[(0, seq - 1)].hex(), "proof": [h.hex() for h in proof]}

    def consistency(self, who: Principal, first: int, second: int) -> dict[str, Any]:
        """RFC 9162 consistency proof between tree sizes ``first`` < ``second``."""
        self._check_size(who, second, "second")
        if not 1 <= first <= second:
            raise ValidationError("first: must be in 1..second", field="first")
        nodes = self._nodes(who, consistency_proof_node_ids(first, second))
        proof = consistency_proof(first, second, lambda level, i: nodes[(level, i)])
        return {"first": first, "second": second, "proof": [h.hex() for h in proof]}

    def verify(self, who: Principal, *,
               checkpoint: Checkpoint | str | os.PathLike[str] | None = None,
               public_key: Ed25519PublicKey | str | os.PathLike[str] | None = None,
               allow_unsigned: bool = False, strict: bool = False) -> VerifyResult:
        """Walk the tenant's chain in the database: every link and row hash; with a
        checkpoint, also the Merkle root of its first ``size`` rows (arguments as for
        :func:`mnemovault.audit.verify.verify_rows`). A tenant with no rows gives an
        ``ok`` result with ``rows == 0`` (``empty``): nothing was verified."""
        who.require("audit:read")

        def rows() -> Iterator[tuple[int, bytes, bytes, bytes]]:
            seq = 0
            while True:
                with self.db.transaction(who.tenant) as conn:
                    batch = store.rows_after(conn, who.tenant, seq, EXPORT_BATCH)
                if not batch:
                    return
                for r in batch:
                    yield (r["seq"], bytes(r["row_bytes"]), bytes(r["prev_hash"]),
                           bytes(r["row_hash"]))
                seq = batch[-1]["seq"]

        return verify_rows(rows(), tenant_id=who.tenant, checkpoint=checkpoint,
                           public_key=public_key, allow_unsigned=allow_unsigned, strict=strict)

    def checkpoint_status(self, who: Principal, public_key: Ed25519PublicKey | None
                          ) -> dict[str, Any]:
        """The chain's head and its latest checkpoint, checked: ``{"size", "checkpoint"
        (as :meth:`checkpoint`, or None), "signature_ok" (the note's Ed25519 signature under
        ``public_key``; None without a key), "root_ok" (the note's root equals the root of
        the stored Merkle tree at its size, from O(log n) stored nodes: RFC 9162 section
        2.1), "error"}``. Cheap: no row is read (the full walk is :meth:`verify`)."""
        who.require("audit:read")
        with self.db.transaction(who.tenant) as conn:
            size = store.head_seq(conn, who.tenant)
            row = log.latest_checkpoint(conn, who.tenant)
        out: dict[str, Any] = {"size": size, "checkpoint": None, "signature_ok": None,
                               "root_ok": None, "error": None}
        if row is None:
            return out
        out["checkpoint"] = {"size": row["size"], "root": bytes(row["root"]).hex(),
                             "note": row["note"], "created_at": row["created_at"]}
        if public_key is not None:
            try:
                cp = open_checkpoint(row["note"], public_key)
                out["signature_ok"] = True
            except (CheckpointError, ValueError) as exc:
                out["signature_ok"] = False
                out["error"] = f"checkpoint: {exc}"
                return out
            if cp.root_hash != bytes(row["root"]) or cp.size != row["size"]:
                out["root_ok"] = False
                out["error"] = "checkpoint: the signed note and the stored row disagree"
                return out
        ids: list[tuple[int, int]] = []
        pos, end = 0, int(row["size"])
        while pos < end:
            level = (end - pos).bit_length() - 1
            ids.append((level, pos >> level))
            pos += 1 << level
        nodes = self._nodes(who, ids)
        try:
            got = range_root(lambda level, i: nodes[(level, i)], 0, end)
        except KeyError:
            out["root_ok"] = False
            out["error"] = "checkpoint: stored Merkle nodes are missing"
            return out
        out["root_ok"] = got == bytes(row["root"])
        if not out["root_ok"]:
            out["error"] = "checkpoint: the stored tree's root differs from the checkpoint's"
        return out

    def rows(self, who: Principal, *, since: datetime | None = None,
             until: datetime | None = None, before: int | None = None,
             limit: int = 50) -> dict[str, Any]:
        """A page of the chain's rows newest first, within ``since <= ts < until`` and
        ``seq < before`` (keyset: pass ``next_before`` back as ``before``): ``{"items":
        [{"seq", "ts", "operation", "actor", "agent", "trigger", "request_id", "ids" (the
        number of memory ids), "first_id", "counts" (the row's integer details)}],
        "next_before", "size"}``. Never a row's free fields (provenance, other details).
        The time bounds become seq bounds by binary search on ``ts`` (rows are appended in
        time order under the head's lock, migration 0016): O(log n) primary-key lookups,
        so a page costs the same over a million rows as over ten. Needs ``audit:read``.

        Raises:
            ValidationError: ``limit`` outside 1..200, ``since`` after ``until``.
        """
        import orjson

        who.require("audit:read")
        if not isinstance(limit, int) or not 1 <= limit <= 200:
            raise ValidationError("limit: must be an integer in 1..200", field="limit")
        if since is not None and until is not None and since > until:
            raise ValidationError("since: must not be after until", field="since")
        with self.db.transaction(who.tenant) as conn:
            size = store.head_seq(conn, who.tenant)

            def first_at(t: datetime) -> int:  # the first seq with ts >= t (size+1: none)
                lo, hi = 1, size + 1
                while lo < hi:
                    mid = (lo + hi) // 2
                    ts = store.ts_at(conn, who.tenant, mid)
                    if ts is not None and ts < t:
                        lo = mid + 1
                    else:
                        hi = mid
                return lo

            low = first_at(since) if since is not None else 1
            high = (first_at(until) - 1) if until is not None else size
            if before is not None:
                high = min(high, before - 1)
            rows = (store.rows_before(conn, who.tenant, low=low, high=high, limit=limit + 1)
                    if high >= low else [])
        items = []
        for r in rows[:limit]:
            body = orjson.loads(bytes(r["row_bytes"]))
            ids = body.get("memory_ids") or []
            details = body.get("details") or {}
            items.append({**{k: body.get(k) for k in ROW_FIELDS}, "seq": r["seq"],
                          "ts": r["ts"], "operation": r["operation"], "ids": len(ids),
                          "first_id": ids[0] if ids else None,
                          "counts": {k: v for k, v in sorted(details.items())
                                     if isinstance(v, int) and not isinstance(v, bool)}})
        return {"items": items, "size": size,
                "next_before": rows[limit - 1]["seq"] if len(rows) > limit else None}

    def inclusion_checked(self, who: Principal, seq: int) -> dict[str, Any]:
        """:meth:`inclusion` of row ``seq`` in the current tree, with ``verified``: the
        proof recomputes the root of the stored tree (RFC 9162 section 2.1.3.2)."""
        size = self.size(who)
        proof = self.inclusion(who, seq, size)
        ids: list[tuple[int, int]] = []
        pos = 0
        while pos < size:
            level = (size - pos).bit_length() - 1
            ids.append((level, pos >> level))
            pos += 1 << level
        nodes = self._nodes(who, ids)
        root = range_root(lambda level, i: nodes[(level, i)], 0, size)
        try:
            verify_inclusion(seq - 1, size, bytes.fromhex(proof["leaf_hash"]),
                             [bytes.fromhex(h) for h in proof["proof"]], root)
            ok = True
        except ValueError:
            ok = False
        with self.db.transaction(who.tenant) as conn:
            row = store.rows_between(conn, who.tenant, seq - 1, seq, 1)
        stored = bytes(row[0]["row_bytes"]) if row else b""
        # the row as stored now hashes to the proven leaf (a row rewritten outside does not)
        matches = bool(row) and leaf_hash(stored).hex() == proof["leaf_hash"]
        return {**proof, "root": root.hex(), "verified": ok, "row_matches": matches}
