"""Per-scope BM25 corpus statistics (issue 13).

Revision ID: 0009_lexical_stats
Revises: 0008_procedures
Create Date: 2026-12-01
"""

from alembic import op  # noqa: F401

revision = "0009_lexical_stats"
down_revision = "0008_procedures"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass  # reserved for issue 13


def downgrade() -> None:
    pass
