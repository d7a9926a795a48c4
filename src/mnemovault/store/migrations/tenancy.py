"""What every tenant table gets in a migration: row-level security keyed on the
per-transaction setting ``mnemovault.tenant_id``, and the application role's grants.

Since revision 0005 the setting is signed and the policy reads it through
``mv_current_tenant()`` (see that migration): a table created after it must use
:data:`SIGNED_POLICY`; revisions before it keep :data:`TENANT_POLICY` (0005 rewrites them)."""

from typing import Any

TENANT_POLICY = """
CREATE POLICY tenant_isolation ON {table}
  USING (tenant_id = current_setting('mnemovault.tenant_id', true))
  WITH CHECK (tenant_id = current_setting('mnemovault.tenant_id', true))
"""


SIGNED_POLICY = """
CREATE POLICY tenant_isolation ON {table}
  USING (tenant_id = (SELECT mv_current_tenant()))
  WITH CHECK (tenant_id = (SELECT mv_current_tenant()))
"""


def tenant_table(op: Any, table: str, role: str, privileges: str | None, *,
                 signed: bool = False) -> None:
    """Enable row-level security on ``table`` with the tenant policy (``signed``: the one
    of revision 0005 and later) and grant ``privileges`` (e.g. ``"SELECT, INSERT"``) to the
    application ``role``."""
    op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    op.execute((SIGNED_POLICY if signed else TENANT_POLICY).format(table=table))
    if privileges:
        op.execute(f"GRANT {privileges} ON {table} TO {role}")
