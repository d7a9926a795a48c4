"""The one error hierarchy of mnemovault.

Every interface maps these kinds once: HTTP status codes in ``api/errors.py``, exit codes in
the CLI. Messages name the field and the rule; they never carry row values or request text
(SPEC section 12).
"""

from __future__ import annotations

from typing import Any


class MnemoError(Exception):
    """Base class. ``code`` is a stable machine-readable kind; ``status`` the HTTP status."""

    code = "error"
    status = 500

    def __init__(self, message: str, *, field: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            out["field"] = self.field
        if self.details:
            out["details"] = self.details
        return out


class ValidationError(MnemoError):
    """Bad input: ``field`` names the field, the message names the rule."""

    code = "validation"
    status = 422


class NotFound(MnemoError):
    code = "not_found"
    status = 404


class Unauthenticated(MnemoError):
    code = "unauthenticated"
    status = 401


class Forbidden(MnemoError):
    """A missing permission. ``details['permission']`` names it."""

    code = "forbidden"
    status = 403


class Conflict(MnemoError):
    code = "conflict"
    status = 409


class Refused(MnemoError):
    """A deliberate refusal (policy), as opposed to bad input."""

    code = "refused"
    status = 409


class Unavailable(MnemoError):
    code = "unavailable"
    status = 503


class ConfigError(MnemoError):
    """The deployment is misconfigured (wrong embedder for a database, missing extension)."""

    code = "config"
    status = 500
