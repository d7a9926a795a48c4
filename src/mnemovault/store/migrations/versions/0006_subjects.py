"""Subject rights: the erasure ledger (issue 10).

Revision ID: 0006_subjects
Revises: 0005_signed_tenant
Create Date: 2026-12-01
"""

from alembic import op  # noqa: F401

revision = "0006_subjects"
down_revision = "0005_signed_tenant"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # reserved for issue 10


def downgrade() -> None:
    pass
