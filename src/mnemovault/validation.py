"""The one validation of caller input: every string and timestamp a caller can send passes
these checks, whether it arrives in a pydantic model (HTTP bodies, library batches) or as a
library argument (scopes, subjects, queries, cursors, placeholders), so nothing malformed
reaches the database.

Rules (each error names the field and the rule):

- text (content, queries, chat messages): a ``str``, no NUL, no lone surrogate (it must be
  encodable as UTF-8), at most a per-field number of characters;
- names (scope, subject, key, tags, provenance values, placeholders, cursors): text with no
  control characters either;
- timestamps: timezone-aware (a naive one is taken as UTC) and within
  [:data:`MIN_TIME`, :data:`MAX_TIME`), i.e. 1900-01-01T00:00:00Z to 9999-01-01T00:00:00Z
  exclusive, once converted to UTC (a year-9999 time with a negative offset is year 10000 in
  UTC: refused);
- pydantic's own errors become one :class:`~mnemovault.errors.ValidationError` naming the
  first field (:func:`validation_error_from_pydantic`).

The bottom of the stack (it imports only :mod:`mnemovault.errors` and pydantic), so models,
capabilities and interfaces can all use it.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator
from pydantic import ValidationError as PydanticValidationError

from mnemovault.errors import ValidationError

MIN_TIME = datetime(1900, 1, 1, tzinfo=UTC)
MAX_TIME = datetime(9999, 1, 1, tzinfo=UTC)
TIME_RULE = "must be from 1900-01-01T00:00:00Z up to (not including) 9999-01-01T00:00:00Z"
MAX_NAME_CHARS = 200
MAX_QUERY_CHARS = 10_000


def text_rule(value: Any, *, max_len: int, allow_newlines: bool = True) -> str | None:
    """Why ``value`` is not acceptable caller text (None when it is)."""
    if not isinstance(value, str):
        return "must be a string"
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (no lone surrogates)"
    if not allow_newlines and any(ord(c) < 32 or ord(c) == 127 for c in value):
        return "must not contain control characters"
    if len(value) > max_len:
        return f"must be at most {max_len} characters"
    return None


def check_text(value: str, *, max_len: int, allow_newlines: bool = True) -> str:
    """``value`` if it is acceptable text; else ``ValueError`` with the rule (for pydantic
    validators, which add the field)."""
    rule = text_rule(value, max_len=max_len, allow_newlines=allow_newlines)
    if rule is not None:
        raise ValueError(rule)
    return value


def _non_blank(value: Any, field: str, *, max_len: int, allow_newlines: bool) -> str:
    rule = text_rule(value, max_len=max_len, allow_newlines=allow_newlines)
    if rule is None and not value.strip():
        rule = "must not be blank"
    if rule is not None:
        raise ValidationError(f"{field}: {rule}", field=field)
    return str(value)


def name(value: Any, field: str, *, max_len: int = MAX_NAME_CHARS) -> str:
    """A library name argument (scope, subject, cursor, placeholder): non-blank text
    without control characters.

    Raises:
        ValidationError: names ``field`` and the rule.
    """
    return _non_blank(value, field, max_len=max_len, allow_newlines=False)


def query(value: Any, field: str = "query", *, max_len: int = MAX_QUERY_CHARS) -> str:
    """A query (recall, forget): non-blank text (newlines allowed).

    Raises:
        ValidationError: names ``field`` and the rule.
    """
    return _non_blank(value, field, max_len=max_len, allow_newlines=True)


def optional_name(value: Any, field: str, *, max_len: int = MAX_NAME_CHARS) -> str | None:
    """:func:`name`, or None for None."""
    return None if value is None else name(value, field, max_len=max_len)


def check_time(value: datetime | None) -> datetime | None:
    """``value`` timezone-aware (naive: UTC) and in range; else ``ValueError`` with the
    rule (for pydantic validators)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        raise ValueError(TIME_RULE) from None
    if not MIN_TIME <= utc < MAX_TIME:
        raise ValueError(TIME_RULE)
    return value


def validation_error_from_pydantic(
    exc: PydanticValidationError, prefix: str = ""
) -> ValidationError:
    """Turn pydantic's error list into one :class:`ValidationError` naming the first field."""
    errors = exc.errors()
    first = errors[0]
    loc = ".".join(str(p) for p in (prefix, *first["loc"]) if p != "")
    msg = first["msg"].removeprefix("Value error, ")
    return ValidationError(f"{loc or 'body'}: {msg}", field=loc or None,
                           errors=[{"field": ".".join(str(p) for p in e["loc"]),
                                    "rule": e["msg"].removeprefix("Value error, ")}
                                   for e in errors])


def parse_id(value: uuid.UUID | str, field: str) -> uuid.UUID:
    """``value`` as a UUID.

    Raises:
        ValidationError: ``field``: must be a UUID.
    """
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except (ValueError, AttributeError, TypeError):
        raise ValidationError(f"{field}: must be a UUID", field=field) from None


_ISO_8601 = re.compile(r"\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?"
                       r"([Zz]|[+-]\d{2}:?\d{2})?)?")


def _iso_only(value: Any) -> Any:
    """Timestamps are ISO 8601 (RFC 3339) strings or datetimes, never numbers (pydantic
    would otherwise read ``0`` as the Unix epoch)."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and _ISO_8601.fullmatch(value.strip()):
        return value
    raise ValueError("must be an ISO 8601 timestamp such as 2024-05-01T12:00:00Z")


Timestamp = Annotated[datetime, BeforeValidator(_iso_only), AfterValidator(check_time)]
"""A caller-supplied timestamp: ISO 8601, timezone-aware (naive: UTC), within the range."""
