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

from mnemovault.cli._remote import EXIT_CODES, stdout_console
from mnemovault.config import Settings
from mnemovault.errors import ConfigError, MnemoError, NotFound, Unavailable, ValidationError
from mnemovault.validation import _ISO_8601, TIME_RULE

out = stdout_console()
err = Console(stderr=True)

# every command's --json says the same
JSON_HELP = "Print JSON on stdout (progress and errors go to stderr)."


# an ISO 8601 time but for a year of five or more digits (year 10000): out of range, which
# is what to say (the ISO 8601 check alone would call it malformed)
_EXTENDED_YEAR = re.compile(r"[+-]?\d{5,}" + _ISO_8601.pattern.removeprefix(r"\d{4}"))


@dataclass
class State:
    settings: Settings


_GIVEN: list[str] = []  # the global options of this invocation, as given (for hints)


def _given_globals(options: list[str]) -> None:
    """Record the global options this invocation was given (the root callback does)."""
    _GIVEN[:] = options


def _hint(command: str) -> str:
    """``mnemovault <the global options given> <command>``: a command a hint prints, which
    acts on the same data dir and tenant when pasted (issue 28 item 8)."""
    import shlex

    return " ".join(["mnemovault", *(shlex.quote(o) for o in _GIVEN), command])


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
           reindex: bool = True, embeds: bool = False) -> Iterator[Any]:
    """Open the vault for one command. With ``create=False`` (commands that only read, or
    change what exists) a data dir without a database fails with exit 7 instead of getting
    a new, empty one. The embedder's model is loaded only if the command embeds; with
    ``embeds=True`` it is loaded as a step of its own (:func:`_load_model`).
    ``reindex=False``: the open leaves plain lexical terms to the command."""
    import psycopg

    from mnemovault.vault import MemoryVault

    settings = _state(ctx).settings
    if not create:
        _require_database(settings)
    try:
        with err.status("opening the database…"):
            vault = MemoryVault.open(settings, reindex=reindex)
    except psycopg.Error as exc:
        raise Unavailable(f"database: cannot open ({type(exc).__name__}); check DATABASE_URL "
                          "or --data-dir") from None
    except OSError as exc:
        raise _os_error(exc, settings) from None
    try:
        if embeds:
            _load_model(vault)
        yield vault
    finally:
        vault.close()


def _os_error(exc: OSError, settings: Settings) -> MnemoError:
    """An operating-system error opening the vault, naming its cause: a read-only or full
    data dir (or key file, log) says so and where; anything else names the file."""
    import errno

    where = exc.filename or Path(settings.data_dir).expanduser()
    if exc.errno == errno.ENOSPC:
        return Unavailable(f"data-dir: no space left on the device of {where}; free some "
                           "and run the command again (nothing was changed)", field="data_dir")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return ConfigError(f"data-dir: {where} cannot be written ({exc.strerror}); the data "
                           "dir (--data-dir or MNEMOVAULT_DATA_DIR) must be writable by this "
                           "user", field="data_dir")
    return Unavailable(f"data-dir: cannot open {where} ({exc.strerror or type(exc).__name__});"
                       " check --data-dir or MNEMOVAULT_DATA_DIR", field="data_dir")


def _load_model(vault: Any, *, quiet: bool = False) -> float:
    """Load the embedding model now, as its own step (a status line, then its time on
    stderr), so that what follows is timed without it. Returns the seconds it took (0 when
    it was loaded already or is remote)."""
    from mnemovault.embed import LazyEmbedder
    from mnemovault.embed.view import ViewEmbedder

    inner = vault.embedder
    while isinstance(inner, ViewEmbedder):
        inner = inner.inner
    if not isinstance(inner, LazyEmbedder) or inner.loaded:
        return 0.0
    started = time.perf_counter()
    with err.status(f"loading the embedding model {inner.model}…"):
        inner.load()
    seconds = time.perf_counter() - started
    if not quiet:
        err.print(f"loaded the embedding model in {seconds:.1f} s", highlight=False)
    return seconds


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
    """Recall hits as a table (``recall`` and ``demo``); no hits: a sentence saying so,
    not an empty table."""
    if not hits:
        out.print("no memory matches (nothing to show)", highlight=False)
        return
    table = Table(show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    table.add_column("when")
    table.add_column("memory", overflow="fold")
    for i, h in enumerate(hits, 1):
        table.add_row(str(i), f"{h.score:.3f}", h.memory.created_at.strftime("%Y-%m-%d"),
                      Text(h.memory.content))  # Text: "[erased]" is not markup
    out.print(table)


def _read_import(path: Path, *, scope: str, force_scope: str | None,
                 fmt: str) -> Any:
    """The file's :class:`~mnemovault.importers.ImportPlan` (read before the vault is
    opened, so a bad file is refused at once)."""
    from mnemovault.importers import read_file

    return read_file(path, default_scope=scope, fmt=fmt, force_scope=force_scope)


def _import(vault: Any, plan: Any, path: Path, *, batch_size: int, quiet: bool,
            skip: int = 0, all_or_nothing: bool = False) -> dict[str, Any]:
    """Import a read file (``plan``) in batches, with a progress bar (``import`` and
    ``demo``), after its first ``skip`` records.

    * The model is loaded first, as a step of its own: ``seconds`` and ``per_second`` time
      the import alone, ``model_seconds`` the load.
    * A record whose ``source_id`` is stored already in its scope (or came earlier in the
      file) is skipped and counted (``already_stored``): an import run again, or after an
      interruption, stores only what is missing.
    * A record the capture guard refuses is left out and listed in ``refused`` (its place
      in the file and the detector, never its text); the other records of its batch are
      stored. With ``all_or_nothing`` the whole import is one transaction: any refusal (or
      error) stores nothing.

    Each batch is one transaction, governed and audited as any write. Raises the error of
    the first batch that fails; when earlier batches were committed, the error (same
    kind) says how many and how to go on, and ``details`` carry ``committed`` and
    ``failed_at`` (1-based record numbers of the file)."""
    from mnemovault.errors import Refused

    started = time.perf_counter()
    todo: list[tuple[str, Any, int]] = []  # (where, item, 1-based record number)
    already = 0
    pairs = list(zip(plan.where, plan.items, strict=True))[skip:]
    with_ids = sorted({item.scope for _, item in pairs if item.provenance.source_id})
    stored = vault.stored_source_ids(with_ids) if with_ids else {}
    for n, (where, item) in enumerate(pairs, start=skip + 1):
        sid = item.provenance.source_id
        if sid is not None:
            seen = stored.setdefault(item.scope, set())
            if sid in seen:
                already += 1
                continue
            seen.add(sid)
        todo.append((where, item, n))
    # the model only when something is left to embed (an import run again loads nothing),
    # and outside the import's own time
    model_seconds = _load_model(vault, quiet=quiet) if todo else 0.0
    started += model_seconds
    refused: list[dict[str, Any]] = []
    scopes: dict[str, int] = {}
    committed = 0
    size = max(len(todo), 1) if all_or_nothing else batch_size
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeRemainingColumn(), console=err,
                  disable=quiet) as progress:
        task = progress.add_task(f"importing {path.name}", total=len(todo))
        for i in range(0, len(todo), size):
            batch = todo[i : i + size]
            while batch:
                try:
                    vault.remember_many([item for _, item, _ in batch], trigger="import")
                    break
                except Refused as exc:
                    out_ = _refused_records(exc, batch)
                    if out_ is None or all_or_nothing:
                        if all_or_nothing and out_ is not None:
                            raise Refused(
                                f"import refused (--all-or-nothing): the capture guard "
                                f"refused {_where_list(out_)}; nothing was stored",
                                field=exc.field, refused=out_) from None
                        raise
                    refused.extend(out_)
                    gone = {r["record"] for r in out_}
                    batch = [b for b in batch if b[0] not in gone]
                    progress.advance(task, len(out_))
                except MnemoError as exc:
                    if not committed:
                        raise
                    raise _stopped(exc, committed=committed, first=batch[0][2],
                                   last=batch[-1][2], total=len(plan.items)) from exc
            committed += len(batch)
            for _, item, _ in batch:
                scopes[item.scope] = scopes.get(item.scope, 0) + 1
            progress.advance(task, len(batch))
    if committed:  # the import's last BM25 statistics' deltas into the base rows, so
        # that recalls after it read no delta it left (a fold never raises)
        vault.db.fold_lexical(vault.principal().tenant, sorted(scopes))
    elapsed = time.perf_counter() - started
    return {"file": str(path), "format": plan.format, "records": len(plan.items),
            "imported": committed, "already_stored": already, "refused": refused,
            "skipped": skip, "scopes": dict(sorted(scopes.items())),
            "seconds": round(elapsed, 2),
            "per_second": round(committed / elapsed, 1) if elapsed else None,
            "model_seconds": round(model_seconds, 2)}


def _refused_records(exc: MnemoError, batch: list[tuple[str, Any, int]]
                     ) -> list[dict[str, Any]] | None:
    """The records of ``batch`` the guard's refusal names (``items.<i>.<field>`` in its
    findings; a batch of one: its record), as ``{record, field, detector, kind,
    severity}``; None when it names none (then the error stands)."""
    found: dict[int, dict[str, Any]] = {}
    for f in exc.details.get("findings") or [{"field": exc.field, **exc.details}]:
        field = str(f.get("field") or "")
        if field.startswith("items."):
            head, _, rest = field.removeprefix("items.").partition(".")
            if not head.isdigit():
                continue
            n, field = int(head), rest
        elif len(batch) == 1:
            n = 0
        else:
            continue
        if n < len(batch) and n not in found:
            found[n] = {"record": batch[n][0], "field": field, "detector": f.get("detector"),
                        "kind": f.get("kind"), "severity": f.get("severity")}
    return [found[n] for n in sorted(found)] or None


def _where_list(refused: list[dict[str, Any]]) -> str:
    return ", ".join(f"{r['record']} (detector {r['detector']})" for r in refused)


def _stopped(exc: MnemoError, *, committed: int, first: int, last: int,
             total: int) -> MnemoError:
    """The error of a failed import batch after ``committed`` records were committed: the
    same kind, saying what stays and how to go on (issue 29 item 8: the batch's own message
    says "nothing was changed", which is true of that batch only)."""
    message = (f"import stopped at records {first}-{last} of {total}: {committed} records "
               f"before them were committed and stay (one transaction per batch); that batch "
               f"was not stored ({exc.message}). Fix the record and run the same import "
               f"again: records with a source_id stored already are skipped (for records "
               f"without one, add --skip {first - 1})")
    out = type(exc)(message, field=exc.field, **exc.details)
    out.details.update(committed=committed, failed_at=first)
    return out


def _log_config() -> dict[str, Any]:
    """uvicorn's logging configuration plus mnemovault's loggers (INFO, to stderr): the
    access lines of :mod:`mnemovault.api.edge` and every error line, which carry ids,
    route templates and placeholders only."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["mnemovault"] = {"handlers": ["default"], "level": "INFO",
                                       "propagate": False}
    return config
