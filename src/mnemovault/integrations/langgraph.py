"""LangGraph's long-term memory store over mnemovault: ``MnemovaultStore(vault, ...)``, a
``langgraph.store.base.BaseStore`` (extra ``mnemovault[langgraph]``)::

    from mnemovault import MemoryVault
    from mnemovault.integrations.langgraph import MnemovaultStore

    store = MnemovaultStore(MemoryVault.open())
    store.put(("memories", "ada"), "tea", {"text": "Ada prefers green tea"})
    store.search(("memories", "ada"), query="what does Ada drink?", limit=3)
    store.delete(("memories", "ada"), "tea")          # the governed forget

How an item is kept. Each item is one memory (type ``fact``) of the store's principal's
tenant (default: the local operator; pass ``principal=`` a key's principal): its content
is the value as canonical JSON, written by :meth:`MemoryVault.remember`, so it passes the
capture guard, the injection sanitiser (agent-supplied text: phrasing aimed at a model
is replaced by ``[REDACTED_POTENTIAL_PROMPT_INJECTION]``) and pseudonymisation (values
come back with placeholders such as ``{email:p_0123456789}``) and gets its audit row.
Its mnemovault key is the namespace and the item key as one JSON array, so a ``put`` of
the same key is the
memory's next version (the old one superseded) and ``delete`` (or ``put`` of ``None``) is
:meth:`MemoryVault.forget` of it: every version, what was derived from it, vault values no
other record uses, one ``FORGET`` audit row.

Namespaces (``namespace_map``, a keyword argument): a function from a namespace (or a
search prefix) to ``(scope, subject)``. The default, :func:`default_namespace_map`, takes
the first label as the scope and the second, when there is one, as the subject:
``("memories", "ada")`` is scope ``memories``, subject ``ada``; ``("memories", "ada",
"prefs")`` the same scope and subject (the whole namespace is kept with the item and
matched exactly). The tenant is never chosen by a namespace: it is the principal's.
Labels and keys are free text like any other: a personal value in one (an e-mail
address) is stored as its placeholder, and search results name it so (``get`` answers with
the namespace and key it was asked for).

Search. With ``query``: :meth:`MemoryVault.recall` in the prefix's scope (and subject),
then the prefix, ``filter`` (LangGraph's own semantics: equality, nested objects and
``$eq $ne $gt $gte $lt $lte``) and ``offset``/``limit``; items ``put`` with ``index=False``
are left out (recall ranks the whole value's text, whatever fields ``index`` names).
Without ``query``: the items of the prefix's scope oldest first (:meth:`MemoryVault.list`,
paged). ``list_namespaces`` reads the items of the tenant (or of a prefix's scope) the same
way: its cost grows with the number of items.

TTL (``supports_ttl = True``): ``ttl`` minutes are kept with the item as its expiry; an
expired item is never returned, and the batch that finds it forgets it (governed, trigger
``ttl``); :meth:`MnemovaultStore.sweep_expired` forgets every expired item of a scope.
Reads do not extend a TTL (``refresh_ttl`` is accepted and has no effect).

Concurrency: ``abatch`` runs ``batch`` in a worker thread (the
:class:`~mnemovault.aio.AsyncMemoryVault`'s limiter when the store was given one).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from mnemovault.auth import Principal
from mnemovault.integrations import AnyVault, missing_extra, sync_vault
from mnemovault.models import Memory

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
    from langgraph.store.memory import _compare_values, _does_match
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise missing_extra("langgraph", "langgraph", exc) from exc

from mnemovault.aio import AsyncMemoryVault

SOURCE = "tool:langgraph"
"""The provenance ``source`` of every item this store writes (and the only ones it reads):
a tool source, so the injection sanitiser treats the values as agent-supplied text, as it
does the MCP ``remember`` tool's (:func:`mnemovault.guard.sanitise.tool_source`)."""

NamespaceMap = Callable[[tuple[str, ...]], tuple[str, str | None]]


def default_namespace_map(namespace: tuple[str, ...]) -> tuple[str, str | None]:
    """``(namespace[0], namespace[1] or None)``: the first label is the scope, the second
    the subject.

    Raises:
        ValueError: an empty namespace (a scope is needed).
    """
    if not namespace:
        raise ValueError("namespace: empty; its first label is the scope")
    return namespace[0], (namespace[1] if len(namespace) > 1 else None)


def _mkey(namespace: tuple[str, ...], key: str) -> str:
    return json.dumps([*namespace, key], ensure_ascii=False, separators=(",", ":"))


class MnemovaultStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are governed mnemovault memories; see the
    module docstring for the mapping."""

    supports_ttl: bool = True

    def __init__(self, vault: AnyVault, *, principal: Principal | None = None,
                 namespace_map: NamespaceMap = default_namespace_map,
                 trigger: str = "langgraph") -> None:
        self.vault = sync_vault(vault)
        self._async = vault if isinstance(vault, AsyncMemoryVault) else None
        self.principal = principal or self.vault.principal()
        self.namespace_map = namespace_map
        self.trigger = trigger

    # -- the two entry points -------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        expired: list[str] = []
        out: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                out.append(self._get(op, expired))
            elif isinstance(op, SearchOp):
                out.append(self._search(op, expired))
            elif isinstance(op, PutOp):
                self._put(op)
                out.append(None)
            elif isinstance(op, ListNamespacesOp):
                out.append(self._namespaces(op, expired))
            else:
                raise ValueError(f"op: unknown operation {type(op).__name__}")
        if expired:
            self.vault.forget(list(dict.fromkeys(expired)), principal=self.principal,
                              trigger="ttl")
        return out

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if self._async is not None:
            return await self._async.run(self.batch, ops)
        return await asyncio.to_thread(self.batch, ops)

    # -- operations -----------------------------------------------------------------------
    def _item(self, m: Memory, cls: type[Item] = Item, *,
              where: tuple[tuple[str, ...], str] | None = None, **extra: Any) -> Item:
        prov = m.provenance
        try:
            value = json.loads(m.content)
            if not isinstance(value, dict):
                value = {"content": value}
        except ValueError:  # the sanitiser rewrote it: the text as stored
            value = {"content": m.content}
        created = prov.get("lg_created_at")
        ns, key = where or (tuple(json.loads(prov["lg_namespace"])), prov["lg_key"])
        return cls(namespace=ns, key=key, value=value, updated_at=m.created_at,
                   created_at=datetime.fromisoformat(created) if created else m.created_at,
                   **extra)

    @staticmethod
    def _ours(m: Memory) -> bool:
        return m.provenance.get("source") == SOURCE and "lg_namespace" in m.provenance

    @staticmethod
    def _expired(m: Memory, now: datetime) -> bool:
        exp = m.provenance.get("lg_expires_at")
        return isinstance(exp, str) and datetime.fromisoformat(exp) <= now

    def _current(self, namespace: tuple[str, ...], key: str) -> Memory | None:
        scope, subject = self.namespace_map(namespace)
        page = self.vault.list(scope=scope, subject=subject, key=_mkey(namespace, key),
                               limit=10, principal=self.principal)
        live = [m for m in page.items if self._ours(m) and m.status == "active"]
        return live[-1] if live else (page.items[-1] if page.items else None)

    def _get(self, op: GetOp, expired: list[str]) -> Item | None:
        m = self._current(op.namespace, op.key)
        if m is None:
            return None
        if self._expired(m, datetime.now(UTC)):
            expired.append(str(m.id))
            return None
        return self._item(m, where=(tuple(op.namespace), op.key))

    def _put(self, op: PutOp) -> None:
        scope, subject = self.namespace_map(op.namespace)
        old = self._current(op.namespace, op.key)
        if op.value is None:
            if old is not None:
                self.vault.forget([old.id], principal=self.principal, trigger=self.trigger)
            return
        now = datetime.now(UTC)
        prov: dict[str, Any] = {
            "source": SOURCE, "lg_namespace": json.dumps(list(op.namespace),
                                                         ensure_ascii=False),
            "lg_key": op.key, "lg_index": op.index is not False,
            "lg_created_at": (old.provenance.get("lg_created_at") if old is not None
                              else None) or now.isoformat()}
        if op.ttl is not None:
            prov["lg_expires_at"] = (now + timedelta(minutes=op.ttl)).isoformat()
        self.vault.remember(json.dumps(op.value, ensure_ascii=False, sort_keys=True),
                            scope=scope, subject=subject, type="fact",
                            key=_mkey(op.namespace, op.key), provenance=prov,
                            principal=self.principal)

    def _scan(self, scope: str | None, subject: str | None) -> Iterator[Memory]:
        cursor = None
        while True:
            page = self.vault.list(scope=scope, subject=subject, limit=100, cursor=cursor,
                                   principal=self.principal)
            yield from (m for m in page.items if self._ours(m))
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def _search(self, op: SearchOp, expired: list[str]) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        now = datetime.now(UTC)
        want = op.offset + op.limit

        stored_prefix: list[tuple[str, ...]] = []

        def keep(m: Memory) -> bool:
            if not self._ours(m):
                return False
            if self._expired(m, now):
                expired.append(str(m.id))
                return False
            ns = tuple(json.loads(m.provenance["lg_namespace"]))[:len(prefix)]
            if ns == prefix:
                return True
            if not stored_prefix:  # labels are stored pseudonymised, like all text
                stored_prefix.append(tuple(self.vault.redact(list(prefix),
                                                             principal=self.principal)))
            return ns == stored_prefix[0]

        def passes(item: Item) -> bool:
            return all(_compare_values(item.value.get(k), v)
                       for k, v in (op.filter or {}).items())

        found: list[SearchItem] = []
        if op.query:
            if not prefix:
                raise ValueError("namespace_prefix: a search with a query needs at least "
                                 "the scope's label (recall runs in one scope)")
            scope, subject = self.namespace_map(prefix)
            k = min(100, max(10, 3 * want))
            hits = self.vault.recall(op.query, scope=scope, k=k,
                                     filters={"subject": subject} if subject else None,
                                     principal=self.principal)
            for h in hits:
                if keep(h.memory) and h.memory.provenance.get("lg_index", True):
                    item = self._item(h.memory, SearchItem, score=h.score)
                    if passes(item):
                        found.append(item)  # type: ignore[arg-type]
        else:
            where: tuple[str | None, str | None] = (
                self.namespace_map(prefix) if prefix else (None, None))
            for m in self._scan(*where):
                if m.status == "active" and keep(m):
                    item = self._item(m, SearchItem)
                    if passes(item):
                        found.append(item)  # type: ignore[arg-type]
                        if len(found) >= want:
                            break
        return found[op.offset:want]

    def _namespaces(self, op: ListNamespacesOp, expired: list[str]) -> list[tuple[str, ...]]:
        conditions: tuple[MatchCondition, ...] = op.match_conditions or ()
        scope: str | None = None
        subject: str | None = None
        for c in conditions:
            if c.match_type == "prefix" and c.path and "*" not in c.path[:1]:
                scope, subject = self.namespace_map(tuple(c.path))
                if subject is not None and (len(c.path) < 2 or c.path[1] == "*"):
                    subject = None
        now = datetime.now(UTC)
        seen: set[tuple[str, ...]] = set()
        for m in self._scan(scope, subject):
            if m.status != "active":
                continue
            if self._expired(m, now):
                expired.append(str(m.id))
                continue
            seen.add(tuple(json.loads(m.provenance["lg_namespace"])))
        names = [ns for ns in seen if all(_does_match(c, ns) for c in conditions)]
        if op.max_depth is not None:
            names = list({ns[:op.max_depth] for ns in names})
        return sorted(names)[op.offset:op.offset + op.limit]

    def sweep_expired(self, scope: str | None = None) -> int:
        """Forget every expired item of ``scope`` (default: the tenant's); how many."""
        now = datetime.now(UTC)
        ids = [str(m.id) for m in self._scan(scope, None) if self._expired(m, now)]
        if ids:
            self.vault.forget(ids, principal=self.principal, trigger="ttl")
        return len(ids)


__all__ = ["MnemovaultStore", "NamespaceMap", "default_namespace_map"]
