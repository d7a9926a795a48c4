"""Per-tenant JSON Lines files kept beside the database, written from a table after
commit: the mechanics shared by the audit mirror (:mod:`mnemovault.audit.mirror`) and the
erasure ledger file (:mod:`mnemovault.subjects.ledger`). The formats of the lines are
theirs; this module never renders or interprets a line beyond a ``(seq, ident)`` key.

Files. ``<dir>/<name>.jsonl``, one a tenant (``name`` is a tenant id,
:data:`mnemovault.auth.TENANT_RE`, or a system name starting with ``_``; anything else, a
slash or a dot, is refused: :data:`SAFE_NAME`). Every writer, in any process or thread,
takes an exclusive ``fcntl`` lock on ``<file>.lock`` first.

Appending (:meth:`TenantFiles.sync`). The table is the source of truth and every row has
a ``seq`` (increasing) and an ``ident`` (what the line says the row is: the audit row's
hash, the ledger row's id). Under the lock the file's last complete line is compared with
the table's row at its ``seq``, in the same query that fetches what follows it: when they
agree the rows after it are appended, rendered by the caller, in ``seq`` order, then
flushed and (``fsync=True``, the default) fsynced. A torn tail (a last line without its
newline: a writer died mid-line) is first moved to a side file (below) and the rows it
held are written again from the table.

A file ahead of the database. When the file's last line is not the table's row at that
``seq`` (the row is missing, or another row holds the seq), the database was restored to
an earlier state than the file (or the file came from elsewhere). Each user picks what
happens then:

- :data:`KEEP` (the erasure ledger, whose whole point is to outlive a restore): every line
  stays; the table's rows whose ``ident`` the file lacks are appended after them, and the
  number of lines with no row in the table is logged as a warning and returned
  (:attr:`Synced.unmatched`).
- :data:`SET_ASIDE` (the audit mirror, which must stay a copy of the chain: a second line
  with the same ``seq``, or a lower one, would make it unverifiable): the file is read
  from the start beside the table; from the first line that does not match its row (or does
  not parse), the tail is moved, byte for byte, to the side file
  ``<name>.jsonl.restored-<UTC time>`` (written and fsynced before the main file is cut
  back), a warning names it, and appending resumes after the last matching line, so the
  file again equals the table and no line is lost. The side files stay until the tenant's
  files are removed (:meth:`TenantFiles.remove`).

Finding where the file stops matching costs one pass over the file and the table; it
happens only after a restore. In step, a sync is one query (the last line's row and what
follows it) when fewer than a batch of rows are new.

Rewriting (:meth:`TenantFiles.rewrite`, :func:`dump`) writes every row of the table to a
temporary file in the target's directory, fsyncs it, renames it over the target and
fsyncs the directory: a reader sees the old file or the new one, never half of one.

Users. :class:`TableFile` is a per-tenant file of one table (a database and a directory):
a subclass names its :class:`Table` and its choice of :data:`KEEP` or :data:`SET_ASIDE`;
:class:`TenantFiles` alone serves a system file (the ledger's ``_purged.jsonl``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import orjson

from mnemovault.errors import ValidationError
from mnemovault.store.db import Database

log = logging.getLogger(__name__)

R = TypeVar("R")

SAFE_NAME = re.compile(r"^[a-z0-9_][a-z0-9_-]{0,63}$")
"""A file's name (without ``.jsonl``): a tenant id or a system name starting with ``_``."""

KEEP: Literal["keep"] = "keep"
SET_ASIDE: Literal["set_aside"] = "set_aside"
Ahead = Literal["keep", "set_aside"]
"""What :meth:`TenantFiles.sync` does with a file ahead of the database (module docstring)."""

BATCH = 1000


@dataclass(frozen=True)
class Table(Generic[R]):
    """How one tenant's file relates to its table.

    Attributes:
        fetch: ``fetch(after, limit)``: up to ``limit`` rows with ``seq > after``, in
            ``seq`` order (each call its own transaction, as the caller likes).
        seq: a row's ``seq``.
        ident: a row's identity as its line states it (compared with :attr:`key`'s).
        render: a row's line, newline included.
        key: a parsed line's ``(seq, ident)``; raises ``KeyError``/``TypeError``/
            ``ValueError`` for a line that is not one of this file's.
        link: for a chained file (the erasure ledger's), a row's line given the line it
            follows in the file (without its newline; None for the first line): used
            instead of ``render`` by every writer, which hands each line it writes to the
            next (None: lines are independent, ``render``).
    """

    fetch: Callable[[int, int], Sequence[R]]
    seq: Callable[[R], int]
    ident: Callable[[R], str]
    render: Callable[[R], bytes]
    key: Callable[[dict[str, Any]], tuple[int, str]]
    link: Callable[[R, bytes | None], bytes] | None = None

    def lines(self, rows: Iterable[R], prev: bytes | None) -> tuple[bytes, bytes | None]:
        """``rows`` rendered after the line ``prev``: (their bytes, the last line written
        without its newline, or ``prev`` when there are none; unlinked: always ``prev``)."""
        if self.link is None:
            return b"".join(self.render(r) for r in rows), prev
        out = []
        for r in rows:
            line = self.link(r, prev)
            out.append(line)
            prev = line.rstrip(b"\n")
        return b"".join(out), prev


@dataclass
class Synced:
    """What :meth:`TenantFiles.sync` did: lines ``written``; ``unmatched`` lines of the
    file with no row in the table (:data:`KEEP`); the side files it made (``set_aside``:
    a stale tail, :data:`SET_ASIDE`; ``torn``: a torn last line)."""

    written: int = 0
    unmatched: int = 0
    set_aside: Path | None = None
    torn: Path | None = None


class _Turn:
    """This process's syncs of one file (:meth:`TenantFiles.sync`): ``lock`` makes them
    take turns; ``started`` counts those that began, ``covered`` is the number of the
    last one that finished."""

    __slots__ = ("covered", "lock", "started")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = 0
        self.covered = 0


_turns: dict[str, _Turn] = {}
_turns_lock = threading.Lock()


def _turn(path: Path) -> _Turn:
    key = os.path.abspath(path)
    turn = _turns.get(key)
    if turn is None:
        with _turns_lock:
            turn = _turns.setdefault(key, _Turn())
    return turn


class TenantFiles:
    """The per-tenant files of one directory (module docstring)."""

    def __init__(self, directory: Path, *, fsync: bool = True, batch: int = BATCH) -> None:
        self.directory = Path(directory)
        self.fsync = fsync
        self.batch = batch

    def path(self, name: str) -> Path:
        """``<dir>/<name>.jsonl``.

        Raises:
            ValidationError: ``name`` is not a safe file name (field ``tenant``).
        """
        if not isinstance(name, str) or not SAFE_NAME.match(name):
            raise ValidationError("tenant: not usable as a file name (a-z, 0-9, '-', '_')",
                                  field="tenant")
        return self.directory / f"{name}.jsonl"

    @contextmanager
    def locked(self, name: str) -> Iterator[Path]:
        """Hold the exclusive lock of ``name``'s file (creating the directory); its path."""
        path = self.path(name)
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(_lock_path(path), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield path

    def append(self, name: str, lines: Iterable[bytes]) -> None:
        """Append ``lines`` (newlines included) to ``name``'s file under its lock."""
        with self.locked(name) as path, open(path, "ab") as out:
            out.write(b"".join(lines))
            self._sync_out(out)

    def sync(self, name: str, table: Table[R], *, ahead: Ahead, shared: bool = False
             ) -> Synced:
        """Append the table's rows the file lacks (module docstring).

        ``shared`` (the after-commit hooks): this process's syncs of one file take turns,
        and a call returns at once, having written nothing, when a sync of the file that
        began after the call did finished: that sync's queries began after every commit
        that preceded this call, so it wrote their rows. Under concurrent writers of one
        tenant this is group commit: one pass (a query, a write, an fsync) for all the
        writers that queued behind it, instead of one each under the file's lock (issue 29:
        under 32 clients, a third of the server's request threads' time was spent queued
        there)."""
        path = self.path(name)
        turn = _turn(path)
        before = turn.started  # syncs of the file that began before this call
        with turn.lock:
            if shared and turn.covered > before:
                return Synced()
            turn.started += 1
            mine = turn.started
            done = self._sync(name, table, ahead=ahead)
            turn.covered = mine  # not reached when the sync failed
        return done

    def _sync(self, name: str, table: Table[R], *, ahead: Ahead) -> Synced:
        with self.locked(name) as path:
            done = Synced(torn=_cut_torn_tail(path, self.fsync))
            after, first, known = self._resume(path, table, ahead, done)
            seen: set[str] = set()
            prev = last_line(path) if table.link is not None else None
            with open(path, "ab") as out:
                for rows in _batches(table, self.batch, after=after, first=first):
                    if known is not None:
                        seen.update(table.ident(r) for r in rows)
                    fresh = [r for r in rows if known is None or table.ident(r) not in known]
                    chunk, prev = table.lines(fresh, prev)
                    out.write(chunk)
                    done.written += len(fresh)
                if done.written:
                    self._sync_out(out)
            if known is not None:
                done.unmatched = len(known - seen)
                if done.unmatched:
                    log.warning("%s: %d lines have no row in the table (the database was "
                                "restored to an earlier state?); kept", path, done.unmatched)
        return done

    def _resume(self, path: Path, table: Table[R], ahead: Ahead, done: Synced
                ) -> tuple[int, tuple[Sequence[R], bool] | None, set[str] | None]:
        """Where appending resumes: the seq to fetch after; the rows already fetched that
        follow it and whether more may follow them (None: none fetched yet); for a file ahead
        of the table kept whole, the idents it holds."""
        raw = last_line(path)
        if raw is None:
            return 0, None, None
        key = _key(table, raw)
        rows = table.fetch(max(key[0] - 1, 0), self.batch) if key else []
        if key and rows and (table.seq(rows[0]), table.ident(rows[0])) == key:
            # a full answer may have more after it: fetch on from its last row
            return key[0], (rows[1:], len(rows) == self.batch), None
        if ahead == KEEP:
            return 0, None, {k[1] for k in _keys(table, path)}
        offset, after = _matching_prefix(path, table, _all_rows(table, self.batch))
        done.set_aside = set_aside(path, offset, "restored", fsync=self.fsync)
        if done.set_aside is not None:
            log.warning("%s: the database is behind this file (restored from a backup?): "
                        "its lines after seq %d moved to %s", path, after, done.set_aside)
        return after, None, None

    def rewrite(self, name: str, table: Table[R]) -> int:
        """Write ``name``'s file again from the table, atomically, under its lock; how many
        lines."""
        with self.locked(name) as path:
            return dump(path, table, batch=self.batch, fsync=self.fsync)

    def remove(self, name: str) -> None:
        """Delete ``name``'s file, its lock file and its side files."""
        path = self.path(name)
        turn = _turn(path)
        with turn.lock:
            turn.covered = 0  # a later sync writes again whatever the table then holds
            for p in (path, *self.directory.glob(f"{path.name}.*")):
                p.unlink(missing_ok=True)

    def side_files(self, name: str) -> list[Path]:
        """``name``'s side files (stale tails set aside, torn lines), oldest first."""
        path = self.path(name)
        return sorted(p for p in self.directory.glob(f"{path.name}.*-*") if p.is_file())

    def _sync_out(self, out: Any) -> None:
        out.flush()
        if self.fsync:
            os.fsync(out.fileno())


class TableFile(Generic[R]):
    """The per-tenant files of one directory kept from one table: a subclass gives
    :meth:`table` (the tenant's rows), :attr:`ahead` (its choice for a file ahead of the
    database) and :attr:`batch`; :meth:`sync` is an after-commit hook."""

    ahead: Ahead = SET_ASIDE
    batch: int = BATCH

    def __init__(self, db: Database, directory: Path) -> None:
        self.db = db
        self.directory = Path(directory)
        self.files = TenantFiles(self.directory, batch=self.batch)

    def table(self, tenant: str) -> Table[R]:
        raise NotImplementedError

    def path(self, tenant: str) -> Path:
        return self.files.path(tenant)

    def sync(self, tenant: str) -> int:
        """Append the tenant's committed rows the file lacks; how many this call wrote (0
        also when a concurrent sync wrote them: ``shared``, :meth:`TenantFiles.sync`)."""
        return self.files.sync(tenant, self.table(tenant), ahead=self.ahead,
                               shared=True).written

    def rewrite(self, tenant: str) -> int:
        """Write the tenant's file again from the table (atomically); how many lines."""
        return self.files.rewrite(tenant, self.table(tenant))

    def remove(self, tenant: str) -> None:
        """Delete the tenant's file, its lock and its side files."""
        self.files.remove(tenant)


def dump(path: Path, table: Table[R], *, batch: int = BATCH, fsync: bool = True) -> int:
    """Write every row of ``table`` to ``path`` atomically (temporary file, fsync, rename,
    directory fsync); how many lines. A ``path`` that exists and is no regular file (a
    device, a pipe) is written in place."""
    n = 0

    def chunks() -> Iterator[bytes]:
        nonlocal n
        prev: bytes | None = None
        for rows in _batches(table, batch):
            n += len(rows)
            chunk, prev = table.lines(rows, prev)
            yield chunk

    write_atomic(path, chunks(), fsync=fsync)
    return n


def write_atomic(path: Path, chunks: Iterable[bytes], *, fsync: bool = True) -> None:
    """Replace ``path`` by ``chunks``: a reader sees the old file or the new one (see
    :func:`dump` for a ``path`` that is no regular file)."""
    path = Path(path)
    if path.exists() and not path.is_file():
        with open(path, "wb") as out:
            for c in chunks:
                out.write(c)
        return
    path = path.resolve()  # a symlink's target is replaced, not the link
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "xb") as out:
            for c in chunks:
                out.write(c)
            out.flush()
            if fsync:
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        _fsync_dir(path.parent)


def last_line(path: Path) -> bytes | None:
    """The file's last complete line, without its newline (None: missing, or no complete
    non-blank line)."""
    if not path.exists():
        return None
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        chunk = 4096
        while size:
            start = max(0, size - chunk)
            f.seek(start)
            data = f.read(size - start)
            end = data.rfind(b"\n")  # a tail after the last newline is not complete
            if end == -1:
                if start == 0:
                    return None
                chunk *= 2
                continue
            body = data[:end]
            nl = body.rfind(b"\n")
            if nl != -1 or start == 0:
                found = body[nl + 1:]
                if found.strip():
                    return found
                size = start + nl + 1 if nl != -1 else 0  # a blank line: look before it
                chunk = 4096
                continue
            chunk *= 2
        return None


def lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """``(line number, byte offset, raw line)`` of each non-blank line, in file order (a
    missing file has none)."""
    if not path.exists():
        return
    with open(path, "rb") as f:
        offset = 0
        for n, raw in enumerate(f, 1):
            if raw.strip():
                yield n, offset, raw
            offset += len(raw)


def set_aside(path: Path, offset: int, reason: str, *, fsync: bool = True) -> Path | None:
    """Move the bytes of ``path`` from ``offset`` on to a new side file
    ``<file>.<reason>-<UTC time>`` (fsynced), then cut ``path`` back to ``offset``; the
    side file (None: nothing after ``offset``). The caller holds the lock."""
    with open(path, "r+b") as f:
        f.seek(offset)
        tail = f.read()
        if not tail:
            return None
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        side = path.with_name(f"{path.name}.{reason}-{stamp}")
        for i in range(1, 1000):
            try:
                with open(side, "xb") as out:
                    out.write(tail)
                    out.flush()
                    if fsync:
                        os.fsync(out.fileno())
                break
            except FileExistsError:
                side = path.with_name(f"{path.name}.{reason}-{stamp}-{i}")
        f.truncate(offset)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
            _fsync_dir(path.parent)
    return side


def _cut_torn_tail(path: Path, fsync: bool) -> Path | None:
    """Set aside what follows the file's last newline (a torn write); the side file."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return None
        start, chunk = size, 4096
        while start > 0:
            start = max(0, start - chunk)
            f.seek(start)
            nl = f.read(min(chunk, size - start)).rfind(b"\n")
            if nl != -1:
                start += nl + 1
                break
    side = set_aside(path, start, "torn", fsync=fsync)
    log.warning("%s: its last line was torn (no newline); moved to %s", path, side)
    return side


def _key(table: Table[Any], raw: bytes) -> tuple[int, str] | None:
    try:
        parsed = orjson.loads(raw)
        if not isinstance(parsed, dict):
            return None
        seq, ident = table.key(parsed)
        return int(seq), str(ident)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def _keys(table: Table[Any], path: Path) -> Iterator[tuple[int, str]]:
    for _n, _offset, raw in lines(path):
        key = _key(table, raw)
        if key is not None:
            yield key


def _batches(table: Table[R], batch: int, *, after: int = 0,
             first: tuple[Sequence[R], bool] | None = None) -> Iterator[Sequence[R]]:
    """The table's rows after seq ``after`` in batches. ``first``: the rows after ``after``
    of a fetch already made (maybe none) and whether more may follow them. A batch shorter
    than ``batch`` is the last (no query to learn that nothing follows)."""
    if first is not None:
        rows, more = first
        if rows:
            yield rows
            after = table.seq(rows[-1])
        if not more:
            return
    while True:
        rows = table.fetch(after, batch)
        if not rows:
            return
        yield rows
        if len(rows) < batch:
            return
        after = table.seq(rows[-1])


def _all_rows(table: Table[R], batch: int) -> Iterator[R]:
    for rows in _batches(table, batch):
        yield from rows


def _matching_prefix(path: Path, table: Table[R], rows: Iterator[R]) -> tuple[int, int]:
    """Where the file stops matching the table: the byte offset of its first line that is
    not the table's row at that line's seq (or does not parse), and the seq of the last
    line before it (0: none)."""
    row = next(rows, None)
    last, end = 0, 0
    for _n, offset, raw in lines(path):
        key = _key(table, raw)
        if key is None:
            return offset, last
        while row is not None and table.seq(row) < key[0]:
            row = next(rows, None)
        if row is None or (table.seq(row), table.ident(row)) != key:
            return offset, last
        last, end = key[0], offset + len(raw)
        row = next(rows, None)
    return end, last


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
