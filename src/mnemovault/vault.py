"""``MemoryVault``: the one object every interface (library, HTTP, CLI, later MCP) calls.

Write path (SPEC section 2), in this order; the stored part is one transaction:

1. (chat only) in-band command check  -> :func:`mnemovault.governance.commands.handle`
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
from dataclasses import dataclass, field
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
from mnemovault.chat.models import ChatRequest, ChatResult, ChatStream
from mnemovault.config import Settings
from mnemovault.embed import Embedder, make_embedder
from mnemovault.errors import (
    ConfigError,
    Conflict,
    NotFound,
    Refused,
    Unauthenticated,
    ValidationError,
)
from mnemovault.governance import forget as forget_mod
from mnemovault.governance import graph, lineage, retention
from mnemovault.ids import uuid7
from mnemovault.llm import ChatProvider, make_provider
from mnemovault.models import (
    ForgetResult,
    Hit,
    Memory,
    MemoryInput,
    Page,
    PinResult,
    Provenance,
    RecallFilters,
    Receipt,
    RetentionResult,
)
from mnemovault.pii.crypto import KeyRing
from mnemovault.pii.detect import Detector
from mnemovault.pii.pseudonymise import Pseudonymiser
from mnemovault.pii.vault import ERASED, PLACEHOLDER_RE, PiiVault, render
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
    used: list[str] = field(default_factory=list)  # every placeholder the detectors produced


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
            method=settings.recall_fusion,
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
        keyring = load_keyring(settings)
        _check_keyring(db, keyring)
        db.open()
        if not settings.pii_pseudonymize:
            log.warning("PII_PSEUDONYMIZE=false: personal values are stored as written")
        return cls(db, embedder, settings, keyring)

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
            used: list[str] = []

            def rw(value: str | None, _new: list[str] = new,
                   _used: list[str] = used) -> str | None:
                if value is None:
                    return None
                r = ps.rewrite(value)
                _new.extend(p for p in r.created if p not in _new)
                _used.extend(r.placeholders)
                return r.text

            prov = item.provenance.model_dump(exclude_none=True)
            prov = {k: (rw(v) if isinstance(v, str) else v) for k, v in prov.items()}
            prov["tags"] = [rw(t) for t in item.provenance.tags]
            rewritten = item.model_copy(update={
                "scope": rw(item.scope), "subject": rw(item.subject), "key": rw(item.key),
                "provenance": Provenance.model_validate(prov), "entities": []})
            content = rw(item.content) or ""
            out.append(_Prepared(item=rewritten, content=content, placeholders=new,
                                 used=used))
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
        derived_from: Sequence[uuid.UUID | str] | None = None,
        principal: Principal | None = None,
        request_id: str | None = None,
    ) -> Receipt:
        """Remember one memory. See :meth:`remember_many`. ``entities`` names personal values
        (``[{"kind": "person", "value": "Ada"}]``) to pseudonymise here and from now on;
        ``derived_from`` the memories (same scope) it was derived from: forgetting any of
        them forgets this one too."""
        item = {"content": content, "scope": scope, "subject": subject, "type": type,
                "key": key, "provenance": provenance or {}, "created_at": created_at,
                "entities": entities or [], "derived_from": list(derived_from or [])}
        try:
            parsed = MemoryInput.model_validate(item)
        except PydanticValidationError as exc:
            raise validation_error_from_pydantic(exc) from None
        try:
            return self.remember_many([parsed], principal=principal,
                                      request_id=request_id)[0]
        except ValidationError as exc:
            if exc.field and exc.field.startswith("items.0."):
                name = exc.field.removeprefix("items.0.")
                raise ValidationError(f"{name}: {exc.message.split(': ', 1)[-1]}",
                                      field=name) from None
            raise

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
        except psycopg.errors.ForeignKeyViolation:
            raise Conflict("derived_from: a memory this write refers to was forgotten "
                           "concurrently; retrying is safe", field="derived_from") from None

    def _store(self, conn: psycopg.Connection[Any], prepared: builtins.list[_Prepared],
               vectors: Any, who: Principal, request_id: str | None,
               trigger: str) -> builtins.list[Receipt]:
        """Step 6 of the write path: the memories, their lineage and graph entries, and the
        audit row, in the caller's transaction."""
        lineage.check_sources(conn, [(p.item.scope, p.item.derived_from) for p in prepared])
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
        self._index(conn, who.tenant, prepared, receipts)
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

    def _index(self, conn: psycopg.Connection[Any], tenant: str,
               prepared: builtins.list[_Prepared], receipts: builtins.list[Receipt]) -> None:
        """Lineage rows and entity-graph entries of freshly stored memories (same
        transaction): every placeholder of every stored free-text field is a node."""
        pairs = [(r.id, s) for p, r in zip(prepared, receipts, strict=True)
                 for s in dict.fromkeys(p.item.derived_from)]
        lineage.record(conn, tenant, pairs)
        plain = not self.settings.pii_pseudonymize
        graph.index(conn, tenant, [
            graph.mentions(r.id, _stored_texts(p),
                           [(e.kind, e.value) for e in p.item.entities] if plain else [])
            for p, r in zip(prepared, receipts, strict=True)])
        # The nodes are locked now, so a forget that could shred one of these values has
        # either committed (seen here) or will see this write's support and keep it.
        if self.pii.erased_placeholders(conn, {u for p in prepared for u in p.used}):
            raise Conflict("content: a personal value in it was erased concurrently; "
                           "retrying is safe", field="content")

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
        BM25 over the stored full-text vectors are fused (a convex combination of
        normalised scores by default) plus recency and pin terms
        (:mod:`mnemovault.recall.ranking`).
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
                         [(r["id"], float(r["score"])) for r in trows], meta,
                         datetime.now(UTC), self.weights)[:k]
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

    # -- forget, pin, retention (SPEC sections 4 and 10) -----------------------------------
    def _query_placeholders(self, conn: psycopg.Connection[Any], tenant: str,
                            query: str) -> tuple[builtins.list[str], builtins.list[str]]:
        """The live vault placeholders a query names: (values whose original appears in it,
        placeholders typed in it). Lookups only: nothing is written."""
        if not self.settings.pii_pseudonymize:
            return [], []
        detected = self._pseudonymiser(conn, tenant, read_only=True).rewrite(
            query, create=False).placeholders
        typed = [m.group(0) for m in PLACEHOLDER_RE.finditer(query)]
        wanted = sorted({*detected, *typed})
        if not wanted:
            return [], []
        live = {r["placeholder"] for r in conn.execute(
            "SELECT placeholder FROM pii_values WHERE placeholder = ANY(%s) "
            "AND shredded_at IS NULL", (wanted,)).fetchall()}
        return (sorted(live & set(detected)), sorted(live & set(typed)))

    def _query_matches(self, query: str, scope: str, who: Principal,
                       k: int | None = None) -> builtins.list[uuid.UUID]:
        """The memories of ``scope`` a forget query matches, best first: among the
        ``forget_candidates`` recall candidates (archived included, statistics untouched),
        those whose cosine similarity is at least ``forget_min_similarity`` and within
        ``forget_similarity_margin`` of the best one; then every memory whose stored fields
        use a vault value the query names (by its original or its placeholder)."""
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("query: must not be blank", field="query")
        hits = self.recall(query, scope=scope, k=k or self.settings.forget_candidates,
                           filters={"include_archived": True}, principal=who, touch=False)
        sims = sorted(((h.similarity, h.memory.id) for h in hits if h.similarity is not None),
                      key=lambda x: -x[0])
        floor = self.settings.forget_min_similarity
        if sims:
            floor = max(floor, sims[0][0] - self.settings.forget_similarity_margin)
        out = [mid for sim, mid in sims if sim >= floor]
        with self.db.transaction(who.tenant) as conn:
            detected, typed = self._query_placeholders(conn, who.tenant, query)
            if detected or typed:
                rows = conn.execute(
                    "SELECT DISTINCT s.memory_id FROM graph_node_support s JOIN memories m "
                    "ON m.tenant_id = s.tenant_id AND m.id = s.memory_id "
                    "WHERE s.node_id = ANY(%s) AND m.scope = %s ORDER BY s.memory_id",
                    ([*detected, *typed], self._translate(conn, who.tenant, scope) or scope),
                ).fetchall()
                out += [r["memory_id"] for r in rows]
        return builtins.list(dict.fromkeys(out))

    def forget_preview(
        self,
        ids: Sequence[uuid.UUID | str] | None = None,
        *,
        query: str | None = None,
        scope: str | None = None,
        principal: Principal | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """What :meth:`forget` of ``ids`` (or of what ``query`` matches in ``scope``) would
        delete, deleting nothing: the named memories, their versions and what was derived
        from them. Each row: ``id``, ``type``, ``archived``, ``status``, ``created_at``,
        ``reason`` (``named``, ``version`` or ``derived``) and ``excerpt`` (the first 180
        characters as stored, shredded values shown ``[erased]``). Named rows come first,
        best match first for a query. Ids elsewhere (another tenant, or another scope when
        one is given) are left out, never revealed.

        Raises:
            ValidationError: neither ids nor a query, a malformed id, a query without scope.
        """
        who = self._who(principal)
        who.require("memory:read")
        scope = scope if scope is not None else who.scope
        who.check_scope(scope)
        if query is not None:
            if scope is None:
                raise ValidationError("scope: required with a query", field="scope")
            parsed = self._query_matches(query, scope, who)
        elif ids:
            parsed = [_parse_id(i, f"ids.{n}") for n, i in enumerate(ids)]
        else:
            raise ValidationError("ids: give memory ids or a query", field="ids")
        if not parsed:
            return []
        with self.db.transaction(who.tenant) as conn:
            sscope = self._translate(conn, who.tenant, scope) if scope is not None else None
            rows, _ = forget_mod.preview(conn, parsed, scope=sscope)
            erased = self.pii.erased_placeholders(
                conn, {m.group(0) for r in rows for m in PLACEHOLDER_RE.finditer(r["content"])})
        rank = {mid: n for n, mid in enumerate(parsed)}
        order = {"named": 0, "version": 1, "derived": 2}
        rows.sort(key=lambda r: (order[r["reason"]], rank.get(r["id"], 0), r["id"]))
        return [{"id": r["id"], "type": r["type"], "archived": r["archived"],
                 "status": r["status"], "created_at": r["created_at"], "reason": r["reason"],
                 "excerpt": forget_mod.excerpt(render(r["content"], {}, erased))}
                for r in rows]

    def forget(
        self,
        ids: Sequence[uuid.UUID | str] | uuid.UUID | str | None = None,
        *,
        query: str | None = None,
        scope: str | None = None,
        principal: Principal | None = None,
        trigger: str = "api",
        request_id: str | None = None,
    ) -> ForgetResult:
        """Forget memories: the governed forget lifecycle of SPEC section 4, in one
        transaction (:mod:`mnemovault.governance.forget`): the memories and all their
        versions, the memories derived from them (transitively), graph nodes and edges
        nothing else supports, vault values no remaining record uses, and one ``FORGET``
        audit row (count, first ten ids, keyed hash of the query and the placeholders it
        names, request id; never the query's text).

        ``ids``: exactly these memories. ``query`` alone: what it matches in ``scope``
        (:meth:`forget_preview` shows it), only with ``ALLOW_SEMANTIC_FORGET=true``.
        ``query`` with ids: the ids are deleted, and the query is hashed into the audit row.
        Values whose original appears in the query are shredded even if other records use
        them when the caller holds ``subject:erase`` (the permission shredding needs);
        otherwise they follow the unused-value rule. ``scope`` limits the named ids to one
        scope (ids elsewhere count as not found).

        Raises:
            Forbidden: missing ``memory:forget`` (service keys lack it).
            ValidationError: no ids and no query, a malformed id, a blank query.
            Refused: a query alone while semantic forget is off; ``details["candidates"]``
                lists the top candidate ids to confirm.
            Conflict: a concurrent write derived from what was being forgotten; nothing
                was deleted and retrying is safe.
        """
        who = self._who(principal)
        who.require("memory:forget")
        scope = scope if scope is not None else who.scope
        who.check_scope(scope)
        if isinstance(ids, uuid.UUID | str):
            ids = [ids]
        parsed = [_parse_id(i, f"ids.{n}") for n, i in enumerate(ids or [])]
        if query is not None and (not isinstance(query, str) or not query.strip()):
            raise ValidationError("query: must not be blank", field="query")
        if not parsed:
            if query is None:
                raise ValidationError("ids: at least one id is required", field="ids")
            if scope is None:
                raise ValidationError("scope: required with a query", field="scope")
            candidates = self._query_matches(query, scope, who)
            if not self.settings.allow_semantic_forget:
                raise Refused(
                    "query: forget by query is off (ALLOW_SEMANTIC_FORGET=false); confirm "
                    "the candidate ids instead", field="query",
                    candidates=[str(c) for c in candidates[:self.settings.forget_candidates]])
            if not candidates:
                return ForgetResult(deleted=[], not_found=[], audit_seq=None)
            parsed = candidates
        try:
            with self.db.transaction(who.tenant) as conn:
                qhash: str | None = None
                detected: builtins.list[str] = []
                typed: builtins.list[str] = []
                if query is not None:
                    qhash = forget_mod.query_hash(self.pii.tenant_keys(conn, who.tenant), query)
                    detected, typed = self._query_placeholders(conn, who.tenant, query)
                sscope = self._translate(conn, who.tenant, scope) if scope is not None else None
                out = forget_mod.forget(
                    conn, tenant=who.tenant, ids=parsed, actor=who.actor, agent=who.agent,
                    trigger=trigger, request_id=request_id, scope=sscope,
                    pii=self.pii if self.settings.pii_pseudonymize else None,
                    query_hash=qhash, query_placeholders=[*detected, *typed],
                    shred_values=detected if "subject:erase" in who.permissions else [])
        except psycopg.errors.ForeignKeyViolation:
            raise Conflict("ids: a concurrent write refers to a memory being forgotten; "
                           "nothing was deleted and retrying is safe", field="ids") from None
        return ForgetResult(deleted=out.deleted, not_found=out.not_found,
                            audit_seq=out.audit_seq, derived=out.derived,
                            shredded=out.shredded,
                            graph_nodes_removed=out.graph_nodes_removed,
                            graph_edges_removed=out.graph_edges_removed)

    def delete(
        self,
        ids: Sequence[uuid.UUID | str] | uuid.UUID | str,
        *,
        principal: Principal | None = None,
        trigger: str = "api",
        request_id: str | None = None,
    ) -> ForgetResult:
        """Forget memories by id: :meth:`forget` with ids only (the same lifecycle).

        Raises:
            Forbidden: missing ``memory:forget`` (service keys lack it).
            ValidationError: an id is not a UUID, or no ids were given.
        """
        if isinstance(ids, uuid.UUID | str):
            ids = [ids]
        if not ids:
            raise ValidationError("ids: at least one id is required", field="ids")
        return self.forget(ids, principal=principal, trigger=trigger, request_id=request_id)

    def pin(self, ids: Sequence[uuid.UUID | str] | uuid.UUID | str, *,
            scope: str | None = None, principal: Principal | None = None,
            trigger: str = "api", request_id: str | None = None) -> PinResult:
        """Pin memories: exempt from retention (never archived or deleted by it), and back
        from the archive if they were there; a ``PIN`` audit row. Needs ``memory:forget``.

        Raises:
            ValidationError: no ids, or a malformed id.
        """
        return self._set_pinned(ids, True, scope, principal, trigger, request_id)

    def unpin(self, ids: Sequence[uuid.UUID | str] | uuid.UUID | str, *,
              scope: str | None = None, principal: Principal | None = None,
              trigger: str = "api", request_id: str | None = None) -> PinResult:
        """Unpin memories: back to normal decay; an ``UNPIN`` audit row. As :meth:`pin`."""
        return self._set_pinned(ids, False, scope, principal, trigger, request_id)

    def _set_pinned(self, ids: Sequence[uuid.UUID | str] | uuid.UUID | str, pinned: bool,
                    scope: str | None, principal: Principal | None, trigger: str,
                    request_id: str | None) -> PinResult:
        who = self._who(principal)
        who.require("memory:forget")
        scope = scope if scope is not None else who.scope
        who.check_scope(scope)
        if isinstance(ids, uuid.UUID | str):
            ids = [ids]
        parsed = builtins.list(dict.fromkeys(_parse_id(i, f"ids.{n}")
                                             for n, i in enumerate(ids)))
        if not parsed:
            raise ValidationError("ids: at least one id is required", field="ids")
        with self.db.transaction(who.tenant) as conn:
            params: dict[str, Any] = {"ids": parsed, "pinned": pinned}
            clause = ""
            if scope is not None:
                clause = " AND scope = %(scope)s"
                params["scope"] = self._translate(conn, who.tenant, scope)
            rows = conn.execute(
                "UPDATE memories SET pinned = %(pinned)s, updated_at = now(), "
                "archived = CASE WHEN %(pinned)s THEN false ELSE archived END "
                f"WHERE id = ANY(%(ids)s){clause} RETURNING id", params).fetchall()
            changed = sorted(r["id"] for r in rows)
            seq = None
            if changed:
                seq = audit.append(conn, tenant=who.tenant, operation="PIN" if pinned
                                   else "UNPIN", actor=who.actor, agent=who.agent,
                                   memory_ids=[str(i) for i in changed[:10]], trigger=trigger,
                                   request_id=request_id, details={"count": len(changed)})
        found = set(changed)
        return PinResult(changed=changed, not_found=[i for i in parsed if i not in found],
                         audit_seq=seq)

    def run_retention(self, *, dry_run: bool = False, now: datetime | None = None,
                      principal: Principal | None = None) -> RetentionResult:
        """The retention job for the principal's tenant (:mod:`mnemovault.governance.
        retention`), in one transaction: archive unpinned memories scoring below
        ``retention_archive_below``, forget (the full lifecycle, trigger ``retention``)
        unpinned ones idle ``retention_delete_unused_days`` when that is set, and append a
        ``RETENTION`` audit row. ``dry_run`` lists what would be archived, changing nothing.
        Needs ``memory:forget``."""
        who = self._who(principal)
        who.require("memory:forget")
        policy = retention.Policy.from_settings(self.settings)
        now = now or datetime.now(UTC)
        deleted: builtins.list[uuid.UUID] = []
        seq = None
        with self.db.transaction(who.tenant) as conn:
            archived = retention.archive(conn, policy, now, dry_run=dry_run)
            if not dry_run:
                stale = retention.unused(conn, policy, now)
                if stale:
                    deleted = forget_mod.forget(
                        conn, tenant=who.tenant, ids=stale, actor=who.actor, agent=who.agent,
                        trigger="retention",
                        pii=self.pii if self.settings.pii_pseudonymize else None).deleted
                if archived or deleted:
                    seq = audit.append(
                        conn, tenant=who.tenant, operation="RETENTION", actor=who.actor,
                        agent=who.agent, memory_ids=[str(i) for i in archived[:10]],
                        trigger="retention",
                        details={"archived": len(archived), "deleted": len(deleted),
                                 "archive_below": policy.archive_below,
                                 "half_life_days": policy.half_life_days})
        return RetentionResult(tenant=who.tenant, archived=archived, deleted=deleted,
                               dry_run=dry_run, audit_seq=seq)

    def run_retention_all(self, *, dry_run: bool = False,
                          now: datetime | None = None) -> builtins.list[RetentionResult]:
        """The retention job for every live tenant (operator path: tenants are listed on
        the owner's connection, each then runs under row-level security as itself)."""
        with psycopg.connect(self.db.url) as conn:
            tenants = [r[0] for r in conn.execute(
                "SELECT tenant_id FROM tenants WHERE deleted_at IS NULL ORDER BY tenant_id")]
        out = []
        for t in tenants:
            try:
                out.append(self.run_retention(dry_run=dry_run, now=now,
                                              principal=self.principal(t)))
            except Exception:  # one tenant's failure must not stop the others
                log.exception("retention failed for a tenant")
        return out

    # -- chat (SPEC sections 4 and 5) -----------------------------------------------------
    @property
    def llm(self) -> ChatProvider:
        """The chat provider (``MNEMOVAULT_CHAT_PROVIDER``; the offline responder by
        default). Assignable, e.g. to a test double."""
        provider: ChatProvider | None = getattr(self, "_llm", None)
        if provider is None:
            provider = self._llm = make_provider(self.settings)
        return provider

    @llm.setter
    def llm(self, provider: ChatProvider) -> None:
        self._llm = provider

    def chat_stream(self, message: str, *, scope: str, subject: str | None = None,
                    history: Sequence[dict[str, str]] | None = None, k: int | None = None,
                    reveal: bool = False, store: bool = True,
                    principal: Principal | None = None,
                    request_id: str | None = None) -> ChatStream:
        """One chat turn, streamed (:mod:`mnemovault.chat.service`): in-band command check,
        recall, fenced context pack, the model (placeholders only), de-anonymisation for a
        caller with ``pii:reveal`` who asks (``reveal``), and the exchange stored as an
        episode derived from the records it was shown, unless ``store`` is false or the
        message is ``DO_NOT_STORE:``. Everything up to the model runs now, so bad input and
        missing permissions raise here; iterate the result for its events.

        Raises:
            ValidationError: bad message, history, scope or k (names the field).
            Forbidden: a missing permission (named).
        """
        from mnemovault.chat.service import open_stream

        req = ChatRequest.parse(message=message, scope=scope, subject=subject,
                                history=history, k=k, reveal=reveal, store=store)
        return open_stream(self, req, self._who(principal), request_id)

    def chat(self, message: str, *, scope: str, subject: str | None = None,
             history: Sequence[dict[str, str]] | None = None, k: int | None = None,
             reveal: bool = False, store: bool = True, principal: Principal | None = None,
             request_id: str | None = None) -> ChatResult:
        """One chat turn, whole: :meth:`chat_stream` collected into a :class:`ChatResult`
        (the same events, so both behave the same)."""
        return self.chat_stream(message, scope=scope, subject=subject, history=history, k=k,
                                reveal=reveal, store=store, principal=principal,
                                request_id=request_id).collect()

    def redact(self, texts: Sequence[str], *,
               principal: Principal | None = None) -> builtins.list[str]:
        """``texts`` as a model may see them: personal values the detectors or the vault
        know replaced by placeholders (an unknown value by the placeholder it would get).
        Lookups only: nothing is written."""
        who = self._who(principal)
        if not self.settings.pii_pseudonymize or not texts:
            return builtins.list(texts)
        with self.db.transaction(who.tenant) as conn:
            return [self._translate(conn, who.tenant, t) or t for t in texts]

    def placeholder_outputs(self, placeholders: Iterable[str], *, reveal: bool = False,
                            principal: Principal | None = None,
                            request_id: str | None = None) -> dict[str, str]:
        """How each placeholder is shown to this caller: ``[erased]`` when shredded (for
        everyone), its original value with ``reveal`` (``pii:reveal``; a ``REVEAL`` audit
        row names the placeholders), else absent (it stays as it is)."""
        who = self._who(principal)
        wanted = sorted(set(placeholders))
        if reveal:
            who.require("pii:reveal")
        if not wanted:
            return {}
        with self.db.transaction(who.tenant) as conn:
            if reveal:
                values = self.pii.reveal_values(conn, who.tenant, wanted)
                if values:
                    audit.append(conn, tenant=who.tenant, operation="REVEAL", actor=who.actor,
                                 agent=who.agent, request_id=request_id, trigger="chat",
                                 details={"placeholders": sorted(values),
                                          "count": len(values)})
                return values
            return {p: ERASED for p in self.pii.erased_placeholders(conn, wanted)}

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


def _check_keyring(db: Database, keyring: KeyRing) -> None:
    """Refuse a key ring that lacks a KEK version the database's wrapped keys use (a wrong
    or lost key file must not silently start a second, unreadable generation of keys)."""
    with psycopg.connect(db.url, autocommit=True) as conn:
        rows = conn.execute("SELECT kek_version FROM pii_deks UNION "
                            "SELECT kek_version FROM pii_tenant_keys").fetchall()
    missing = sorted({r[0] for r in rows} - set(keyring.keys))
    if missing:
        where = keyring.path or "MNEMOVAULT_KEK"
        if keyring.created and keyring.path is not None:
            keyring.path.unlink(missing_ok=True)  # the key file this start just made
        raise ConfigError(
            f"kek: the database holds data keys wrapped under KEK version(s) {missing}, "
            f"which {where} does not have; restore the original key file (or set "
            "MNEMOVAULT_KEK_FILE to it)", field="kek")


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


def _stored_texts(p: _Prepared) -> builtins.list[str | None]:
    """Every free-text field of a memory as stored (where placeholders can be)."""
    prov = p.item.provenance.model_dump(exclude_none=True)
    return [p.content, p.item.scope, p.item.subject, p.item.key, *p.item.provenance.tags,
            *(v for k, v in prov.items() if k != "tags" and isinstance(v, str))]


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

