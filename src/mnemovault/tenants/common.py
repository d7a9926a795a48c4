"""What tenant export and tenant delete share: the typed confirmation, the check that a
caller acts on the whole of its own tenant, and where local archives live."""

from __future__ import annotations

from pathlib import Path

from mnemovault.auth import Principal, validate_tenant
from mnemovault.config import Settings
from mnemovault.errors import NotFound, Refused


def confirmation(tenant: str) -> str:
    """The string a caller must type to export or delete ``tenant``: ``DELETE-<tenant>``
    (the same awkward string for both, deliberately: SPEC section 10)."""
    return f"DELETE-{tenant}"


def check_confirmation(tenant: str, confirm: str | None) -> None:
    """Raises:
        Refused: ``confirm`` is not exactly :func:`confirmation` (the message says what to
            type)."""
    expected = confirmation(tenant)
    if confirm != expected:
        raise Refused(f"confirm: type exactly {expected} to confirm", field="confirm",
                      expected=expected)


def own_tenant(who: Principal, tenant: str, permission: str, what: str) -> str:
    """Check that ``who`` may act on the whole of ``tenant`` with ``permission``: the
    permission, an unlimited key, and its own tenant (another tenant is "not found").

    Raises:
        Forbidden: the permission is missing, or the key is limited to a scope or subject.
        ValidationError: ``tenant`` is not a tenant id.
        NotFound: ``tenant`` is not the caller's.
    """
    who.require(permission)
    who.require_unlimited(what)
    validate_tenant(tenant, "tenant_id")
    if tenant != who.tenant:
        raise NotFound("tenant_id: no such tenant", field="tenant_id")
    return tenant


def local_root(settings: Settings) -> Path:
    """Where local archives go: ``MNEMOVAULT_EXPORT_DIR``, else ``<data dir>/exports``."""
    return Path(settings.export_dir or Path(settings.data_dir).expanduser() / "exports")
