"""The JSON Lines copy of each tenant's audit chain, written from the database after
commit, in sequence order (SPEC section 6: the database is the source of truth; the file
is for shipping elsewhere, and ``mnemovault.audit.verify`` accepts it).

One file per tenant, ``<dir>/<tenant>.jsonl``, one :func:`export_line` a row; the file
mechanics (lock, append after commit, fsync, atomic rewrite) are
:mod:`mnemovault.audit.jsonl`'s. Each sync compares the file's last line with the table's
row at its ``seq`` (same ``row_hash``), in the query that fetches the rows after it.

After a restore. A database restored from a backup is behind the file: the file holds
lines of rows the table no longer has (or, once new rows were written, other rows at the
same seqs). The mirror then never appends a line with a repeated or lower ``seq`` (the
file would no longer verify): the first line that differs from the table and everything
after it move, unchanged, to ``<tenant>.jsonl.restored-<UTC time>`` beside it (the
evidence of what the lost timeline recorded; it verifies with ``--allow-partial``), a
warning names that file, and appending resumes after the last matching line, so the file
is again the table's chain (:data:`mnemovault.audit.jsonl.SET_ASIDE`). A torn last line
(a writer died mid-line) is set aside the same way (``.torn-<UTC time>``) and written again.
"""

from __future__ import annotations

from typing import Any

from mnemovault.audit import jsonl
from mnemovault.audit.chain import export_line
from mnemovault.store import audit as store

BATCH = 5000


class JsonlMirror(jsonl.TableFile[dict[str, Any]]):
    """The audit mirror of one directory; :meth:`sync` is the database's after-commit
    hook; a file ahead of the database is cut back first (module docstring)."""

    ahead = jsonl.SET_ASIDE
    batch = BATCH

    def table(self, tenant: str) -> jsonl.Table[dict[str, Any]]:
        """The tenant's ``audit_log`` as the file sees it."""

        def fetch(after: int, limit: int) -> list[dict[str, Any]]:
            with self.db.transaction(tenant) as conn:
                return store.rows_after(conn, tenant, after, limit)

        return jsonl.Table(fetch=fetch, seq=_seq, ident=_ident, render=_render, key=_key)


def _seq(row: dict[str, Any]) -> int:
    return int(row["seq"])


def _ident(row: dict[str, Any]) -> str:
    return bytes(row["row_hash"]).hex()


def _render(row: dict[str, Any]) -> bytes:
    return export_line(bytes(row["row_bytes"]), bytes(row["prev_hash"]), bytes(row["row_hash"]))


def _key(line: dict[str, Any]) -> tuple[int, str]:
    return int(line["seq"]), str(line["row_hash"])
