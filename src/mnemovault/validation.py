"""Turning caller input into checked values: pydantic's errors into one
:class:`~mnemovault.errors.ValidationError` that names the field and the rule, and ids.

The bottom of the stack (it imports only :mod:`mnemovault.errors` and pydantic), so models,
capabilities and interfaces can all use it.
"""

from __future__ import annotations

import uuid

from pydantic import ValidationError as PydanticValidationError

from mnemovault.errors import ValidationError


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
