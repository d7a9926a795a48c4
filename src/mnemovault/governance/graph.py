"""The entity graph: a node per placeholder (or named entity), an edge per pair of entities
mentioned in the same memory, each with the memories that support it.

Written by the write path (:func:`index`) in the transaction of the memories it describes;
cleaned by the forget path (:func:`supported_by`, :func:`delete_support`,
:func:`delete_orphans`). Node support doubles as the index of which records use which vault
value: every placeholder in every stored free-text field (content, scope, subject, key,
tags, provenance values) supports a node, so "no remaining record uses this value" is "its
node has no support left".

Concurrency: a writer locks every node it is about to support ``FOR KEY SHARE`` (writers
do not block each other); forget locks the nodes it may remove ``FOR UPDATE`` before it
checks their support, so it waits for such a writer and then sees its support, or the
writer waits and then creates the node afresh (and the write path then sees any value that
forget shredded, and refuses with a retryable conflict). Edges need no lock of their own:
both endpoints of an edge are nodes of the same memory, locked the same way.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from mnemovault.errors import Conflict
from mnemovault.pii.vault import PLACEHOLDER_RE, normalise
from mnemovault.store import graph as store
from mnemovault.store.db import tenant_of

MAX_EDGE_NODES = 32
"""Edges join the first 32 distinct entities of a memory (all pairs among them: at most 496
edges per memory); every entity still gets its node and node support."""


@dataclass
class Mentions:
    """The graph entries of one memory: nodes (id -> kind) in order of first mention."""

    memory_id: uuid.UUID
    nodes: dict[str, str] = field(default_factory=dict)
    # the placeholders whose value the memory's text held (the detectors put them there);
    # the other nodes are quoted: typed as placeholders by the writer, which grants no
    # reveal to a limited key (:mod:`mnemovault.visibility`)
    carried: set[str] = field(default_factory=set)

    def quotes(self, node: str) -> bool:
        """Whether the memory only quotes the placeholder ``node`` (an entity node of plain
        text, pseudonymisation off, is never quoted)."""
        return node not in self.carried and PLACEHOLDER_RE.fullmatch(node) is not None

    def edges(self) -> list[tuple[str, str]]:
        """Unordered pairs as (smaller, larger) in code-point order (``COLLATE "C"``)."""
        first = list(self.nodes)[:MAX_EDGE_NODES]
        return [(a, b) if a < b else (b, a) for a, b in itertools.combinations(first, 2)]


def mentions(memory_id: uuid.UUID, texts: Iterable[str | None],
             entities: Sequence[tuple[str, str]] = (), *,
             carried: Iterable[str] = ()) -> Mentions:
    """The placeholders in ``texts`` (in order), plus ``entities`` as ``(kind, value)`` pairs
    keyed ``kind:normalised value``: used only when pseudonymisation is off, where a named
    entity has no placeholder. ``carried``: the placeholders the pseudonymiser produced
    from values in these texts (every other placeholder in them was quoted)."""
    out = Mentions(memory_id, carried=set(carried))
    for text in texts:
        for m in PLACEHOLDER_RE.finditer(text or ""):
            out.nodes.setdefault(m.group(0), m.group(1))
    for kind, value in entities:
        out.nodes.setdefault(f"{kind}:{normalise(value)}", kind)
    return out


def index(conn: psycopg.Connection[Any], tenant: str, items: Sequence[Mentions]) -> None:
    """Insert nodes, edges and their support rows for freshly stored memories (idempotent)."""
    nodes: dict[str, str] = {}
    node_support: list[tuple[str, uuid.UUID, bool]] = []
    edge_support: list[tuple[str, str, uuid.UUID]] = []
    for item in items:
        nodes.update(item.nodes)
        node_support += [(n, item.memory_id, item.quotes(n)) for n in item.nodes]
        edge_support += [(a, b, item.memory_id) for a, b in item.edges()]
    if not nodes:
        return
    _lock_or_create(conn, tenant, nodes)
    node_support.sort()
    store.insert_node_support(conn, tenant, node_support)
    if not edge_support:
        return
    edge_support.sort()
    pairs = sorted({(a, b) for a, b, _ in edge_support})
    store.insert_edges(conn, tenant, pairs)
    store.insert_edge_support(conn, tenant, edge_support)


def _lock_or_create(conn: psycopg.Connection[Any], tenant: str, nodes: dict[str, str]) -> None:
    """Hold ``FOR KEY SHARE`` on every node of ``nodes`` (id -> kind), creating the missing
    ones. A node a concurrent forget deletes meanwhile is created again.

    Raises:
        Conflict: the nodes kept vanishing (a storm of concurrent forgets); retry.
    """
    missing = sorted(nodes)  # one lock order for every writer
    for _ in range(5):
        locked = store.lock_nodes_key_share(conn, tenant, missing)
        missing = [n for n in missing if n not in locked]
        if not missing:
            return
        created = store.create_nodes(conn, tenant, [(n, nodes[n]) for n in missing])
        missing = [n for n in missing if n not in created]  # made by a concurrent writer
        if not missing:
            return
    raise Conflict("graph: entity nodes changed concurrently; retrying is safe")


def supported_by(conn: psycopg.Connection[Any],
                 ids: Sequence[uuid.UUID]) -> tuple[list[str], list[tuple[str, str]]]:
    """The nodes and edges that any of ``ids`` supports (sorted)."""
    tenant = tenant_of(conn)
    return (store.nodes_supported_by(conn, tenant, ids),
            store.edges_supported_by(conn, tenant, ids))


def delete_support(conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID]) -> int:
    """Remove the support rows of ``ids``; returns how many were removed."""
    return store.delete_support(conn, tenant_of(conn), ids)


def delete_orphans(conn: psycopg.Connection[Any], nodes: Sequence[str],
                   edges: Sequence[tuple[str, str]]) -> tuple[list[str], int]:
    """Among ``nodes`` and ``edges``, delete those no memory supports any more (edges
    first), after locking ``nodes`` ``FOR UPDATE`` (``nodes`` must hold both endpoints of
    every edge in ``edges``, as :func:`supported_by` gives them). Returns (node ids
    removed, sorted; number of edges removed)."""
    tenant = tenant_of(conn)
    if nodes:
        store.lock_nodes_for_update(conn, tenant, nodes)
    removed_edges = 0
    if edges:
        removed_edges = store.delete_unsupported_edges(conn, tenant, edges)
    if not nodes:
        return [], removed_edges
    return sorted(store.delete_unsupported_nodes(conn, tenant, nodes)), removed_edges


def neighbours(conn: psycopg.Connection[Any], node_id: str) -> list[dict[str, Any]]:
    """The entities co-mentioned with ``node_id``: node id and number of supporting
    memories, most supported first."""
    return store.neighbours(conn, tenant_of(conn), node_id)
