"""Canonical JSON: one byte string per value on write, strict checks on read."""

from __future__ import annotations

import json
import math
import random
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemovault.audit.canonical import (
    MAX_SAFE_INTEGER,
    CanonicalFormError,
    canonical_json,
    diagnose_line,
    is_canonical,
    parse_canonical_line,
)

# JSON values the audit log may hold: safe integers, finite floats, any Unicode text
# (surrogates excluded: they are not Unicode scalar values).
_text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=12)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
)
_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=20,
)
_objects = st.dictionaries(_text, _values, max_size=6)


def test_fixed_form() -> None:
    obj = {"b": [1, 2.5, None, True], "a": {"z": "é漢", "y": -0.0}, "c": 0.1}
    assert (
        canonical_json(obj) == '{"a":{"y":-0.0,"z":"é漢"},"b":[1,2.5,null,true],"c":0.1}'.encode()
    )


def test_non_ascii_is_written_as_utf8_not_escaped() -> None:
    out = canonical_json({"k": "naïve café 😀"})
    assert b"\\u" not in out
    assert out.decode("utf-8") == '{"k":"naïve café 😀"}'


def test_tuple_is_a_list() -> None:
    assert canonical_json({"a": (1, 2)}) == canonical_json({"a": [1, 2]})


@pytest.mark.parametrize("value", [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0])
def test_safe_integers_accepted(value: int) -> None:
    assert parse_canonical_line(canonical_json({"n": value})) == {"n": value}


@pytest.mark.parametrize("value", [2**53, -(2**53), 2**64, -(2**70)])
def test_large_integer_refused_with_path(value: int) -> None:
    with pytest.raises(CanonicalFormError) as err:
        canonical_json({"details": {"counts": [1, {"n": value}]}})
    assert err.value.path == "$.details.counts[1].n"
    assert "$.details.counts[1].n" in str(err.value)
    assert "2**53" in str(err.value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_refused(value: float) -> None:
    with pytest.raises(CanonicalFormError, match=r"\$\.x"):
        canonical_json({"x": value})


@pytest.mark.parametrize(
    "obj, path",
    [
        ({1: "a"}, "$"),
        ({"a": {b"k": 1}}, "$.a"),
        ({"a": datetime.now(UTC)}, "$.a"),
        ({"a": b"bytes"}, "$.a"),
        ({"a": {1, 2}}, "$.a"),
        ({"a": ["ok", "\ud800"]}, "$.a[1]"),
        ({"odd key": object()}, '$["odd key"]'),
    ],
)
def test_values_without_canonical_form_refused(obj: Any, path: str) -> None:
    with pytest.raises(CanonicalFormError) as err:
        canonical_json(obj)
    assert err.value.path == path


def test_error_is_a_value_error() -> None:
    assert issubclass(CanonicalFormError, ValueError)


@given(_objects)
@settings(max_examples=300, deadline=None)
def test_round_trip_is_byte_identical(obj: dict[str, Any]) -> None:
    line = canonical_json(obj)
    parsed = parse_canonical_line(line)
    assert canonical_json(parsed) == line
    assert is_canonical(line)
    assert diagnose_line(line) is None
    # The standard library reads the same value (floats compare equal, -0.0 == 0.0).
    assert json.loads(line) == parsed


@given(_objects, st.randoms(use_true_random=False))
@settings(max_examples=200, deadline=None)
def test_other_spellings_are_rejected(obj: dict[str, Any], rnd: random.Random) -> None:
    """Any other serialisation of the same value is refused, never silently accepted."""
    canonical = canonical_json(obj)
    items = list(obj.items())
    rnd.shuffle(items)
    variants = [
        json.dumps(dict(items), ensure_ascii=rnd.random() < 0.5).encode(),
        json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode(),
        json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False).encode(),
    ]
    for variant in variants:
        if variant == canonical:
            continue
        with pytest.raises(CanonicalFormError):
            parse_canonical_line(variant)
        assert diagnose_line(variant) is not None


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"", "empty line"),
        (b'\xef\xbb\xbf{"a":1}', "byte order mark"),
        (b'{"a":1}\r', "carriage return"),
        (b'{"a":\r1}', "carriage return"),
        (b'{"a":1,"a":2}', "duplicate key 'a' in object at $"),
        (b'{"a":{"b":1,"b":1}}', "duplicate key 'b' in object at $.a"),
        (b'{"a":[{"x":1},{"y":1,"y":2}]}', "duplicate key 'y' in object at $.a[1]"),
        (b'{"b":1,"a":2}', "not in canonical form"),
        (b'{"a": 1}', "not in canonical form"),
        (b'{"a":"\\u00e9"}', "not in canonical form"),
        (b'{"a":1E5}', "not in canonical form"),
        (b'{"a":1.0e0}', "not in canonical form"),
        (b'{"a":9007199254740992}', "outside the canonical range"),
        (b'{"a":NaN}', "invalid JSON"),
        (b'{"a":1e999}', "invalid JSON"),
        (b'{"a":"\xff"}', "invalid JSON"),
        (b"[1,2]", "not a JSON object"),
        (b'"text"', "not a JSON object"),
        (b'{"a":1}x', "invalid JSON"),
    ],
)
def test_bad_lines_are_rejected_with_a_reason(line: bytes, reason: str) -> None:
    with pytest.raises(CanonicalFormError) as err:
        parse_canonical_line(line)
    assert reason in str(err.value)
    assert not is_canonical(line)


def test_duplicate_key_is_caught_by_the_fast_test() -> None:
    # orjson keeps the last value, so re-serialising is one member short.
    line = b'{"a":1,"a":1}'
    assert orjson.loads(line) == {"a": 1}
    assert not is_canonical(line)


def test_float_forms_round_trip() -> None:
    values = [0.1, 1e-7, 1e20, 1e300, 5e-324, -0.0, 123456.789, 2.0**60, 1 / 3]
    line = canonical_json({"f": values})
    back = parse_canonical_line(line)["f"]
    assert back == values
    assert [math.copysign(1, v) for v in back] == [math.copysign(1, v) for v in values]
