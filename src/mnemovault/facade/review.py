"""``mv.review``: the review gate's queue and decisions (:mod:`mnemovault.governance.review`).

    page = mv.review.list(limit=20)                   # pending items, oldest first
    mv.review.approve(page.items[0].id, comment="checked the source")
    mv.review.reject(page.items[1].id)

The local operator (``mv`` without a principal) approves what keys captured; its own
captures only with ``REVIEW_SELF_APPROVAL=true`` (separation of duties).
"""

from __future__ import annotations

import builtins
import uuid
from typing import Any

from mnemovault.auth import Principal
from mnemovault.facade import Section
from mnemovault.governance import review
from mnemovault.governance.review import ReviewDecision
from mnemovault.models import Page


class ReviewSection(Section):
    """The review queue and its decisions; every method needs ``review:approve``."""

    def list(self, *, scope: str | None = None, limit: int = 50,
             cursor: uuid.UUID | str | None = None,
             principal: Principal | None = None) -> Page:
        """Pending items oldest first, keyset paged; see :func:`~mnemovault.governance.
        review.queue`."""
        return review.queue(self.rt, self._who(principal), scope=scope, limit=limit,
                            cursor=cursor)

    def approve(self, memory_id: uuid.UUID | str, *, comment: str | None = None,
                principal: Principal | None = None,
                request_id: str | None = None) -> ReviewDecision:
        """Approve a pending item (audited with the reviewer and comment)."""
        return review.approve(self.rt, self._who(principal), memory_id, comment=comment,
                              request_id=request_id)

    def reject(self, memory_id: uuid.UUID | str, *, comment: str | None = None,
               principal: Principal | None = None,
               request_id: str | None = None) -> ReviewDecision:
        """Reject a pending item (deleted, or a version kept as rejected history)."""
        return review.reject(self.rt, self._who(principal), memory_id, comment=comment,
                             request_id=request_id)

    def flag(self, memory_id: uuid.UUID | str, action: str, *,
             principal: Principal | None = None,
             request_id: str | None = None) -> dict[str, Any]:
        """Keep a flagged import, or send it to review; see
        :func:`mnemovault.governance.review.flag`."""
        return review.flag(self.rt, self._who(principal), memory_id, action,
                           request_id=request_id)

    def pending(self, *, scope: str | None = None,
                principal: Principal | None = None) -> builtins.list[uuid.UUID]:
        """The ids of every pending item (all pages of :meth:`list`), oldest first."""
        ids: builtins.list[uuid.UUID] = []
        cursor: uuid.UUID | None = None
        while True:
            page = self.list(scope=scope, limit=100, cursor=cursor, principal=principal)
            ids.extend(m.id for m in page.items)
            if page.next_cursor is None:
                return ids
            cursor = page.next_cursor
