"""Audit operations for interfaces: export, checkpoints, proofs, verification from the
database. Each call runs under the caller's tenant (row-level security) and needs
``audit:read``. Also where the deployment's checkpoint signing key lives
(:func:`signing_key_path`) and its public half (:func:`deployment_public_key`), which the
verifiers use by default."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from mnemovault.audit import log
from mnemovault.audit.chain import export_line
from mnemovault.audit.checkpoint import Checkpoint, CheckpointError, signing_public_key
from mnemovault.audit.merkle import (
    consistency_proof,
    consistency_proof_node_ids,
    inclusion_proof,
    inclusion_proof_node_ids,
)
from mnemovault.audit.verify import VerifyResult, verify_rows
from mnemovault.auth import Principal
from mnemovault.config import Settings
from mnemovault.errors import ConfigError, NotFound, ValidationError
from mnemovault.store import audit as store
from mnemovault.store.db import Database

EXPORT_BATCH = 5000


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
