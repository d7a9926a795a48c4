"""The application role logs in itself (issue 9, fault 4).

Revision ID: 0004_app_login
Revises: 0003_lineage
Create Date: 2026-12-01

Until now the pool logged in as the database owner and switched with ``SET ROLE``, which
any statement on the connection could undo (``RESET ROLE``) and which Citus cannot use
(workers are reached as the session's login role). From here on the pool logs in as the
application role: it gets ``LOGIN`` and ``CONNECT`` on this database, stays ``NOSUPERUSER
NOBYPASSRLS`` (:meth:`mnemovault.store.db.Database.open` refuses a login role that is
either), and its password, if any, is set by :meth:`~mnemovault.store.db.Database.upgrade`
from ``MNEMOVAULT_APP_PASSWORD``, not here (a migration runs once; a password changes).
"""

from alembic import context, op

revision = "0004_app_login"
down_revision = "0003_lineage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    role = context.config.attributes.get("app_role", "mnemovault_app")
    if not role.replace("_", "").isalnum():
        raise ValueError("app_role: must be letters, digits and underscores")
    op.execute(
        f"""
        DO $$
        BEGIN
          IF NOT (SELECT rolcanlogin FROM pg_roles WHERE rolname = '{role}') THEN
            ALTER ROLE {role} LOGIN;
          END IF;
          EXECUTE format('GRANT CONNECT ON DATABASE %I TO {role}', current_database());
        END $$;
        """
    )


def downgrade() -> None:
    # LOGIN stays: roles belong to the whole server, and another database on it may be at
    # this revision (the pool of an older release still logs in as the owner).
    role = context.config.attributes.get("app_role", "mnemovault_app")
    op.execute(
        f"DO $$ BEGIN EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM {role}', "
        "current_database()); END $$;"
    )
