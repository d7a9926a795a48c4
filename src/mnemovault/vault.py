"""``MemoryVault``: the one object every interface (library, HTTP, CLI, later MCP) calls.

A facade: each method settles who is calling (the given principal, else the local
operator) and delegates to the capability module that owns the behaviour. A newcomer
finds a feature's rules there, not here:

==========================  ===============================================================
remember, remember_many     :mod:`mnemovault.memories.write` (the write path's steps)
get, list                   :mod:`mnemovault.memories.read`
recall                      :mod:`mnemovault.recall.service`
wake, timeline              :mod:`mnemovault.recall.wake`
forget(_preview), delete,   :mod:`mnemovault.governance.service` (lifecycle in
pin, unpin, run_retention*  :mod:`~mnemovault.governance.forget`)
chat, chat_stream           :mod:`mnemovault.chat.service` (commands in
                            :mod:`mnemovault.governance.commands`)
redact, placeholder_outputs,:mod:`mnemovault.pii.service`
vault_*, shred
rotate_kek                  :mod:`mnemovault.pii.rotation`
ensure_tenant, *_key       :mod:`mnemovault.keys` (create, authenticate, list, get, revoke)
audit                       :mod:`mnemovault.audit.service`
procedures (section)        :mod:`mnemovault.facade.procedures` -> :mod:`mnemovault.procedures`
review (section)            :mod:`mnemovault.facade.review` -> :mod:`mnemovault.governance.review`
tenants (section)           :mod:`mnemovault.facade.tenants` -> :mod:`mnemovault.tenants`
subjects (section)          :mod:`mnemovault.facade.subjects` -> :mod:`mnemovault.subjects`
lexical (section)           :mod:`mnemovault.facade.lexical` -> :mod:`mnemovault.recall.reindex`
pii_watch (section)         :mod:`mnemovault.facade.pii_watch` -> :mod:`mnemovault.pii.watch`
librarian (section)         :mod:`mnemovault.facade.librarian` -> :mod:`mnemovault.librarian`
==========================  ===============================================================

The capabilities share one :class:`~mnemovault.runtime.Runtime` and keep their SQL in
:mod:`mnemovault.store`.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from mnemovault import agents, keys
from mnemovault.audit.service import AuditService
from mnemovault.auth import Principal, Role
from mnemovault.chat import service as chat
from mnemovault.chat.models import ChatRequest, ChatResult, ChatStream
from mnemovault.config import Settings
from mnemovault.embed import Embedder
from mnemovault.facade import Closing, part, section
from mnemovault.facade.lexical import LexicalSection
from mnemovault.facade.librarian import LibrarianSection
from mnemovault.facade.pii_watch import PiiWatchSection
from mnemovault.facade.procedures import ProceduresSection
from mnemovault.facade.review import ReviewSection
from mnemovault.facade.subjects import SubjectsSection
from mnemovault.facade.tenants import TenantsSection
from mnemovault.governance import service as governance
from mnemovault.llm import ChatProvider
from mnemovault.memories import read, write
from mnemovault.models import (
    ForgetResult,
    Hit,
    Memory,
    MemoryInput,
    Page,
    PinResult,
    RecallFilters,
    Receipt,
    RetentionResult,
    TimelinePage,
    WakeState,
)
from mnemovault.pii import rotation
from mnemovault.pii import service as pii
from mnemovault.pii.crypto import KeyRing
from mnemovault.pii.detect import Detector
from mnemovault.pii.vault import PiiVault
from mnemovault.recall import service as recall_service
from mnemovault.recall import wake as wake_mod
from mnemovault.recall.ranking import FusionWeights
from mnemovault.runtime import Runtime, load_keyring
from mnemovault.store.db import Database

Ids = Sequence[uuid.UUID | str] | uuid.UUID | str
class MemoryVault(Closing):
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
        self.rt = SubjectsSection.wire(  # + the erasure ledger's file hook
            Runtime(db, embedder, settings, keyring or load_keyring(settings)))

    # The runtime's parts, readable and replaceable through the facade (a benchmark swaps
    # the embedder or the settings, a test the chat provider).
    db = part[Database]()
    embedder = part[Embedder]()
    settings = part[Settings]()
    keyring = part[KeyRing]()
    pii = part[PiiVault]()
    detectors = part[builtins.list[Detector]]()
    audit = part[AuditService]()
    weights = part[FusionWeights]()
    llm = part[ChatProvider]()

    # -- lifecycle ------------------------------------------------------------------------
    @classmethod
    def open(cls, settings: Settings | None = None, *, data_dir: str | Path | None = None,
             database_url: str | None = None, embedder: Embedder | None = None,
             migrate: bool = True, reindex: bool = True) -> MemoryVault:
        """Connect (starting the embedded server if needed), migrate, check the embedder,
        compare the erasure ledger with the database (a restored backup's erased records
        are erased again: :func:`mnemovault.subjects.ledger.check_on_start`) and re-index
        plain lexical terms unless not ``reindex`` (:mod:`mnemovault.recall.reindex`).

        Raises:
            ConfigError: the database was built with a different embedder.
            Unavailable: the database could not be started or migrated.
        """
        updates = {k: v for k, v in (("data_dir", None if data_dir is None else Path(data_dir)),
                                     ("database_url", database_url)) if v is not None}
        settings = (settings or Settings()).model_copy(update=updates)
        rt = Runtime.open(settings, embedder=embedder, migrate=migrate)
        mv = cls(rt.db, rt.embedder, rt.settings, rt.keyring)
        SubjectsSection.on_start(mv.rt)  # a database behind its erasure ledger: re-erased
        LexicalSection.on_start(mv.rt, run=reindex)  # terms written before 0014: keyed
        return mv

    def principal(self, tenant: str | None = None, role: Role = "owner") -> Principal:
        """A local principal (no API key) for ``tenant`` (default ``settings.tenant``)."""
        return Principal.local(tenant or self.rt.settings.tenant, role)

    def _who(self, principal: Principal | None) -> Principal:
        return principal or self.principal()

    # -- tenants and keys (mnemovault.keys) -----------------------------------------------
    def ensure_tenant(self, tenant: str) -> None:
        """Create the tenant if it does not exist (idempotent)."""
        keys.ensure_tenant(self.rt, tenant)

    def create_key(self, tenant: str, role: Role, *, name: str | None = None,
                   principal: Principal | None = None, scope: str | None = None,
                   subject: str | None = None,
                   permissions: Sequence[str] | None = None) -> tuple[str, uuid.UUID]:
        """Create an API key, optionally narrowed (fewer permissions, one scope, one
        subject): (token, key id); see :func:`mnemovault.keys.create_key`."""
        k = keys.create_key(self.rt, tenant, role, name=name, principal=principal,
                            scope=scope, subject=subject, permissions=permissions)
        return k.token, k.key_id

    def authenticate(self, token: str) -> Principal:
        """The principal of an API key token (raises ``Unauthenticated``)."""
        return keys.authenticate(self.rt, token)

    def list_keys(self, *, limit: int = 50, cursor: uuid.UUID | str | None = None,
                  principal: Principal | None = None) -> dict[str, Any]:
        """API keys, metadata only, keyset paged; see :func:`mnemovault.keys.list_keys`;
        each with its ``origin`` (:func:`mnemovault.agents.origins`)."""
        who = self._who(principal)
        page = keys.list_keys(self.rt, who, limit=limit, cursor=cursor)
        return {**page, "items": agents.origins(self.rt, who.tenant, page["items"])}

    def get_key(self, key_id: uuid.UUID | str, *,
                principal: Principal | None = None) -> dict[str, Any]:
        """One API key's metadata; see :func:`mnemovault.keys.get_key`."""
        return keys.get_key(self.rt, self._who(principal), key_id)

    def revoke_key(self, key_id: uuid.UUID | str, *, principal: Principal | None = None,
                   request_id: str | None = None) -> dict[str, Any]:
        """Revoke an API key (idempotent, audited); see :func:`mnemovault.keys.revoke_key`."""
        return keys.revoke_key(self.rt, self._who(principal), key_id, request_id=request_id)

    def register_agent(self, name: str, *, request_id: str | None = None) -> dict[str, Any]:
        """A self-registered agent's key: :func:`mnemovault.agents.register`."""
        return agents.register(self.rt, name, request_id=request_id)

    # -- write path (mnemovault.memories.write) -------------------------------------------
    def remember(self, content: str, *, scope: str, subject: str | None = None,
                 type: str = "episode", key: str | None = None,
                 provenance: dict[str, Any] | None = None, created_at: datetime | None = None,
                 entities: builtins.list[dict[str, str]] | None = None,
                 derived_from: Sequence[uuid.UUID | str] | None = None,
                 principal: Principal | None = None, request_id: str | None = None,
                 valid_from: datetime | str | None = None) -> Receipt:
        """Remember one memory. See :meth:`remember_many`. ``entities`` names personal values
        (``[{"kind": "person", "value": "Ada"}]``) to pseudonymise here and from now on;
        ``derived_from`` the memories (same scope) it was derived from: forgetting any of
        them forgets this one too. ``valid_from``: when what it says became true (its event
        time; default ``created_at``, else now): a keyed version is placed on its key's
        timeline by it (:mod:`mnemovault.memories.valid_time`)."""
        item = write.parse_one(content, scope=scope, subject=subject, type=type, key=key,
                               provenance=provenance, created_at=created_at,
                               entities=entities, derived_from=derived_from,
                               valid_from=valid_from)
        return write.remember(self.rt, self._who(principal), item, request_id=request_id)

    def remember_many(self, items: Sequence[MemoryInput | dict[str, Any]], *,
                      principal: Principal | None = None, request_id: str | None = None,
                      trigger: str = "remember") -> list[Receipt]:
        """Remember a batch: one embedding call, one transaction, one audit row; see
        :func:`mnemovault.memories.write.remember_many`."""
        return write.remember_many(self.rt, self._who(principal), items,
                                   request_id=request_id, trigger=trigger)

    # -- read path ------------------------------------------------------------------------
    def recall(self, query: str, *, scope: str, k: int = 10,
               filters: RecallFilters | dict[str, Any] | None = None,
               principal: Principal | None = None, touch: bool = True, reveal: bool = False,
               request_id: str | None = None,
               as_of: datetime | str | None = None) -> list[Hit]:
        """The ``k`` best memories in ``scope`` for ``query``, best first; ``as_of``: what
        was true at that time instead of now; see :func:`mnemovault.recall.service.recall`."""
        return recall_service.recall(self.rt, self._who(principal), query, scope=scope, k=k,
                                     filters=filters, touch=touch, reveal=reveal,
                                     request_id=request_id, as_of=as_of)

    def get(self, memory_id: uuid.UUID | str, *, principal: Principal | None = None,
            reveal: bool = False, request_id: str | None = None) -> Memory:
        """One memory by id, whatever its status (raises ``NotFound``)."""
        return read.get(self.rt, self._who(principal), memory_id, reveal=reveal,
                        request_id=request_id)

    def list(self, *, scope: str | None = None, subject: str | None = None, limit: int = 50,
             cursor: uuid.UUID | str | None = None, include_superseded: bool = False,
             flagged: bool = False, key: str | None = None,
             principal: Principal | None = None) -> Page:
        """Memories oldest id first, keyset-paginated (``next_cursor``); limit 1..100;
        ``flagged``: only those the injection sanitiser flagged; ``key``: only that key's."""
        return read.page(self.rt, self._who(principal), scope=scope, subject=subject,
                         limit=limit, cursor=cursor, include_superseded=include_superseded,
                         flagged=flagged, key=key)

    def stored_source_ids(self, scopes: builtins.list[str], *,
                          principal: Principal | None = None) -> dict[str, set[str]]:
        """``provenance.source_id`` values stored per scope (an import skips them)."""
        return read.source_ids(self.rt, self._who(principal), scopes)

    def wake(self, *, scope: str, subject: str | None = None, budget: int = 1000,
             principal: Principal | None = None) -> WakeState:
        """An agent's waking state: pinned, most used facts, most recent, as one fenced
        context pack within ``budget`` tokens; see :func:`mnemovault.recall.wake.wake`."""
        return wake_mod.wake(self.rt, self._who(principal), scope=scope, subject=subject,
                             budget=budget)

    def timeline(self, *, scope: str, subject: str | None = None,
                 since: datetime | None = None, until: datetime | None = None,
                 limit: int = 50, cursor: str | None = None,
                 principal: Principal | None = None) -> TimelinePage:
        """A subject's memories in time order, keyset paged; see
        :func:`mnemovault.recall.wake.timeline`."""
        return wake_mod.timeline(self.rt, self._who(principal), scope=scope, subject=subject,
                                 since=since, until=until, limit=limit, cursor=cursor)

    # -- forget, pin, retention (mnemovault.governance.service) ---------------------------
    def forget_preview(self, ids: Sequence[uuid.UUID | str] | None = None, *,
                       query: str | None = None, scope: str | None = None,
                       principal: Principal | None = None) -> builtins.list[dict[str, Any]]:
        """What :meth:`forget` would delete, deleting nothing; see
        :func:`mnemovault.governance.service.forget_preview`."""
        return governance.forget_preview(self.rt, self._who(principal), ids, query=query,
                                         scope=scope)

    def forget(self, ids: Ids | None = None, *, query: str | None = None,
               scope: str | None = None, principal: Principal | None = None,
               trigger: str = "api", request_id: str | None = None) -> ForgetResult:
        """The governed forget lifecycle (SPEC section 4), in one transaction; see
        :func:`mnemovault.governance.service.forget`."""
        return governance.forget(self.rt, self._who(principal), ids, query=query, scope=scope,
                                 trigger=trigger, request_id=request_id)

    def delete(self, ids: Ids, *, principal: Principal | None = None, trigger: str = "api",
               request_id: str | None = None) -> ForgetResult:
        """Forget memories by id: :meth:`forget` with ids only (the same lifecycle)."""
        return governance.delete(self.rt, self._who(principal), ids, trigger=trigger,
                                 request_id=request_id)

    def pin(self, ids: Ids, *, scope: str | None = None, principal: Principal | None = None,
            trigger: str = "api", request_id: str | None = None) -> PinResult:
        """Pin memories: exempt from retention, back from the archive; audited as ``PIN``.
        Needs ``memory:forget``."""
        return governance.set_pinned(self.rt, self._who(principal), ids, True, scope=scope,
                                     trigger=trigger, request_id=request_id)

    def unpin(self, ids: Ids, *, scope: str | None = None, principal: Principal | None = None,
              trigger: str = "api", request_id: str | None = None) -> PinResult:
        """Unpin memories: back to normal decay; audited as ``UNPIN``. As :meth:`pin`."""
        return governance.set_pinned(self.rt, self._who(principal), ids, False, scope=scope,
                                     trigger=trigger, request_id=request_id)

    def run_retention(self, *, dry_run: bool = False, now: datetime | None = None,
                      principal: Principal | None = None) -> RetentionResult:
        """The retention job for the principal's tenant; see
        :func:`mnemovault.governance.service.run_retention`."""
        return governance.run_retention(self.rt, self._who(principal), dry_run=dry_run,
                                        now=now)

    def run_retention_all(self, *, dry_run: bool = False,
                          now: datetime | None = None) -> builtins.list[RetentionResult]:
        """The retention job for every live tenant (operator path)."""
        return governance.run_retention_all(self.rt, dry_run=dry_run, now=now)

    # -- chat (mnemovault.chat.service) ---------------------------------------------------
    def chat_stream(self, message: str, *, scope: str, subject: str | None = None,
                    history: Sequence[dict[str, str]] | None = None, k: int | None = None,
                    reveal: bool = False, store: bool = True,
                    principal: Principal | None = None,
                    request_id: str | None = None) -> ChatStream:
        """One chat turn, streamed: :func:`mnemovault.chat.service.open_stream` (its steps
        and errors). Everything up to the model runs now, so bad input and missing
        permissions raise here; iterate the result for its events."""
        req = ChatRequest.parse(message=message, scope=scope, subject=subject,
                                history=history, k=k, reveal=reveal, store=store)
        return chat.open_stream(self.rt, req, self._who(principal), request_id)

    def chat(self, message: str, *, scope: str, subject: str | None = None,
             history: Sequence[dict[str, str]] | None = None, k: int | None = None,
             reveal: bool = False, store: bool = True, principal: Principal | None = None,
             request_id: str | None = None) -> ChatResult:
        """One chat turn, whole: :meth:`chat_stream`'s events in a :class:`ChatResult`."""
        return self.chat_stream(message, scope=scope, subject=subject, history=history, k=k,
                                reveal=reveal, store=store, principal=principal,
                                request_id=request_id).collect()

    # -- personal data (mnemovault.pii.service) -------------------------------------------
    def redact(self, texts: Sequence[str], *,
               principal: Principal | None = None) -> builtins.list[str]:
        """``texts`` as a model may see them (placeholders); lookups only."""
        return pii.redact(self.rt, self._who(principal), texts)

    def placeholder_outputs(self, placeholders: Iterable[str], *, reveal: bool = False,
                            principal: Principal | None = None,
                            request_id: str | None = None) -> dict[str, str]:
        """How each placeholder is shown to this caller (``[erased]``, or its value with
        ``reveal``); see :func:`mnemovault.pii.service.placeholder_outputs`."""
        return pii.placeholder_outputs(self.rt, self._who(principal), placeholders,
                                       reveal=reveal, request_id=request_id)

    def vault_entries(self, *, limit: int = 50, cursor: str | None = None,
                      principal: Principal | None = None) -> builtins.list[dict[str, Any]]:
        """Vault entries, metadata only, by placeholder; ``cursor`` = the last one seen."""
        return pii.entries(self.rt, self._who(principal), limit=limit, cursor=cursor)

    def vault_entry(self, placeholder: str, *, reveal: bool = False,
                    principal: Principal | None = None,
                    request_id: str | None = None) -> dict[str, Any]:
        """One vault entry; with ``reveal`` (``pii:reveal``) its value, audited."""
        return pii.entry(self.rt, self._who(principal), placeholder, reveal=reveal,
                         request_id=request_id)

    def shred(self, placeholders: Sequence[str], *, principal: Principal | None = None,
              request_id: str | None = None, trigger: str = "api") -> builtins.list[str]:
        """Crypto-shred vault values (``subject:erase``); the placeholders shredded."""
        return pii.shred(self.rt, self._who(principal), placeholders, request_id=request_id,
                         trigger=trigger)

    def vault_export(self, *, principal: Principal | None = None,
                     request_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """Every live vault entry with its value (owner only), audited."""
        return pii.export(self.rt, self._who(principal), request_id=request_id)

    def rotate_kek(self, *, retire: bool = False) -> dict[str, Any]:
        """Operator path, safe while serving: :func:`mnemovault.pii.rotation.rotate_kek`."""
        return rotation.rotate_kek(self.rt, retire=retire)

    # -- sections (mnemovault.facade): mv.procedures.capture(...), mv.subjects.erase(...) --
    lexical = section(LexicalSection)
    pii_watch = section(PiiWatchSection)
    librarian = section(LibrarianSection)
    procedures = section(ProceduresSection)
    review = section(ReviewSection)
    tenants = section(TenantsSection)
    subjects = section(SubjectsSection)

    def health(self) -> dict[str, Any]:
        """``status``, ``embedder`` and ``dimension`` once the database answers."""
        self.rt.db.ping()
        return {"status": "ok", "embedder": self.rt.embedder.model,
                "dimension": self.rt.embedder.dimension}
