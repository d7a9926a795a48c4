"""Procedural memory, runs, feedback and the review gate (issue 12).

Revision ID: 0008_procedures
Revises: 0007_tenant_lifecycle
Create Date: 2026-12-01
"""

from alembic import op  # noqa: F401

revision = "0008_procedures"
down_revision = "0007_tenant_lifecycle"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # reserved for issue 12


def downgrade() -> None:
    pass
