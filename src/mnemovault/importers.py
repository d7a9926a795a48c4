"""Readers that turn conversation files into :class:`MemoryInput` items.

Formats:

- **LoCoMo** (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
  Agents", ACL 2024): a JSON list of samples, each with ``sample_id`` and a ``conversation``
  holding ``session_<n>`` turn lists and ``session_<n>_date_time`` strings such as
  ``"1:56 pm on 8 May, 2023"``. Every turn becomes an episode: content ``"speaker: text"``
  (plus ``[image: caption]`` when the turn shares an image), scope = sample id, subject =
  speaker, ``dia_id`` and ``session`` in provenance, ``run_id`` = ``"<sample id>/session_<n>"``
  (the conversation recall's context stage links turns within, :mod:`mnemovault.store.
  neighbours`), the session's date as creation time.
- **JSON Lines**: one object a line, ``{"text", "subject"?, "scope"?, "timestamp"?,
  "source_id"?, "run_id"?}``; ``timestamp`` is ISO 8601; ``run_id`` names the
  conversation the record was said in (records of one ``run_id`` are its turns, in file
  order); any other field is refused (errors name ``line N`` and the field).
- **JSON**: one JSON document (pretty-printed or not) holding one such record object or an
  array of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from mnemovault.errors import ValidationError
from mnemovault.models import Entity, MemoryInput, Provenance

_SESSION_RE = re.compile(r"^session_(\d+)$")

RECORD_FIELDS = ("text", "subject", "scope", "timestamp", "source_id", "run_id")
"""The fields of a JSON Lines / JSON record; any other is refused (a typo such as
``timestmap`` would otherwise be dropped and the record dated now)."""


@dataclass
class ImportPlan:
    """What a file holds: the detected format, its items (validated) and where each item is
    in the file (``where[i]``: ``"line 3"``, ``"[2]"``, ``"conv-26 D1:3"``), for reports
    that must name a record without quoting it."""

    format: str
    items: list[MemoryInput]
    where: list[str] = field(default_factory=list)


def parse_locomo_datetime(text: str) -> datetime:
    """Parse LoCoMo's ``"1:56 pm on 8 May, 2023"`` as UTC.

    Raises:
        ValueError: any other shape.
    """
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def locomo_items(data: Any, source: str = "locomo",
                 force_scope: str | None = None) -> Iterator[tuple[str, MemoryInput]]:
    """Yield (where, episode) per LoCoMo turn, sessions in order; the scope is the sample
    id, or ``force_scope``."""
    if not isinstance(data, list):
        raise ValidationError("file: a LoCoMo file is a JSON list of samples", field="file")
    for si, sample in enumerate(data):
        try:
            sample_id = str(sample["sample_id"])
            conv = sample["conversation"]
        except (KeyError, TypeError):
            raise ValidationError(f"file: sample {si} lacks sample_id or conversation",
                                  field=f"[{si}]") from None
        # the speakers' names are personal values: pseudonymised wherever they appear
        speakers = [Entity(kind="person", value=str(conv[k]))
                    for k in ("speaker_a", "speaker_b") if conv.get(k)]
        sessions = sorted(
            (int(m.group(1)), key) for key in conv if (m := _SESSION_RE.match(key))
        )
        for n, key in sessions:
            stamp = conv.get(f"{key}_date_time")
            try:
                created = parse_locomo_datetime(stamp) if stamp else None
            except ValueError:
                raise ValidationError(
                    f"file: {sample_id} {key}_date_time is not like '1:56 pm on 8 May, 2023'",
                    field=f"{key}_date_time") from None
            for turn in conv[key] or []:
                content = f"{turn['speaker']}: {turn['text']}"
                caption = turn.get("blip_caption")
                if caption:
                    content += f" [image: {caption}]"
                yield f"{sample_id} {turn['dia_id']}", MemoryInput(
                    content=content,
                    scope=force_scope or sample_id,
                    subject=turn["speaker"],
                    type="episode",
                    created_at=created,
                    entities=speakers,
                    provenance=Provenance.model_validate(
                        {"source": source, "source_id": turn["dia_id"],
                         "dia_id": turn["dia_id"], "session": n,
                         "run_id": f"{sample_id}/{key}"}),
                )


def record_item(rec: Any, where: str, default_scope: str, source: str,
                force_scope: str | None = None) -> MemoryInput:
    """One record ``{text, subject?, scope?, timestamp?, source_id?, run_id?}`` as an episode;
    ``where`` names it in errors (``"line 3"``, ``"[2]"``). Its scope: ``force_scope`` if
    given, else the record's, else ``default_scope``.

    Raises:
        ValidationError: naming ``where`` and the field.
    """
    if not isinstance(rec, dict):
        raise ValidationError(f'{where}: expected a JSON object with a "text" field, got '
                              f"{_json_kind(rec)}", field=where)
    if "text" not in rec:
        raise ValidationError(f"{where}: text: field required", field=f"{where}.text")
    unknown = [f for f in rec if f not in RECORD_FIELDS]
    if unknown:
        raise ValidationError(f"{where}: {unknown[0]}: unknown field (a record has "
                              f"{', '.join(RECORD_FIELDS)})", field=f"{where}.{unknown[0]}")
    ts = rec.get("timestamp")
    try:
        created = datetime.fromisoformat(ts) if ts else None
    except (TypeError, ValueError):
        raise ValidationError(f"{where}: timestamp: must be ISO 8601",
                              field=f"{where}.timestamp") from None
    prov: dict[str, Any] = {"source": source}
    if rec.get("source_id") is not None:
        prov["source_id"] = str(rec["source_id"])
    if rec.get("run_id") is not None:
        prov["run_id"] = str(rec["run_id"])
    try:
        return MemoryInput(content=rec["text"],
                           scope=force_scope or rec.get("scope") or default_scope,
                           subject=rec.get("subject"), created_at=created,
                           provenance=Provenance.model_validate(prov))
    except PydanticValidationError as exc:
        e = exc.errors()[0]
        field = ".".join(str(p) for p in e["loc"])
        raise ValidationError(
            f"{where}: {field}: {e['msg'].removeprefix('Value error, ')}",
            field=f"{where}.{field}") from None


def _json_kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def jsonl_items(lines: Iterator[str], default_scope: str, source: str,
                force_scope: str | None = None) -> Iterator[tuple[str, MemoryInput]]:
    """Yield (``"line N"``, episode) per JSON Lines record ``{text, subject?, scope?, timestamp?,
    source_id?}``. Blank lines are skipped.

    Raises:
        ValidationError: naming the line number and the field.
    """
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"line {lineno}: not valid JSON ({exc.msg})",
                                  field=f"line {lineno}") from None
        where = f"line {lineno}"
        yield where, record_item(rec, where, default_scope, source, force_scope)


def json_items(data: Any, default_scope: str, source: str, *, single: str = "[0]",
               force_scope: str | None = None) -> Iterator[tuple[str, MemoryInput]]:
    """Yield (where, episode) for the records of a JSON document: one record object, or an
    array of them (the JSON Lines record shape); errors name the array index
    (``[2].text``), or ``single`` for a lone object (``"line 1"`` when the file is one
    JSON Lines record)."""
    if isinstance(data, dict):
        yield single, record_item(data, single, default_scope, source, force_scope)
        return
    if not isinstance(data, list):
        raise ValidationError(f"file: expected a JSON object or an array of objects, got "
                              f"{_json_kind(data)}", field="file")
    for i, rec in enumerate(data):
        yield f"[{i}]", record_item(rec, f"[{i}]", default_scope, source, force_scope)


def _is_locomo(data: Any) -> bool:
    """A LoCoMo file: an array of samples (or one sample) with a ``conversation``."""
    first = data[0] if isinstance(data, list) and data else data
    return isinstance(first, dict) and "conversation" in first and "text" not in first


EXPECTED = ("JSON Lines (one object a line: {\"text\", \"subject\"?, \"scope\"?, "
            "\"timestamp\"?, \"source_id\"?}), a JSON document holding one such object or "
            "an array of them, or a LoCoMo file")


def _plan(fmt: str, pairs: Iterator[tuple[str, MemoryInput]]) -> ImportPlan:
    where: list[str] = []
    items: list[MemoryInput] = []
    for w, item in pairs:
        where.append(w)
        items.append(item)
    return ImportPlan(fmt, items, where)


def read_file(path: Path, *, default_scope: str = "default", fmt: str = "auto",
              force_scope: str | None = None) -> ImportPlan:
    """Read a conversation file (``fmt`` = auto, jsonl, json or locomo):

    - ``jsonl``: JSON Lines, one record a line;
    - ``json``: one JSON document, a record object or an array of records (pretty-printed
      or not);
    - ``locomo``: a LoCoMo file (a JSON array of samples; one sample object works too).

    ``auto`` reads the file as one JSON document first: an array (or object) of LoCoMo
    samples is ``locomo``, of records ``json`` (a one-line file holding one record is
    reported as ``jsonl``); a file that is not one JSON document is read as JSON Lines.

    A record's scope is its own, else ``default_scope``; ``force_scope`` overrides both
    (and a LoCoMo sample's id).

    Raises:
        ValidationError: unreadable file, a bad record (names the line, index or sample),
            or a file that is none of these (the message says what it got and what is
            expected).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"file: cannot read {path.name} as UTF-8 ({type(exc).__name__})",
                              field="file") from None
    if fmt not in ("auto", "jsonl", "json", "locomo"):
        raise ValidationError("format: must be auto, jsonl, json or locomo", field="format")
    source = path.name
    if fmt == "jsonl":
        return _plan("jsonl", jsonl_items(iter(text.splitlines()), default_scope, source,
                                          force_scope))
    stripped = text.strip()
    try:
        data = json.loads(stripped) if stripped else None
        doc_error = None if stripped else "the file is empty"
    except json.JSONDecodeError as exc:
        data, doc_error = None, f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    if fmt == "auto" and doc_error is not None:
        if not stripped:
            raise ValidationError(f"file: {path.name} is empty; expected {EXPECTED}",
                                  field="file")
        try:
            return _plan("jsonl", jsonl_items(iter(text.splitlines()), default_scope,
                                              source, force_scope))
        except ValidationError as exc:
            # a document that starts like JSON but is neither: say both readings failed
            if stripped[0] in "[{" and "\n" in stripped and exc.field == "line 1":
                raise ValidationError(
                    f"file: {path.name} is neither one JSON document ({doc_error}) nor JSON "
                    f"Lines ({exc.message}); expected {EXPECTED}", field="file") from None
            raise
    if doc_error is not None:
        raise ValidationError(f"file: not valid JSON ({doc_error}); expected {EXPECTED}",
                              field="file")
    if fmt == "locomo" or (fmt == "auto" and _is_locomo(data)):
        samples = [data] if isinstance(data, dict) else data
        return _plan("locomo", locomo_items(samples, source="locomo",
                                            force_scope=force_scope))
    one_line = fmt == "auto" and isinstance(data, dict) and "\n" not in stripped
    # a one-line file of one record is JSON Lines: its errors name the line, as JSON
    # Lines errors do
    single = (f"line {next(n for n, line in enumerate(text.splitlines(), 1) if line.strip())}"
              if one_line else "[0]")
    return _plan("jsonl" if one_line else "json",
                 json_items(data, default_scope, source, single=single,
                            force_scope=force_scope))
