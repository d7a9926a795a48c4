"""The one error hierarchy of mnemovault.

Every interface maps these kinds once: HTTP statuses (``status`` below) in
:mod:`mnemovault.api.app`'s exception handler, exit codes in the CLI. Messages name the
field and the rule; they never carry row values or request text (SPEC section 12)::

    MnemoError                 base: .code (stable kind), .status, .field, .details
    ├── ValidationError  422   bad input: a field breaks a rule (``field`` names it, the
    │                          message names the rule); nothing was changed. CLI exit 2
    ├── NotFound         404   no such id, placeholder or tenant for this caller (another
    │                          tenant's rows are "not found", never "forbidden"). CLI exit 3
    ├── Unauthenticated  401   a missing, malformed, unknown or revoked API key. CLI exit 4
    ├── Forbidden        403   the caller lacks a permission (``details["permission"]``
    │                          names it) or is outside its key's scope. CLI exit 4
    ├── Conflict         409   a concurrent write or forget got in the way; nothing was
    │                          changed and retrying is safe. CLI exit 5
    ├── Refused          409   a deliberate policy refusal (semantic forget off; the capture
    │                          guard's finding); ``details`` may list what to confirm. CLI exit 5
    ├── TooLarge         413   the request body is over the route's limit (HTTP only; the
    │                          connection is closed)
    ├── RateLimited      429   over a rate budget; ``details["retry_after"]`` seconds (and
    │                          the ``Retry-After`` header; HTTP only)
    ├── Unavailable      503   the database (or a capture detector) could not do its part;
    │                          nothing was changed and retrying may work. CLI exit 6
    ├── ConfigError      500   the deployment is misconfigured: another embedder for this
    │                          database, a key file lacking a KEK version. CLI exit 7
    └── InternalError    500   a defect: the database refused what validation should have
                               caught, or an unexpected exception; nothing was changed and
                               retrying will not help. CLI exit 1

Database errors never escape as driver exceptions: :meth:`mnemovault.store.db.Database.
transaction` turns an integrity violation into :class:`Conflict`, a lost or refused
connection into :class:`Unavailable` and anything else into :class:`InternalError`, with
the driver's exception as ``__cause__`` (its message is never shown: it can quote values).

Catch :class:`MnemoError` to handle every kind; ``to_dict()`` is the body of the HTTP
error envelope (``{"error": {...}}``).
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


class TooLarge(MnemoError):
    """The request body is over the route's limit (:mod:`mnemovault.api.edge`);
    ``details['limit_bytes']`` is the limit."""

    code = "too_large"
    status = 413


class RateLimited(MnemoError):
    """Over a rate budget (:mod:`mnemovault.api.edge`): ``details['budget']`` names it,
    ``details['retry_after']`` is the whole seconds to wait."""

    code = "rate_limited"
    status = 429


class Unavailable(MnemoError):
    code = "unavailable"
    status = 503


class ConfigError(MnemoError):
    """The deployment is misconfigured (wrong embedder for a database, missing extension)."""

    code = "config"
    status = 500


class InternalError(MnemoError):
    """A defect (see the module docstring); the message never carries the cause's text."""

    code = "internal"
    status = 500


def tenant_job_failure(job: str, tenant: str, exc: BaseException, log: Any) -> MnemoError:
    """What an operator job that runs every tenant (retention, the librarian, the PII watch)
    reports for a tenant whose run raised: the error itself, or an :class:`InternalError`
    naming only its type; logged with the tenant's id, the code and the type (never the
    message, which may hold a value). The other tenants still run."""
    err = exc if isinstance(exc, MnemoError) else InternalError(
        f"internal: {type(exc).__name__}")
    log.error("%s failed for tenant %s: %s (%s)", job, tenant, err.code,
              type(exc.__cause__ or exc).__name__)
    return err
