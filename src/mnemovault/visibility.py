"""Who may see, reveal or act on a record: the one visibility rule (issue 19). Every path
that returns records or personal values opens a :class:`View` and asks it; no path
filters on its own. Its SQL is :mod:`mnemovault.store.visibility`.

The caller is a :class:`~mnemovault.auth.Principal`: a tenant (row-level security keeps
every other tenant's rows out of reach: they are "not found" on every path), a role's
permissions, and perhaps limits (one scope, one subject). A record is **within the
limits** when its scope and subject match each limit the key has; every record of the
tenant is within an unlimited key's.

**See.** A record within the limits, by its status and the path's purpose:

============  ======  ==========  ===========  ==============  ===================
purpose       active  superseded  archived     pending_review  used by
============  ======  ==========  ===========  ==============  ===================
``read``      yes     yes         yes          reviewers only  list, get, forget
                                                               previews, procedures
``recall``    yes     no          when asked   no              recall, wake,
                                                               timeline, chat
                                                               context, procedure
                                                               recall
``as_of``     yes     yes, when   when asked   no              recall ``as_of`` a
              [1]     valid [1]                                time (every surface)
``review``    no      no          no           reviewers only  the review queue
``subject``   yes     yes         yes          yes             subject listing,
                                                               export and erase
============  ======  ==========  ===========  ==============  ===================

[1] An ``as_of`` read (issue 23: what was true at time ``T``) sees a version only when
its valid interval ``[valid_from, valid_to)`` contains ``T`` (an unkeyed memory: when it
is valid from, i.e. was created, at or before ``T``; :mod:`mnemovault.memories.
valid_time`). Superseded versions are visible to ``as_of`` reads only: the default recall
is "now", the current versions. A displaced or rejected review proposal has an empty
interval and so is seen by no ``as_of`` read; a pending one by none either (it is not
placed on its key's timeline until approved). The interval condition is
:func:`mnemovault.store.visibility.valid_at`.

The ``recall`` and ``as_of`` rows are also written into the recall SQL itself (the
statuses of :func:`recall_statuses` as literals in :func:`mnemovault.store.search.
filter_sql`, with :func:`mnemovault.store.visibility.valid_at` for ``as_of``, and
``status = 'active'`` in the wake/timeline queries of
:mod:`mnemovault.store.memories`), because the BM25 postings hold only active rows and the
planner needs the literal to use its indexes; ``tests/test_visibility_matrix.py`` checks
those paths against this table like every other.

A *reviewer* holds ``review:approve`` (an unlimited admin or owner key, or the local
operator: limited keys never hold it). The ``subject`` purpose sees every status because a
data subject's access and erasure reach everything held about them, pending included.
An erased record no longer exists: every path finds nothing.

**Reveal.** A placeholder becomes its value only in output shown to a caller with
``pii:reveal`` who asked for it, and only when :meth:`View.revealable` says so:

* an unlimited key reveals every live value of its tenant;
* a limited key reveals a value only when a record it may see (``read`` purpose, within its
  limits) *carries* it: that record's text held the value itself and the detectors put
  the placeholder there (``graph_node_support.quoted`` is false). A placeholder a writer
  typed (quoted from something it read elsewhere, in a memory, a rectified text or a chat
  message) carries nothing, so quoting a placeholder seen outside the limits never opens
  its value. Anything not revealable stays a placeholder: never an error that would
  confirm the value exists.

Shredded values show ``[erased]`` to every caller (SPEC section 3).

**Vault entries.** A vault entry (its placeholder, kind and dates) is shown to a limited key
only when that key could reveal it (:meth:`View.entries_shown`: a record it may see carries
the value), with or without ``pii:reveal``; an entry that records within its limits only
quote is "not found", exactly like a placeholder no value has, so quoting a placeholder
never confirms that its value exists (the vault listing, one entry, the subject export).

**Act.** Changing a record (forget, pin, rectify, review decisions, erase) needs the
operation's permission and a record within the limits. Forget and pin act on any status
(a writer may withdraw its own pending write); their previews show a record the caller may
not see (a pending version or derived record, for a non-reviewer) without its text
(``excerpt`` null, ``withheld`` naming why), since a forget would still delete it.

**Known values for limited keys.** Placeholders are deterministic per tenant (the same
value, the same placeholder: subject lookups and erasure rely on it). So that a limited
key's writes never confirm a value that lives only outside its limits, its writes
recognise as known entities only the values used within its limits and the entities it
names itself (the pattern detectors, e-mail, phone, IBAN, card, IP, work as always: their
placeholder is a keyed hash of the value, the same string whether or not the entry
existed), and its receipt lists as created every placeholder no record within its limits
used before. The trade-off: a name known only in another scope, written by a limited key
that does not name it as an entity, is stored as written.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from mnemovault.audit import log as audit
from mnemovault.auth import Principal
from mnemovault.models import Memory
from mnemovault.pii.detect import KnownEntityIndex
from mnemovault.pii.translate import Translator
from mnemovault.pii.vault import ERASED, PLACEHOLDER_RE
from mnemovault.pii.vault import render as render_text
from mnemovault.runtime import Runtime
from mnemovault.store import visibility as store

Conn = psycopg.Connection[Any]
Purpose = Literal["read", "recall", "as_of", "review", "subject"]

PURPOSES: tuple[Purpose, ...] = ("read", "recall", "as_of", "review", "subject")
"""The purposes of the table in the module docstring."""

RENDERED_FIELDS = ("content", "subject", "key", "scope")
"""The fields of a :class:`~mnemovault.models.Memory` that can hold placeholders."""


def _statuses(purpose: Purpose, reviewer: bool) -> tuple[str, ...] | None:
    pending = ("pending_review",) if reviewer else ()
    if purpose == "read":
        return ("active", "superseded", *pending)
    if purpose == "recall":
        return ("active",)
    if purpose == "as_of":  # within the valid interval: store.valid_at
        return ("active", "superseded")
    if purpose == "review":
        return pending
    return None  # subject: every status


def recall_purpose(as_of: Any) -> Purpose:
    """The purpose of a recall: ``as_of`` when it asks for a past time, else ``recall``."""
    return "recall" if as_of is None else "as_of"


def recall_statuses(as_of: Any = None) -> tuple[str, ...]:
    """The statuses a recall sees (the ``recall`` row of the table; ``as_of`` when it
    asks what was true at a time, then only within each version's valid interval:
    :func:`mnemovault.store.visibility.valid_at`)."""
    statuses = _statuses(recall_purpose(as_of), False)
    assert statuses is not None
    return statuses


@dataclass(frozen=True)
class View:
    """One caller's view in one transaction: its limits as stored (pseudonymised once) and
    the statuses its purpose sees. Open one with :func:`view`."""

    rt: Runtime
    conn: Conn
    who: Principal
    purpose: Purpose
    scope: str | None  # the key's scope limit as stored, or None
    subject: str | None  # the key's subject limit as stored, or None
    as_of: Any = None  # an ``as_of`` view's time (a datetime)

    @property
    def reviewer(self) -> bool:
        return "review:approve" in self.who.permissions

    @property
    def statuses(self) -> tuple[str, ...] | None:
        """The statuses this view sees (None: every status)."""
        return _statuses(self.purpose, self.reviewer)

    def within(self, row: dict[str, Any] | Memory) -> bool:
        """Whether a stored row (``scope``, ``subject_id``) or memory lies within the
        limits."""
        scope, subject = _scope_subject(row)
        return ((self.scope is None or scope == self.scope)
                and (self.subject is None or subject == self.subject))

    def sees(self, row: dict[str, Any] | Memory) -> bool:
        """Whether this view shows the row at all: within the limits, in a status it
        sees (an ``as_of`` view: also within its valid interval at :attr:`as_of`)."""
        statuses = self.statuses
        status = row["status"] if isinstance(row, dict) else row.status
        if self.purpose == "as_of" and not self.valid(row):
            return False
        return self.within(row) and (statuses is None or status in statuses)

    def valid(self, row: dict[str, Any] | Memory) -> bool:
        """Whether the row's valid interval contains :attr:`as_of` (True when the view
        has no time: every other purpose)."""
        if self.as_of is None:
            return True
        start, end = ((row.get("valid_from"), row.get("valid_to")) if isinstance(row, dict)
                      else (row.valid_from, row.valid_to))
        return start is not None and start <= self.as_of and (end is None
                                                                or self.as_of < end)

    def withheld(self, row: dict[str, Any]) -> str | None:
        """Why a row an operation reaches is shown without its text (``outside_limits``,
        or its status), or None when this view sees it."""
        if self.sees(row):
            return None
        return "outside_limits" if not self.within(row) else str(row["status"])

    def clause(self, params: dict[str, Any], *, alias: str = "",
               statuses: Iterable[str] | None = None) -> str:
        """The SQL condition of this view (limits and statuses) for a store query;
        ``statuses`` narrows the view's further (it never widens it)."""
        mine = self.statuses
        wanted = None if mine is None and statuses is None else [
            s for s in (statuses if statuses is not None else mine or ())
            if mine is None or s in mine]
        out = store.clause(params, scope=self.scope, subject=self.subject,
                           statuses=wanted, alias=alias)
        if self.purpose == "as_of":
            out += store.valid_at(params, self.as_of, alias=alias)
        return out

    # -- reveal --------------------------------------------------------------------------
    def revealable(self, placeholders: Iterable[str]) -> set[str]:
        """Those of ``placeholders`` this caller may see the value of (module docstring):
        none without ``pii:reveal``; all for an unlimited key; for a limited key those a
        record it may see carries (a record the ``read`` view sees; in a ``subject`` view,
        any record of the subject within the limits)."""
        if "pii:reveal" not in self.who.permissions:
            return set()
        return self.entries_shown(placeholders)

    def entries_shown(self, placeholders: Iterable[str]) -> set[str]:
        """Those of ``placeholders`` whose vault entry this view shows (module docstring,
        "vault entries"): all for an unlimited key; for a limited key those a record it
        may see carries (:meth:`revealable`'s rule, without ``pii:reveal``)."""
        wanted = sorted(set(placeholders))
        if not self.who.limited or not wanted:
            return set(wanted)
        return store.carried(self.conn, self.who.tenant, wanted, scope=self.scope,
                             subject=self.subject, statuses=self._carriers)

    def entry_page(self, *, after: str, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` vault entries this view shows (:meth:`entries_shown`), by
        placeholder after ``after``: metadata only (:meth:`entry_rows`)."""
        return self.entry_rows(store.entries(
            self.conn, self.who.tenant, after=after, limit=limit, limited=self.who.limited,
            scope=self.scope, subject=self.subject, statuses=self._carriers))

    def entry_rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Vault entry metadata as this view shows it: for a limited key, ``created_at`` is
        when a record it may see first carried the value (the entry's own date would tell
        that the value was known elsewhere before)."""
        if not self.who.limited or not rows:
            return rows
        first = store.first_carried(self.conn, self.who.tenant,
                                    [r["placeholder"] for r in rows], scope=self.scope,
                                    subject=self.subject, statuses=self._carriers)
        return [{**r, "created_at": first.get(r["placeholder"], r["created_at"])}
                for r in rows]

    @property
    def _carriers(self) -> tuple[str, ...] | None:
        """The statuses of the records whose carried values a limited key may reveal: those
        the ``read`` view sees (a ``subject`` view: every status)."""
        return None if self.purpose == "subject" else _statuses("read", self.reviewer)

    def outputs(self, placeholders: Iterable[str], *, reveal: bool,
                request_id: str | None = None, trigger: str | None = None,
                memory_ids: list[str] | None = None) -> dict[str, str]:
        """How each placeholder shows to this caller: ``[erased]`` when shredded (for
        everyone), its value when ``reveal`` and :meth:`revealable` (a ``REVEAL`` audit
        row names what was revealed), else absent (it stays a placeholder)."""
        wanted = sorted(set(placeholders))
        if reveal:
            self.who.require("pii:reveal")
        if not wanted:
            return {}
        out = {p: ERASED for p in self.rt.pii.erased_placeholders(self.conn, wanted)}
        if not reveal:
            return out
        opened = self.revealable(p for p in wanted if p not in out)
        values = {p: v for p, v in self.rt.pii.reveal_values(
            self.conn, self.who.tenant, opened).items() if v != ERASED}
        if values:
            audit.append(self.conn, tenant=self.who.tenant, operation="REVEAL",
                         actor=self.who.actor, agent=self.who.agent,
                         memory_ids=memory_ids or [], request_id=request_id, trigger=trigger,
                         details={"placeholders": sorted(values), "count": len(values)})
        return {**out, **values}

    def render(self, memories: list[Memory], *, reveal: bool = False,
               request_id: str | None = None) -> list[Memory]:
        """Output rendering (SPEC section 3) of memories this view sees: shredded
        placeholders ``[erased]`` for every caller; with ``reveal`` (``pii:reveal``) the
        revealable ones their values, audited as ``REVEAL``."""
        if reveal:
            self.who.require("pii:reveal")
        found = {m.group(0) for mem in memories for fld in RENDERED_FIELDS
                 for m in PLACEHOLDER_RE.finditer(getattr(mem, fld) or "")}
        if not found:
            return memories
        return apply(memories, self.outputs(found, reveal=reveal, request_id=request_id,
                                            memory_ids=[str(m.id) for m in memories]))

    # -- the write side of a limited key -------------------------------------------------
    def known_index(self, fingerprint_key: bytes) -> KnownEntityIndex | None:
        """The known-entity index a limited key's writes use (module docstring: the values
        used within its limits); None for an unlimited key (the tenant's whole index)."""
        if not self.who.limited:
            return None
        index = KnownEntityIndex(fingerprint_key)
        for r in store.known_within(self.conn, self.who.tenant, scope=self.scope,
                                    subject=self.subject):
            index.add_fingerprint(r["kind"], bytes(r["fingerprint"]), r["ntokens"] or 1,
                                  bytes(r["head"]) if r["head"] is not None else None)
        return index

    def used_within(self, placeholders: Iterable[str]) -> set[str]:
        """Those of ``placeholders`` some record within the limits uses (any status):
        what a limited key's receipt does not list as created."""
        wanted = sorted(set(placeholders))
        if not self.who.limited:
            return set(wanted)
        return store.used(self.conn, self.who.tenant, wanted, scope=self.scope,
                          subject=self.subject)


def apply(memories: list[Memory], shown: dict[str, str]) -> list[Memory]:
    """``memories`` with each placeholder of :data:`RENDERED_FIELDS` shown as ``shown``
    says (:meth:`View.outputs`: values and ``[erased]``; the rest stay placeholders)."""
    if not shown:
        return memories
    values = {p: v for p, v in shown.items() if v != ERASED}
    erased = {p for p, v in shown.items() if v == ERASED}
    return [m.model_copy(update={fld: render_text(getattr(m, fld), values, erased)
                                 for fld in RENDERED_FIELDS if getattr(m, fld)})
            for m in memories]


def _scope_subject(row: dict[str, Any] | Memory) -> tuple[str | None, str | None]:
    if isinstance(row, dict):
        return row.get("scope"), row.get("subject_id")
    return row.scope, row.subject


def view(rt: Runtime, conn: Conn, who: Principal, purpose: Purpose = "read", *,
         tr: Translator | None = None, as_of: Any = None) -> View:
    """The caller's :class:`View` in ``conn``'s transaction (its limits translated to their
    stored form once: ``tr`` reuses an operation's translator); ``as_of`` (a datetime) is
    the time of an ``as_of`` view and required by it."""
    if purpose not in PURPOSES:
        raise ValueError(f"purpose: one of {', '.join(PURPOSES)}")
    if (purpose == "as_of") != (as_of is not None):
        raise ValueError("as_of: the time of an as_of view, and of no other")
    scope = subject = None
    if who.limited:
        tr = tr or Translator(rt, conn, who.tenant, names=True)
        scope, subject = tr(who.scope), tr(who.subject)
    return View(rt=rt, conn=conn, who=who, purpose=purpose, scope=scope, subject=subject,
                as_of=as_of)
