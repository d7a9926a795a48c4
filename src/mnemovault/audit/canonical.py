"""Canonical JSON for audit rows: one byte string per value, checked on write and on read.

The audit chain (SPEC section 6) hashes bytes, so every row must have exactly one
serialisation. This module fixes it:

* object keys sorted by code point (orjson ``OPT_SORT_KEYS``), keys are strings;
* separators ``,`` and ``:`` with no whitespace anywhere;
* UTF-8 output, non-ASCII characters written as themselves (no ``\\uXXXX`` escapes
  except the ones JSON requires for control characters, ``"`` and ``\\``);
* no NaN or infinities;
* integers within the I-JSON safe range ``-(2**53 - 1) .. 2**53 - 1`` (RFC 7493
  section 2.2; orjson ``OPT_STRICT_INTEGER``), so every reader, JavaScript included,
  sees the same number; a larger one is refused at write with :class:`CanonicalFormError`
  naming the key path;
* floats in orjson's shortest round-trip form (for example ``0.1``, ``1e-7``,
  ``-0.0``), which parses back to the same double and re-serialises to the same bytes.

This is a fixed profile of JSON, not RFC 8785 (JCS): JCS sorts keys by UTF-16 code
units and writes floats the ECMAScript way. The two agree on the ASCII-keyed rows the
audit log writes, but the profile here is the contract: ``canonical_json`` defines it.

Reading back (:func:`parse_canonical_line`) uses the cheap, exact test "parse, then
re-serialise canonically and compare the bytes". It is complete because:

* a byte order mark or an invalid token makes the parser fail;
* any whitespace, CR (``\\r``) included, is dropped by re-serialisation, so the bytes differ;
* unsorted keys, escaped non-ASCII, other number spellings (``1E5``, ``1.0e0``) are
  rewritten, so the bytes differ;
* a duplicate key: orjson keeps the last value, so the re-serialised object has one
  member fewer than the line and is strictly shorter;
* an integer beyond the safe range makes re-serialisation raise.

Only when that test fails is the slower diagnosis run (:func:`diagnose_line`), which
says *why* with a message a person can act on.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

import orjson

__all__ = [
    "MAX_SAFE_INTEGER",
    "ORJSON_OPTIONS",
    "CanonicalFormError",
    "canonical_json",
    "diagnose_line",
    "is_canonical",
    "parse_canonical_line",
]

#: Largest integer magnitude allowed in a canonical document (2**53 - 1; RFC 7493 2.2).
MAX_SAFE_INTEGER: Final[int] = 2**53 - 1

#: orjson options that define the canonical form (sorted keys, 53-bit integers).
ORJSON_OPTIONS: Final[int] = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER

_BOM: Final[bytes] = b"\xef\xbb\xbf"
_dumps = orjson.dumps
_loads = orjson.loads


class CanonicalFormError(ValueError):
    """A value cannot be written in, or a line is not in, the canonical JSON form.

    ``path`` is a JSONPath-like location (``$.details.count``, ``$.memory_ids[2]``) when
    the problem is inside the value, else ``"$"``.
    """

    def __init__(self, message: str, path: str = "$") -> None:
        super().__init__(message)
        self.path = path


def _key_path(path: str, key: str) -> str:
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _check_value(obj: object, path: str) -> None:
    """Walk ``obj`` and raise :class:`CanonicalFormError` at the first value JSON can't hold.

    Allowed: dict with str keys, list, tuple (written as a list), str, bool, None,
    int within the safe range, finite float.
    """
    if obj is None or obj is True or obj is False:
        return
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CanonicalFormError(
                f"string at {path} is not valid Unicode (lone surrogate at index {exc.start})",
                path,
            ) from None
        return
    if isinstance(obj, int):
        if not -MAX_SAFE_INTEGER <= obj <= MAX_SAFE_INTEGER:
            raise CanonicalFormError(
                f"integer at {path} is outside the canonical range ±(2**53 - 1): {obj}; "
                "store it as a string",
                path,
            )
        return
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise CanonicalFormError(
                f"float at {path} is {obj!r}; NaN and infinities are not allowed", path
            )
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str):
                raise CanonicalFormError(
                    f"object key {key!r} at {path} is a {type(key).__name__}; keys must be str",
                    path,
                )
            _check_value(value, _key_path(path, key))
        return
    if isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            _check_value(value, f"{path}[{i}]")
        return
    raise CanonicalFormError(
        f"value at {path} has type {type(obj).__name__}, which has no canonical JSON form; "
        "convert it to str, int, float, bool, None, list or dict first",
        path,
    )


def canonical_json(obj: Any) -> bytes:
    """Serialise ``obj`` to its canonical JSON bytes (no trailing newline).

    Args:
        obj: a JSON value made of dict (str keys), list/tuple, str, int, float, bool, None.

    Returns:
        UTF-8 bytes: sorted keys, ``,``/``:`` separators, no whitespace, non-ASCII unescaped.

    Raises:
        CanonicalFormError: a NaN/infinite float, an integer beyond ±(2**53 - 1), a non-str
            key, a lone surrogate or an unsupported type; the message names the key path
            (for example ``$.details.count``).
    """
    # Fast path: orjson already refuses big integers, non-str keys and lone surrogates.
    # What it would let through (NaN/inf written as null, datetime/UUID/dataclass/enum
    # written as strings or objects) does not read back equal, and tuples read back as
    # lists: all of those take the slow path, which names the offending path.
    try:
        out = _dumps(obj, option=ORJSON_OPTIONS)
        if _loads(out) == obj:
            return out
    except (orjson.JSONEncodeError, orjson.JSONDecodeError):
        pass
    _check_value(obj, "$")
    try:
        return _dumps(obj, option=ORJSON_OPTIONS)
    except orjson.JSONEncodeError as exc:  # pragma: no cover - _check_value covers these
        raise CanonicalFormError(f"cannot serialise canonically: {exc}") from None


def is_canonical(line: bytes) -> bool:
    """True when ``line`` (no newline) parses as a JSON object and equals its canonical form.

    This is the fast test used on read (see the module docstring for why it is complete).
    """
    try:
        obj = _loads(line)
        return type(obj) is dict and _dumps(obj, option=ORJSON_OPTIONS) == line
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return False


class _Pairs(list[tuple[str, Any]]):
    """Object members in document order, duplicates kept (used only for diagnosis)."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _find_duplicate(obj: Any, path: str) -> tuple[str, str] | None:
    if isinstance(obj, _Pairs):
        seen: set[str] = set()
        for key, _value in obj:
            if key in seen:
                return path, key
            seen.add(key)
        for key, value in obj:
            found = _find_duplicate(value, _key_path(path, key))
            if found:
                return found
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found = _find_duplicate(value, f"{path}[{i}]")
            if found:
                return found
    return None


def diagnose_line(line: bytes) -> str | None:
    """Explain why ``line`` is not a canonical JSON object, or return None if it is one.

    Slow path, run only after :func:`is_canonical` failed. Checks in this order: empty
    line, byte order mark, carriage return, invalid UTF-8/JSON, not an object, duplicate
    key (with its path), integer out of range (with its path), other non-canonical form
    (with the first differing byte offset).
    """
    if not line:
        return "empty line"
    if line.startswith(_BOM):
        return "starts with a UTF-8 byte order mark (BOM); lines must be plain UTF-8"
    if b"\r" in line:
        return "contains a carriage return (CRLF line endings are not allowed; use LF)"
    try:
        obj = _loads(line)
    except orjson.JSONDecodeError as exc:
        return f"invalid JSON: {exc}"
    if type(obj) is not dict:
        return f"not a JSON object (found {type(obj).__name__})"
    try:
        pairs = json.loads(
            line.decode("utf-8"), object_pairs_hook=_Pairs, parse_constant=_reject_constant
        )
    except ValueError:  # pragma: no cover - orjson is stricter than json
        pairs = None
    dup = _find_duplicate(pairs, "$") if pairs is not None else None
    if dup is not None:
        where, key = dup
        return f"duplicate key {key!r} in object at {where}"
    try:
        canonical = canonical_json(obj)
    except CanonicalFormError as exc:
        return str(exc)
    if canonical == line:
        return None
    offset = next(
        (i for i, (a, b) in enumerate(zip(canonical, line, strict=False)) if a != b),
        min(len(canonical), len(line)),
    )
    return (
        "not in canonical form (sorted keys, no whitespace, ',' and ':' separators, "
        f"unescaped UTF-8, shortest numbers): first difference at byte {offset}"
    )


def parse_canonical_line(line: bytes) -> dict[str, Any]:
    """Parse one JSON Lines record and insist that it is in canonical form.

    Args:
        line: one line without its terminating ``\\n``.

    Returns:
        The decoded object.

    Raises:
        CanonicalFormError: the line is empty, has a BOM or CR, is not a JSON object, has
            a duplicate key, an integer beyond ±(2**53 - 1), or is otherwise not
            byte-identical to ``canonical_json`` of its value. The message says which.
    """
    try:
        obj = _loads(line)
        if type(obj) is dict and _dumps(obj, option=ORJSON_OPTIONS) == line:
            return obj
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        pass
    reason = diagnose_line(line)
    raise CanonicalFormError(reason or "not in canonical form")
