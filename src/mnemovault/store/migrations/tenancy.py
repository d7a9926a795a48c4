"""What every tenant table gets in a migration: row-level security keyed on the
per-transaction setting ``mnemovault.tenant_id``, and the application role's grants."""

from typing import Any

TENANT_POLICY = """
CREATE POLICY tenant_isolation ON {table}
  USING (tenant_id = current_setting('mnemovault.tenant_id', true))
  WITH CHECK (tenant_id = current_setting('mnemovault.tenant_id', true))
"""


def tenant_table(op: Any, table: str, role: str, privileges: str | None) -> None:
    """Enable row-level security on ``table`` with the tenant policy and grant
    ``privileges`` (e.g. ``"SELECT, INSERT"``) to the application ``role``."""
    op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    op.execute(TENANT_POLICY.format(table=table))
    if privileges:
        op.execute(f"GRANT {privileges} ON {table} TO {role}")
