"""Tenant lifecycle: export jobs, soft delete with a grace period (issue 10).

Revision ID: 0007_tenant_lifecycle
Revises: 0006_subjects
Create Date: 2026-12-01
"""

from alembic import op  # noqa: F401

revision = "0007_tenant_lifecycle"
down_revision = "0006_subjects"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # reserved for issue 10


def downgrade() -> None:
    pass
