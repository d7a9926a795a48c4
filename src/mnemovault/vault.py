"""``MemoryVault``: the one object every interface (library, HTTP, CLI, later MCP) calls.

Write path (SPEC section 2), in this order; the stored part is one transaction:

1. (chat only, later) in-band command check
2. capture guard            -> :meth:`MemoryVault._guard`        (seam, issue: capture guard)
3. injection sanitiser      -> :meth:`MemoryVault._sanitise`     (seam, issue: sanitiser)
4. pseudonymisation         -> :meth:`MemoryVault._pseudonymise` (seam, issue 3: PII vault)
5. embedding of the (pseudonymised) text only
6. insert memories, vault entries, audit row and outbox events in one transaction

If any step fails nothing is stored.
"""

from __future__ import annotations

import builtins
import hmac
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from pydantic import ValidationError as PydanticValidationError

from mnemovault.audit import log as audit
from mnemovault.audit.service import AuditService
from mnemovault.auth import ROLE_PERMISSIONS, Principal, Role, hash_secret, new_key, parse_token
from mnemovault.auth import validate_tenant as _validate_tenant
from mnemovault.config import Settings
from mnemovault.embed import Embedder, make_embedder
from mnemovault.errors import Conflict, NotFound, Unauthenticated, ValidationError
from mnemovault.governance import forget as forget_mod
from mnemovault.ids import uuid7
from mnemovault.models import (
    ForgetResult,
    Hit,
    Memory,
    MemoryInput,
    Page,
    Provenance,
    RecallFilters,
    Receipt,
)
from mnemovault.pii.crypto import KeyRing
from mnemovault.pii.detect import Detector
from mnemovault.pii.pseudonymise import Pseudonymiser
from mnemovault.pii.vault import PLACEHOLDER_RE, PiiVault, render
from mnemovault.recall.ranking import FusionWeights, fuse
from mnemovault.recall.search import text_candidates, vector_candidates
from mnemovault.store.db import Database

log = logging.getLogger(__name__)

_MEMORY_COLUMNS = (
    "id, scope, subject_id, type, content, key, pinned, archived, status, created_at, "
    "updated_at, last_accessed_at, access_count, provenance, parent_id, version"
)


def validation_error_from_pydantic(
    exc: PydanticValidationError, prefix: str = ""
) -> ValidationError:
    """Turn pydantic's error list into one :class:`ValidationError` naming the first field."""
    errors = exc.errors()
    first = errors[0]
    loc = ".".join(str(p) for p in (prefix, *first["loc"]) if p != "")
    msg = first["msg"].removeprefix("Value error, ")
    return ValidationError(f"{loc or 'body'}: {msg}", field=loc or None,
                           errors=[{"field": ".".join(str(p) for p in e["loc"]),
                                    "rule": e["msg"].removeprefix("Value error, ")}
                                   for e in errors])


def _as_inputs(items: Iterable[MemoryInput | dict[str, Any]]) -> list[MemoryInput]:
    out = []
    for i, item in enumerate(items):
        if isinstance(item, MemoryInput):
            out.append(item)
            continue
        try:
            out.append(MemoryInput.model_validate(item))
        except PydanticValidationError as exc:
            raise validation_error_from_pydantic(exc, prefix=f"items.{i}") from None
    return out


@dataclass
class _Prepared:
    item: MemoryInput
    content: str
    placeholders: list[str]


class MemoryVault:
    """Remember, recall, get, list and forget memories, per tenant, under governance.

    Open one with :meth:`open` (starts the embedded PostgreSQL unless ``DATABASE_URL`` is
    set, migrates it, loads the embedder) and close it when done (or use ``with``)::

        with MemoryVault.open() as mv:
            mv.remember("Alice prefers tea", scope="alice")
            hits = mv.recall("what does Alice drink?", scope="alice", k=3)

    Every method takes an optional ``principal``: the caller's tenant, role and permissions.
    Without one, the caller is the local operator: owner of the tenant ``settings.tenant``.
    """

    def __init__(self, db: Database, embedder: Embedder, settings: Settings,
                 keyring: KeyRing | None = None) -> None:
        self.db = db
        self.embedder = embedder
        self.settings = settings
        self.keyring = keyring or load_keyring(settings)
        self.pii = PiiVault(self.keyring)
        self.detectors = default_detectors(settings)
        self.audit = _setup_audit(db, settings)
        self.weights = FusionWeights(
            rrf_k=settings.recall_rrf_k,
            vector=settings.recall_vector_weight,
            text=settings.recall_text_weight,
            recency=settings.recall_recency_weight,
            half_life_days=settings.recall_recency_half_life_days,
        )

    # -- lifecycle ------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        settings: Settings | None = None,
        *,
        data_dir: str | Path | None = None,
        database_url: str | None = None,
        embedder: Embedder | None = None,
        migrate: bool = True,
    ) -> MemoryVault:
        """Connect (starting the embedded server if needed), migrate, check the embedder.

        Raises:
            ConfigError: the database was built with a different embedder.
            Unavailable: the database could not be started or migrated.
        """
        settings = settings or Settings()
        updates: dict[str, Any] = {}
        if data_dir is not None:
            updates["data_dir"] = Path(data_dir)
        if database_url is not None:
            updates["database_url"] = database_url
        if updates:
            settings = settings.model_copy(update=updates)
        embedder = embedder or make_embedder(settings)
        db = Database.from_settings(settings)
        dim = embedder.dimension
        if migrate:
            db.upgrade(dim)
        db.check_embedder(embedder.model, dim)
        db.open()
        if not settings.pii_pseudonymize:
            log.warning("PII_PSEUDONYMIZE=false: personal values are stored as written")
        return cls(db, embedder, settings, load_keyring(settings))

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> MemoryVault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def principal(self, tenant: str | None = None, role: Role = "owner") -> Principal:
        """A local principal (no API key) for ``tenant`` (default ``settings.tenant``)."""
        return Principal.local(tenant or self.settings.tenant, role)

    def _who(self, principal: Principal | None) -> Principal:
        return principal or self.principal()

    # -- tenants and keys -----------------------------------------------------------------
    def ensure_tenant(self, tenant: str) -> None:
        """Create the tenant if it does not exist (idempotent)."""
        _validate_tenant(tenant)
        with self.db.transaction(tenant) as conn:
            self._ensure_tenant(conn, tenant)

    @staticmethod
    def _ensure_tenant(conn: psycopg.Connection[Any], tenant: str) -> None:
        conn.execute(
            "INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT (tenant_id) DO NOTHING",
            (tenant,),
        )

    def create_key(self, tenant: str, role: Role, *, name: str | None = None,
                   principal: Principal | None = None) -> tuple[str, uuid.UUID]:
        """Create an API key; returns (token, key id). The token is shown once, never stored.

        Creates the tenant if needed when called locally (``principal`` None); through the
        API the caller needs ``keys:manage`` in that tenant, and may not grant a role with
        permissions it lacks.
        """
        _validate_tenant(tenant)
        if role not in ROLE_PERMISSIONS:
            raise ValidationError("role: must be one of owner, admin, member, service",
                                  field="role")
        if principal is not None:
            principal.require("keys:manage")
            if principal.tenant != tenant:
                raise NotFound("tenant: not found")
            missing = ROLE_PERMISSIONS[role] - principal.permissions
            if missing:
                principal.require(sorted(missing)[0])
        key = new_key(tenant)
        with self.db.transaction(tenant) as conn:
            if principal is None:
                self._ensure_tenant(conn, tenant)
            conn.execute(
                "INSERT INTO api_keys (tenant_id, key_id, key_hash, role, name) "
                "VALUES (%s, %s, %s, %s, %s)",
                (tenant, key.key_id, key.key_hash, role, name),
            )
            audit.append(conn, tenant=tenant, operation="KEY_CREATE",
                         actor=principal.actor if principal else "local",
                         details={"key_id": str(key.key_id), "role": role})
        return key.token, key.key_id

    def authenticate(self, token: str) -> Principal:
        """The principal of an API key token.

        Raises:
            Unauthenticated: malformed, unknown or revoked token (one message for all).
        """
        tenant, key_id, secret = parse_token(token)
        with self.db.transaction(tenant) as conn:
            row = conn.execute(
                "SELECT k.key_hash, k.role, k.permissions, k.scope, k.subject_id, k.revoked_at, "
                "t.deleted_at FROM api_keys k JOIN tenants t USING (tenant_id) "
                "WHERE k.tenant_id = %s AND k.key_id = %s",
                (tenant, key_id),
            ).fetchone()
        if (row is None or row["revoked_at"] is not None or row["deleted_at"] is not None
                or not hmac.compare_digest(bytes(row["key_hash"]), hash_secret(secret))):
            raise Unauthenticated("authorization: unknown or revoked API key")
        perms = ROLE_PERMISSIONS[row["role"]]
        if row["permissions"] is not None:
            perms = perms & frozenset(row["permissions"])
        return Principal(tenant=tenant, role=row["role"], permissions=perms, key_id=str(key_id),
                         scope=row["scope"], subject=row["subject_id"])

    # -- write path -----------------------------------------------------------------------
    def _guard(self, items: list[MemoryInput], principal: Principal) -> None:
        """Capture guard (SPEC section 8): may refuse the write. Seam: allows everything."""

    def _sanitise(self, items: list[MemoryInput]) -> list[MemoryInput]:
        """Injection sanitiser for imported/tool text (SPEC section 7). Seam: unchanged."""
        return items

    def _pseudonymiser(self, conn: psycopg.Connection[Any], tenant: str,
                       read_only: bool = False) -> Pseudonymiser:
        return Pseudonymiser(self.pii, self.detectors, conn, tenant, read_only=read_only)

    def _pseudonymise(self, conn: psycopg.Connection[Any], items: list[MemoryInput],
                      principal: Principal) -> list[_Prepared]:
        """Step 4 (SPEC section 3): every free-text field (content, scope, subject, key, tags,
        provenance values) is rewritten with placeholders; caller-named entities go into the
        vault first, so they are recognised in this batch too. Runs in the write transaction,
        so new vault entries commit or roll back with the memories."""
        if not self.settings.pii_pseudonymize:
            return [_Prepared(item=i, content=i.content, placeholders=[]) for i in items]
        ps = self._pseudonymiser(conn, principal.tenant)
        created: list[list[str]] = []
        registered: set[tuple[str, str]] = set()
        for item in items:
            new: list[str] = []
            for e in item.entities:
                if (e.kind, e.value) in registered:
                    continue
                registered.add((e.kind, e.value))
                placeholder, was_created = ps.register(e.kind, e.value)
                if was_created:
                    new.append(placeholder)
            created.append(new)
        out = []
        for item, new in zip(items, created, strict=True):
            def rw(value: str | None, _new: list[str] = new) -> str | None:
                if value is None:
                    return None
                r = ps.rewrite(value)
                _new.extend(p for p in r.created if p not in _new)
                return r.text

            prov = item.provenance.model_dump(exclude_none=True)
            prov = {k: (rw(v) if isinstance(v, str) else v) for k, v in prov.items()}
            prov["tags"] = [rw(t) for t in item.provenance.tags]
            rewritten = item.model_copy(update={
                "scope": rw(item.scope), "subject": rw(item.subject), "key": rw(item.key),
                "provenance": Provenance.model_validate(prov), "entities": []})
            content = rw(item.content) or ""
            out.append(_Prepared(item=rewritten, content=content, placeholders=new))
        return out

    def _translate(self, conn: psycopg.Connection[Any], tenant: str,
                   value: str | None) -> str | None:
        """Read-side pseudonymisation: the placeholders a value would have been stored under
        (lookups only; nothing is written)."""
        if value is None or not self.settings.pii_pseudonymize:
            return value
        return self._pseudonymiser(conn, tenant, read_only=True).rewrite(value, create=False).text

    def remember(
        self,
        content: str,
        *,
        scope: str,
        subject: str | None = None,
        type: str = "episode",
        key: str | None = None,
        provenance: dict[str, Any] | None = None,
        created_at: datetime | None = None,
        entities: builtins.list[dict[str, str]] | None = None,
        principal: Principal | None = None,
        request_id: str | None = None,
    ) -> Receipt:
        """Remember one memory. See :meth:`remember_many`. ``entities`` names personal values
        (``[{"kind": "person", "value": "Ada"}]``) to pseudonymise here and from now on."""
        item = {"content": content, "scope": scope, "subject": subject, "type": type,
                "key": key, "provenance": provenance or {}, "created_at": created_at,
                "entities": entities or []}
        try:
            parsed = MemoryInput.model_validate(item)
        except PydanticValidationError as exc:
            raise validation_error_from_pydantic(exc) from None
        return self.remember_many([parsed], principal=principal, request_id=request_id)[0]

    def remember_many(
        self,
        items: Sequence[MemoryInput | dict[str, Any]],
        *,
        principal: Principal | None = None,
        request_id: str | None = None,
        trigger: str = "remember",
    ) -> list[Receipt]:
        """Remember a batch: one embedding call, one transaction, one audit row.

        Memories with a ``key`` that is already live in their scope become a new version
        (``version`` + 1, ``parent_id`` = old id); the old one is marked ``superseded``.

        Returns:
            One :class:`Receipt` per item, in input order.
        Raises:
            ValidationError: an item is invalid (names ``items.<i>.<field>``); nothing stored.
            Forbidden: the principal lacks ``memory:write`` or is limited to another scope.
        """
        who = self._who(principal)
        who.require("memory:write")
        inputs = _as_inputs(items)
        if not inputs:
            return []
        for item in inputs:
            who.check_scope(item.scope)
        self._guard(inputs, who)
        inputs = self._sanitise(inputs)
        try:
            with self.db.transaction(who.tenant) as conn:
                if who.key_id is None:
                    self._ensure_tenant(conn, who.tenant)
                prepared = self._pseudonymise(conn, inputs, who)
                vectors = self.embedder.embed([p.content for p in prepared])  # step 5
                return self._store(conn, prepared, vectors, who, request_id, trigger)
        except psycopg.errors.UniqueViolation:
            raise Conflict(
                "key: a concurrent write created a version of this key; retrying is safe",
                field="key") from None

    def _store(self, conn: psycopg.Connection[Any], prepared: builtins.list[_Prepared],
               vectors: Any, who: Principal, request_id: str | None,
               trigger: str) -> builtins.list[Receipt]:
        """Step 6 of the write path: the memories and the audit row, in the caller's
        transaction."""
        now = datetime.now(UTC)
        receipts: builtins.list[Receipt] = []
        rows = []
        for p, vec in zip(prepared, vectors, strict=True):
            mid = uuid7()
            parent, version = None, 1
            if p.item.key is not None:
                old = conn.execute(
                    "UPDATE memories SET status = 'superseded', updated_at = %s "
                    "WHERE scope = %s AND key = %s AND status <> 'superseded' "
                    "RETURNING id, version",
                    (now, p.item.scope, p.item.key),
                ).fetchone()
                if old is not None:
                    parent, version = old["id"], old["version"] + 1
            row = (who.tenant, mid, p.item.scope, p.item.subject, p.item.type, p.content,
                   p.item.key, vec, p.item.created_at or now, now,
                   Jsonb(p.item.provenance.model_dump(exclude_none=True)), parent, version)
            if p.item.key is not None:
                self._insert(conn, [row])  # before the next item may supersede it
            else:
                rows.append(row)
            receipts.append(Receipt(id=mid, scope=p.item.scope, version=version,
                                    superseded=parent, placeholders=p.placeholders,
                                    audit_seq=0))
        self._insert(conn, rows)
        seq = audit.append(
            conn, tenant=who.tenant, operation="REMEMBER", actor=who.actor, agent=who.agent,
            memory_ids=[str(r.id) for r in receipts], trigger=trigger, request_id=request_id,
            details={"count": len(receipts),
                     "superseded": sum(1 for r in receipts if r.superseded),
                     "placeholders_created": sorted({p for r in receipts
                                                     for p in r.placeholders})},
        )
        for r in receipts:
            r.audit_seq = seq
        return receipts

    @staticmethod
    def _insert(conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memories (tenant_id, id, scope, subject_id, type, content, key, "
                "embedding, created_at, updated_at, provenance, parent_id, version) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                rows,
            )

    # -- read path ------------------------------------------------------------------------
    def recall(
        self,
        query: str,
        *,
        scope: str,
        k: int = 10,
        filters: RecallFilters | dict[str, Any] | None = None,
        principal: Principal | None = None,
        touch: bool = True,
        reveal: bool = False,
        request_id: str | None = None,
    ) -> list[Hit]:
        """The ``k`` best memories in ``scope`` for ``query``, best first.

        Hybrid: the ``recall_candidates`` nearest by cosine distance (HNSW index, with
        ``hnsw.iterative_scan`` so filters still yield enough rows) and the same number by
        full-text rank (``ts_rank_cd`` over any of the query's terms) are fused by weighted
        reciprocal rank plus recency and pin terms (:mod:`mnemovault.recall.ranking`).
        Archived, superseded and pending-review memories are excluded unless
        ``filters.include_archived`` (archived only; the others never).

        The query, scope and subject are pseudonymised like stored text (lookups only), so
        a query naming a known person finds the memories stored under their placeholder.
        Output shows placeholders; ``reveal=True`` (permission ``pii:reveal``) shows the
        original values and is audited.

        Raises:
            ValidationError: blank query, k outside 1..100, bad filter.
            Forbidden: missing ``memory:read`` or a scope the key is not limited to.
        """
        who = self._who(principal)
        who.require("memory:read")
        who.check_scope(scope)
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("query: must not be blank", field="query")
        if "\x00" in query or len(query) > 10_000:
            raise ValidationError("query: at most 10000 characters, no NUL", field="query")
        if not isinstance(k, int) or not 1 <= k <= 100:
            raise ValidationError("k: must be an integer in 1..100", field="k")
        if isinstance(filters, dict):
            try:
                filters = RecallFilters.model_validate(filters)
            except PydanticValidationError as exc:
                raise validation_error_from_pydantic(exc, prefix="filters") from None
        f = filters or RecallFilters()
        if who.subject is not None:
            f = f.model_copy(update={"subject": who.subject})
        if reveal:
            who.require("pii:reveal")
        n = max(self.settings.recall_candidates, k)
        with self.db.transaction(who.tenant) as conn:
            # the query, scope and subject as they would have been stored (placeholders)
            query = self._translate(conn, who.tenant, query) or query
            scope = self._translate(conn, who.tenant, scope) or scope
            f = f.model_copy(update={"subject": self._translate(conn, who.tenant, f.subject)})
            qvec = self.embedder.embed([query])[0]
            where, params = _filter_sql(who.tenant, scope, f)
            vrows = vector_candidates(conn, qvec, where, params, n,
                                      ef_search=self.settings.hnsw_ef_search)
            trows = text_candidates(conn, query, where, params, n)
            meta = {r["id"]: (r["created_at"], r["pinned"]) for r in (*vrows, *trows)}
            fused = fuse([(r["id"], 1.0 - float(r["distance"])) for r in vrows],
                         [r["id"] for r in trows], meta, datetime.now(UTC), self.weights)[:k]
            ids = [x.id for x in fused]
            if not ids:
                return []
            if touch:
                rows = conn.execute(
                    f"UPDATE memories SET access_count = access_count + 1, "
                    f"last_accessed_at = now() WHERE id = ANY(%s) RETURNING {_MEMORY_COLUMNS}",
                    (ids,),
                ).fetchall()
            else:
                rows = conn.execute(
                    f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE id = ANY(%s)", (ids,)
                ).fetchall()
            by_id = {m.id: m for m in self._render(
                conn, who, [Memory.from_row(r) for r in rows], reveal=reveal,
                request_id=request_id)}
        return [Hit(memory=by_id[x.id], score=x.score, similarity=x.similarity,
                    vector_rank=x.vector_rank, text_rank=x.text_rank)
                for x in fused if x.id in by_id]

    def _render(self, conn: psycopg.Connection[Any], who: Principal,
                memories: builtins.list[Memory], *, reveal: bool,
                request_id: str | None = None) -> builtins.list[Memory]:
        """Output rendering (SPEC section 3): shredded placeholders become ``[erased]`` for
        every caller; with ``reveal`` (needs ``pii:reveal``) the others become their
        original values, and a ``REVEAL`` audit row names the placeholders and memories."""
        fields = ("content", "subject", "key", "scope")
        found = {m.group(0) for mem in memories for fld in fields
                 for m in PLACEHOLDER_RE.finditer(getattr(mem, fld) or "")}
        if not found:
            return memories
        if reveal:
            who.require("pii:reveal")
            values = self.pii.reveal_values(conn, who.tenant, found)
            erased: set[str] = set()
            audit.append(conn, tenant=who.tenant, operation="REVEAL", actor=who.actor,
                         agent=who.agent, memory_ids=[str(m.id) for m in memories],
                         request_id=request_id,
                         details={"placeholders": sorted(values), "count": len(values)})
        else:
            values, erased = {}, self.pii.erased_placeholders(conn, found)
            if not erased:
                return memories
        return [m.model_copy(update={fld: render(getattr(m, fld), values, erased)
                                     for fld in fields if getattr(m, fld)})
                for m in memories]

    def get(self, memory_id: uuid.UUID | str, *, principal: Principal | None = None,
            reveal: bool = False, request_id: str | None = None) -> Memory:
        """One memory by id, whatever its status.

        Raises:
            NotFound: no such id in this tenant (another tenant's id is not found either).
        """
        who = self._who(principal)
        who.require("memory:read")
        mid = _parse_id(memory_id, "id")
        if reveal:
            who.require("pii:reveal")
        with self.db.transaction(who.tenant) as conn:
            row = conn.execute(
                f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE id = %s", (mid,)
            ).fetchone()
            if row is None or (who.scope is not None and row["scope"] != who.scope):
                raise NotFound("id: no memory with this id", field="id")
            return self._render(conn, who, [Memory.from_row(row)], reveal=reveal,
                                request_id=request_id)[0]

    def list(
        self,
        *,
        scope: str | None = None,
        subject: str | None = None,
        limit: int = 50,
        cursor: uuid.UUID | str | None = None,
        include_superseded: bool = False,
        principal: Principal | None = None,
    ) -> Page:
        """Memories oldest id first, keyset-paginated: pass ``next_cursor`` back as
        ``cursor`` (the last id seen). ``limit`` is 1..100.

        Raises:
            ValidationError: limit out of range, malformed cursor.
        """
        who = self._who(principal)
        who.require("memory:read")
        if not isinstance(limit, int) or not 1 <= limit <= 100:
            raise ValidationError("limit: must be an integer in 1..100", field="limit")
        scope = scope if scope is not None else who.scope
        who.check_scope(scope)
        clauses: list[str] = ["true"]
        params: dict[str, Any] = {"limit": limit + 1}
        if scope is not None:
            clauses.append("scope = %(scope)s")
            params["scope"] = scope
        subject = who.subject or subject
        if subject is not None:
            clauses.append("subject_id = %(subject)s")
            params["subject"] = subject
        if not include_superseded:
            clauses.append("status <> 'superseded'")
        if cursor is not None:
            clauses.append("id > %(cursor)s")
            params["cursor"] = _parse_id(cursor, "cursor")
        with self.db.transaction(who.tenant) as conn:
            for name in ("scope", "subject"):
                if name in params:
                    params[name] = self._translate(conn, who.tenant, params[name])
            rows = conn.execute(
                f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE {' AND '.join(clauses)} "
                f"ORDER BY id LIMIT %(limit)s",
                params,
            ).fetchall()
            items = self._render(conn, who, [Memory.from_row(r) for r in rows[:limit]],
                                 reveal=False)
        nxt = items[-1].id if len(rows) > limit else None
        return Page(items=items, next_cursor=nxt)

    # -- forget ---------------------------------------------------------------------------
    def forget_preview(self, ids: Sequence[uuid.UUID | str], *,
                       principal: Principal | None = None) -> builtins.list[dict[str, Any]]:
        """What :meth:`delete` of ``ids`` would remove (versions included); deletes nothing."""
        who = self._who(principal)
        who.require("memory:read")
        parsed = [_parse_id(i, f"ids.{n}") for n, i in enumerate(ids)]
        with self.db.transaction(who.tenant) as conn:
            return forget_mod.preview(conn, parsed)

    def delete(
        self,
        ids: Sequence[uuid.UUID | str] | uuid.UUID | str,
        *,
        principal: Principal | None = None,
        trigger: str = "api",
        request_id: str | None = None,
    ) -> ForgetResult:
        """Forget memories by id: the governed forget path of SPEC section 4, one transaction
        with its ``FORGET`` audit row. A memory with a key takes all its versions along.

        Raises:
            Forbidden: missing ``memory:forget`` (service keys lack it).
            ValidationError: an id is not a UUID, or no ids were given.
        """
        who = self._who(principal)
        who.require("memory:forget")
        if isinstance(ids, uuid.UUID | str):
            ids = [ids]
        if not ids:
            raise ValidationError("ids: at least one id is required", field="ids")
        parsed = [_parse_id(i, f"ids.{n}") for n, i in enumerate(ids)]
        with self.db.transaction(who.tenant) as conn:
            deleted, missing, seq = forget_mod.forget(
                conn, tenant=who.tenant, ids=parsed, actor=who.actor, agent=who.agent,
                trigger=trigger, request_id=request_id, scope=who.scope,
            )
        return ForgetResult(deleted=deleted, not_found=missing, audit_seq=seq)

    # -- PII vault --------------------------------------------------------------------------
    def vault_entries(self, *, limit: int = 50, cursor: str | None = None,
                      principal: Principal | None = None) -> builtins.list[dict[str, Any]]:
        """Vault entries, metadata only (placeholder, kind, created, shredded), ordered by
        placeholder; ``cursor`` = the last placeholder seen. Needs ``memory:read``."""
        who = self._who(principal)
        who.require("memory:read")
        if not isinstance(limit, int) or not 1 <= limit <= 100:
            raise ValidationError("limit: must be an integer in 1..100", field="limit")
        with self.db.transaction(who.tenant) as conn:
            return conn.execute(
                "SELECT placeholder, kind, created_at, shredded_at FROM pii_values "
                "WHERE placeholder > %s ORDER BY placeholder LIMIT %s",
                (cursor or "", limit)).fetchall()

    def vault_entry(self, placeholder: str, *, reveal: bool = False,
                    principal: Principal | None = None,
                    request_id: str | None = None) -> dict[str, Any]:
        """One entry; with ``reveal`` (``pii:reveal``) its value too, audited.

        Raises:
            NotFound: no such placeholder in this tenant.
        """
        who = self._who(principal)
        who.require("memory:read")
        if reveal:
            who.require("pii:reveal")
        with self.db.transaction(who.tenant) as conn:
            row = conn.execute(
                "SELECT placeholder, kind, created_at, shredded_at FROM pii_values "
                "WHERE placeholder = %s", (placeholder,)).fetchone()
            if row is None:
                raise NotFound("placeholder: no such vault entry", field="placeholder")
            if reveal:
                row["value"] = self.pii.reveal_values(conn, who.tenant, [placeholder])[
                    placeholder]
                audit.append(conn, tenant=who.tenant, operation="REVEAL", actor=who.actor,
                             agent=who.agent, request_id=request_id, trigger="vault",
                             details={"placeholders": [placeholder], "count": 1})
            return dict(row)

    def shred(self, placeholders: Sequence[str], *, principal: Principal | None = None,
              request_id: str | None = None, trigger: str = "api") -> builtins.list[str]:
        """Crypto-shred vault values: their DEKs and ciphertexts are destroyed in one
        transaction with a ``SHRED`` audit row; every record using them renders
        ``[erased]`` from now on, for every caller. Needs ``subject:erase``.

        Returns the placeholders shredded (already-shredded or unknown ones are skipped).
        """
        who = self._who(principal)
        who.require("subject:erase")
        wanted = [p for p in placeholders if PLACEHOLDER_RE.fullmatch(p)]
        if len(wanted) != len(placeholders) or not wanted:
            raise ValidationError("placeholders: each must look like {kind:p_<10 hex>}",
                                  field="placeholders")
        with self.db.transaction(who.tenant) as conn:
            done = self.pii.shred(conn, wanted)
            if done:
                audit.append(conn, tenant=who.tenant, operation="SHRED", actor=who.actor,
                             agent=who.agent, request_id=request_id, trigger=trigger,
                             details={"placeholders": done, "count": len(done)})
        return done

    def vault_export(self, *, principal: Principal | None = None,
                     request_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """Every live entry with its value (owner only: ``pii:reveal`` and
        ``admin:export``), audited as ``VAULT_EXPORT``."""
        who = self._who(principal)
        who.require("admin:export")
        who.require("pii:reveal")
        with self.db.transaction(who.tenant) as conn:
            rows = conn.execute(
                "SELECT placeholder, kind, created_at FROM pii_values "
                "WHERE shredded_at IS NULL ORDER BY placeholder").fetchall()
            values = self.pii.reveal_values(conn, who.tenant, [r["placeholder"] for r in rows])
            audit.append(conn, tenant=who.tenant, operation="VAULT_EXPORT", actor=who.actor,
                         agent=who.agent, request_id=request_id,
                         details={"count": len(rows)})
        return [{**r, "value": values[r["placeholder"]]} for r in rows]

    def rotate_kek(self, *, retire: bool = False) -> dict[str, Any]:
        """Operator path (the database owner's connection, every tenant): make a new KEK
        version current and rewrap every DEK and tenant secret under it; ciphertexts are
        not touched. With ``retire`` the old versions are then destroyed (removed from the
        key file), so a wrapped DEK left in old table pages, WAL or a backup can no longer
        be opened. Each tenant gets a ``KEK_ROTATE`` audit row."""
        from mnemovault.pii.crypto import Sealed, dek_aad, open_sealed, seal, secret_aad

        old_versions = sorted(self.keyring.keys)
        new = self.keyring.add_version()
        counts: dict[str, int] = {}
        new_key = self.keyring.current_key
        with psycopg.connect(self.db.url, row_factory=dict_row) as conn, conn.transaction():
            for r in conn.execute("SELECT tenant_id, kek_version, nonce, wrapped_secret "
                                  "FROM pii_tenant_keys WHERE kek_version <> %s",
                                  (new,)).fetchall():
                t = r["tenant_id"]
                secret = open_sealed(self.keyring.kek(r["kek_version"]),
                                     Sealed(bytes(r["nonce"]), bytes(r["wrapped_secret"])),
                                     secret_aad(t, r["kek_version"]))
                sealed = seal(new_key, secret, secret_aad(t, new))
                conn.execute("UPDATE pii_tenant_keys SET kek_version = %s, nonce = %s, "
                             "wrapped_secret = %s WHERE tenant_id = %s",
                             (new, sealed.nonce, sealed.ciphertext, t))
            for r in conn.execute("SELECT tenant_id, placeholder, kek_version, nonce, "
                                  "wrapped_dek FROM pii_deks WHERE kek_version <> %s",
                                  (new,)).fetchall():
                t, ph = r["tenant_id"], r["placeholder"]
                dek = open_sealed(self.keyring.kek(r["kek_version"]),
                                  Sealed(bytes(r["nonce"]), bytes(r["wrapped_dek"])),
                                  dek_aad(t, ph, r["kek_version"]))
                sealed = seal(new_key, dek, dek_aad(t, ph, new))
                conn.execute("UPDATE pii_deks SET kek_version = %s, nonce = %s, "
                             "wrapped_dek = %s WHERE tenant_id = %s AND placeholder = %s",
                             (new, sealed.nonce, sealed.ciphertext, t, ph))
                counts[t] = counts.get(t, 0) + 1
            for t, n in sorted(counts.items()):
                conn.execute("SELECT set_config('mnemovault.tenant_id', %s, true)", (t,))
                audit.append(conn, tenant=t, operation="KEK_ROTATE", actor="operator",
                             details={"kek_version": new, "rewrapped": n, "retire": retire})
        if retire:
            self.keyring.retire([v for v in old_versions if v != new])
        return {"kek_version": new, "rewrapped": sum(counts.values()),
                "tenants": len(counts), "retired": old_versions if retire else []}

    # -- health ---------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        with self.db.unscoped() as conn:
            conn.execute("SELECT 1")
        return {"status": "ok", "embedder": self.embedder.model,
                "dimension": self.embedder.dimension}


def _setup_audit(db: Database, settings: Settings) -> AuditService:
    """Checkpoint signing (key file outside the database) and the JSON Lines mirror."""
    from mnemovault.audit import log as audit_log
    from mnemovault.audit.mirror import JsonlMirror

    data_dir = Path(settings.data_dir).expanduser()
    audit_log.configure(audit_log.AuditConfig(
        key_path=settings.audit_signing_key or data_dir / "audit_signing.key",
        origin=settings.audit_origin, checkpoint_rows=settings.audit_checkpoint_rows,
        checkpoint_seconds=settings.audit_checkpoint_seconds))
    if settings.audit_jsonl and not db.after_commit:
        db.after_commit.append(
            JsonlMirror(db, settings.audit_jsonl_dir or data_dir / "audit").sync)
    return AuditService(db)


def load_keyring(settings: Settings) -> KeyRing:
    """The KEKs: ``MNEMOVAULT_KEK``, else the key file (default ``<data_dir>/kek.json``)."""
    path = settings.kek_file or (Path(settings.data_dir).expanduser() / "kek.json")
    return KeyRing.load(env_value=settings.kek, key_file=path)


def default_detectors(settings: Settings) -> builtins.list[Detector]:
    """The built-in detectors (no model needed): IBAN, card, email, IP, phone. Phone
    numbers without a country code are tried in ``phone_default_region``, then in each of
    ``phone_fallback_regions``."""
    from mnemovault.pii import detect

    return detect.default_detectors(settings.phone_default_region,
                                    fallback_regions=settings.phone_fallback_regions)


def _parse_id(value: uuid.UUID | str, field: str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except (ValueError, AttributeError, TypeError):
        raise ValidationError(f"{field}: must be a UUID", field=field) from None


def _filter_sql(tenant: str, scope: str, f: RecallFilters) -> tuple[str, dict[str, Any]]:
    # The tenant is named here as well as by row-level security: the planner then sees its
    # real row count (a tenant-sized scope goes to the HNSW index, a small one to the
    # B-tree and an exact sort), and isolation is enforced twice (SPEC section 11).
    clauses = ["tenant_id = %(tenant)s", "scope = %(scope)s", "status = 'active'"]
    params: dict[str, Any] = {"tenant": tenant, "scope": scope}
    if not f.include_archived:
        clauses.append("NOT archived")
    if f.subject is not None:
        clauses.append("subject_id = %(subject)s")
        params["subject"] = f.subject
    if f.types:
        clauses.append("type = ANY(%(types)s)")
        params["types"] = list(f.types)
    if f.tags:
        clauses.append("provenance -> 'tags' ?| %(tags)s")
        params["tags"] = list(f.tags)
    if f.since is not None:
        clauses.append("created_at >= %(since)s")
        params["since"] = f.since
    if f.until is not None:
        clauses.append("created_at < %(until)s")
        params["until"] = f.until
    return " AND ".join(clauses), params

