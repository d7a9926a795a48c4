"""Shared machinery of the command line: the consoles, the per-invocation :class:`State`,
opening the vault, error → exit code mapping, JSON output, and helpers used by several
command groups (printing recall hits, importing a conversation file).

Every command module imports from here (and from ``mnemovault`` below the CLI), never from
another command module or from ``mnemovault.cli`` itself. Keep the top-level imports light:
the vault, the embedder and the HTTP API are imported inside functions so that
``mnemovault --help`` stays fast.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from mnemovault.config import Settings
from mnemovault.errors import ConfigError, MnemoError, NotFound, Unavailable, ValidationError
from mnemovault.validation import _ISO_8601, TIME_RULE

out = Console()
err = Console(stderr=True)

EXIT_CODES = {"validation": 2, "not_found": 3, "forbidden": 4, "unauthenticated": 4,
              "conflict": 5, "refused": 5, "unavailable": 6, "config": 7}

# an ISO 8601 time but for a year of five or more digits (year 10000): out of range, which
# is what to say (the ISO 8601 check alone would call it malformed)
_EXTENDED_YEAR = re.compile(r"[+-]?\d{5,}" + _ISO_8601.pattern.removeprefix(r"\d{4}"))


@dataclass
class State:
    settings: Settings


def _state(ctx: typer.Context) -> State:
    return ctx.ensure_object(State)


def _embedded_database_missing(settings: Settings) -> Path | None:
    """The embedded database directory (``<data dir>/pg``, :mod:`mnemovault.store.embedded`)
    when it does not exist yet and ``DATABASE_URL`` is unset, else None."""
    if settings.database_url:
        return None
    pgdata = Path(settings.data_dir).expanduser() / "pg"
    return None if pgdata.is_dir() else pgdata


def _require_database(settings: Settings) -> None:
    """Refuse to go on when the data dir holds no database yet: a command that only reads
    (or changes what exists) must not create an empty one in a mistyped ``--data-dir``.

    Raises:
        ConfigError: no database (CLI exit 7), naming the directory and what creates one.
    """
    pgdata = _embedded_database_missing(settings)
    if pgdata is not None:
        raise ConfigError(
            f"data-dir: no database in {pgdata.parent} (check --data-dir or "
            "MNEMOVAULT_DATA_DIR); commands that write (remember, import, demo, db upgrade), "
            "serve, keys create and mcp --local create one",
            field="data_dir")


@contextmanager
def _vault(ctx: typer.Context, *, create: bool = True,
           reindex: bool = True) -> Iterator[Any]:
    """Open the vault for one command. With ``create=False`` (commands that only read, or
    change what exists) a data dir without a database fails with exit 7 instead of getting
    a new, empty one. The embedder's model is loaded only if the command embeds.
    ``reindex=False``: the open leaves plain lexical terms to the command."""
    import psycopg

    from mnemovault.vault import MemoryVault

    settings = _state(ctx).settings
    if not create:
        _require_database(settings)
    try:
        with err.status("opening the database…"):
            vault = MemoryVault.open(settings, reindex=reindex)
    except (psycopg.Error, OSError) as exc:
        raise Unavailable(f"database: cannot open ({type(exc).__name__}); check DATABASE_URL "
                          "or --data-dir") from None
    try:
        yield vault
    finally:
        vault.close()


def _fail(exc: MnemoError) -> None:
    err.print(f"[bold red]error[/] ({exc.code}): ", Text(exc.message), sep="",
              highlight=False, soft_wrap=True)  # unwrapped: paths and ids stay whole
    raise typer.Exit(EXIT_CODES.get(exc.code, 1))


def _not_found(missing: list[Any], what: str, field: str) -> None:
    """Exit 3 (as the endpoints answer 404) when any of the ids or placeholders a command
    was given does not exist; the others have been handled (like ``rm a missing``)."""
    if missing:
        _fail(NotFound(f"{field}: no {what} " + " ".join(str(m) for m in missing),
                       field=field))


def _confirm(prompt: str) -> bool:
    """Ask yes/no on stderr; end of input (stdin closed or at EOF) or Ctrl-C is a no."""
    try:
        return typer.confirm(prompt, err=True)
    except typer.Abort:
        err.print()  # the prompt left the cursor on its line
        return False


def _plural(n: int, one: str, many: str) -> str:
    """``"1 memory"``, ``"2 memories"``."""
    return f"{n} {one if n == 1 else many}"


def _timestamp(value: str | None, field: str) -> datetime | None:
    """A ``--since``/``--until`` option, parsed by the one timestamp rule of every interface
    (:data:`mnemovault.validation.Timestamp`: ISO 8601, never an epoch number, within
    :data:`~mnemovault.validation.TIME_RULE`); None for None.

    Raises:
        ValidationError: naming ``field`` and the rule (the range rule for an ISO-shaped
            time whose year has more than four digits, e.g. year 10000).
    """
    from pydantic import TypeAdapter
    from pydantic import ValidationError as PydanticValidationError

    from mnemovault.validation import Timestamp, validation_error_from_pydantic

    if value is None:
        return None
    try:
        parsed: datetime = TypeAdapter(Timestamp).validate_python(value)
    except PydanticValidationError as exc:
        if _EXTENDED_YEAR.fullmatch(value.strip()):
            raise ValidationError(f"{field}: {TIME_RULE}", field=field) from None
        raise validation_error_from_pydantic(exc, prefix=field) from None
    return parsed


def _declined() -> None:
    """The user answered no to a confirmation: nothing was done, exit 5 (refused)."""
    err.print("nothing was done", highlight=False)
    raise typer.Exit(EXIT_CODES["refused"])


def _json_default(value: Any) -> str:
    """Times as ISO 8601 (``2026-12-01T11:58:49.096178+00:00``, as the HTTP API writes
    them), anything else (ids, paths) as its string."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, default=_json_default, ensure_ascii=False, indent=2)
                     + "\n")


def _print_hits(hits: list[Any]) -> None:
    """Recall hits as a table (``recall`` and ``demo``)."""
    table = Table(show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    table.add_column("when")
    table.add_column("memory", overflow="fold")
    for i, h in enumerate(hits, 1):
        table.add_row(str(i), f"{h.score:.3f}", h.memory.created_at.strftime("%Y-%m-%d"),
                      Text(h.memory.content))  # Text: "[erased]" is not markup
    out.print(table)


def _import(vault: Any, path: Path, *, scope: str, fmt: str, batch_size: int,
            quiet: bool, skip: int = 0) -> dict[str, Any]:
    """Import a conversation file in batches, with a progress bar (``import`` and ``demo``),
    after its first ``skip`` records.

    Each batch is one transaction. Raises the error of the first batch that fails; when
    earlier batches were committed, the error (same kind) says how many records were and
    how to import the rest (``--skip``), and ``details`` carry ``committed`` and
    ``failed_at`` (1-based record numbers of the file)."""
    from mnemovault.importers import read_file

    plan = read_file(path, default_scope=scope, fmt=fmt)
    items = plan.items[skip:]
    started = time.perf_counter()
    scopes: set[str] = set()
    committed = 0
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeRemainingColumn(), console=err,
                  disable=quiet) as progress:
        task = progress.add_task(f"importing {path.name}", total=len(items))
        for i in range(0, len(items), batch_size):
            batch = items[i : i + batch_size]
            try:
                vault.remember_many(batch, trigger="import")
            except MnemoError as exc:
                if not committed:
                    raise
                raise _stopped(exc, committed=committed, skip=skip, first=skip + i + 1,
                               last=skip + i + len(batch), total=len(plan.items)) from exc
            committed += len(batch)
            scopes.update(b.scope for b in batch)
            progress.advance(task, len(batch))
    elapsed = time.perf_counter() - started
    return {"file": str(path), "format": plan.format, "imported": len(items),
            "skipped": skip, "scopes": len(scopes), "seconds": round(elapsed, 2),
            "per_second": round(len(items) / elapsed, 1) if elapsed else None}


def _stopped(exc: MnemoError, *, committed: int, skip: int, first: int, last: int,
             total: int) -> MnemoError:
    """The error of a failed import batch after ``committed`` records were committed: the
    same kind, saying what stays and how to go on (issue 29 item 8: the batch's own message
    says "nothing was changed", which is true of that batch only)."""
    message = (f"import stopped at records {first}-{last} of {total}: {committed} records "
               f"before them were committed and stay (one transaction per batch); that batch "
               f"was not stored ({exc.message}). To import the rest, fix the record and run "
               f"the import again with --skip {skip + committed}")
    out = type(exc)(message, field=exc.field, **exc.details)
    out.details.update(committed=committed, failed_at=first)
    return out
