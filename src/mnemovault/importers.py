"""Readers that turn conversation files into :class:`MemoryInput` items.

Formats:

- **LoCoMo** (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
  Agents", ACL 2024): a JSON list of samples, each with ``sample_id`` and a ``conversation``
  holding ``session_<n>`` turn lists and ``session_<n>_date_time`` strings such as
  ``"1:56 pm on 8 May, 2023"``. Every turn becomes an episode: content ``"speaker: text"``
  (plus ``[image: caption]`` when the turn shares an image), scope = sample id, subject =
  speaker, ``dia_id`` in provenance, the session's date as creation time.
- **JSON Lines**: one object a line, ``{"text", "subject"?, "scope"?, "timestamp"?,
  "source_id"?}``; ``timestamp`` is ISO 8601.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from mnemovault.errors import ValidationError
from mnemovault.models import Entity, MemoryInput, Provenance

_SESSION_RE = re.compile(r"^session_(\d+)$")


@dataclass
class ImportPlan:
    """What a file holds: the detected format and its items (validated)."""

    format: str
    items: list[MemoryInput]


def parse_locomo_datetime(text: str) -> datetime:
    """Parse LoCoMo's ``"1:56 pm on 8 May, 2023"`` as UTC.

    Raises:
        ValueError: any other shape.
    """
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def locomo_items(data: Any, source: str = "locomo") -> Iterator[MemoryInput]:
    """Yield one episode per LoCoMo turn, sessions in order."""
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
                yield MemoryInput(
                    content=content,
                    scope=sample_id,
                    subject=turn["speaker"],
                    type="episode",
                    created_at=created,
                    entities=speakers,
                    provenance=Provenance.model_validate(
                        {"source": source, "source_id": turn["dia_id"],
                         "dia_id": turn["dia_id"], "session": n}),
                )


def jsonl_items(lines: Iterator[str], default_scope: str, source: str) -> Iterator[MemoryInput]:
    """Yield one episode per JSON Lines record ``{text, subject?, scope?, timestamp?,
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
        if not isinstance(rec, dict) or "text" not in rec:
            raise ValidationError(f"line {lineno}: text: field required",
                                  field=f"line {lineno}.text")
        ts = rec.get("timestamp")
        try:
            created = datetime.fromisoformat(ts) if ts else None
        except (TypeError, ValueError):
            raise ValidationError(f"line {lineno}: timestamp: must be ISO 8601",
                                  field=f"line {lineno}.timestamp") from None
        prov: dict[str, Any] = {"source": source}
        if rec.get("source_id") is not None:
            prov["source_id"] = str(rec["source_id"])
        try:
            yield MemoryInput(content=rec["text"], scope=rec.get("scope") or default_scope,
                              subject=rec.get("subject"), created_at=created,
                              provenance=Provenance.model_validate(prov))
        except PydanticValidationError as exc:
            e = exc.errors()[0]
            field = ".".join(str(p) for p in e["loc"])
            raise ValidationError(
                f"line {lineno}: {field}: {e['msg'].removeprefix('Value error, ')}",
                field=f"line {lineno}.{field}") from None


def read_file(path: Path, *, default_scope: str = "default", fmt: str = "auto") -> ImportPlan:
    """Read a LoCoMo JSON file or a JSON Lines file (``fmt`` = auto, locomo or jsonl).

    Raises:
        ValidationError: unreadable file or a bad record (names the line or sample).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"file: cannot read {path.name} as UTF-8 ({type(exc).__name__})",
                              field="file") from None
    if fmt == "auto":
        fmt = "locomo" if text.lstrip().startswith("[") else "jsonl"
    source = path.name
    if fmt == "locomo":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"file: not valid JSON ({exc.msg} at line {exc.lineno})",
                                  field="file") from None
        return ImportPlan("locomo", list(locomo_items(data, source="locomo")))
    if fmt == "jsonl":
        return ImportPlan("jsonl", list(jsonl_items(iter(text.splitlines()), default_scope,
                                                     source)))
    raise ValidationError("format: must be auto, locomo or jsonl", field="format")
