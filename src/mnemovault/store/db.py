"""Connections: the migration path (as the database owner) and the application pool (as the
application role, under row-level security, with the tenant set per transaction)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from mnemovault.config import Settings
from mnemovault.errors import ConfigError, Conflict, InternalError, MnemoError, Unavailable

log = logging.getLogger(__name__)

TENANT_SETTING = "mnemovault.tenant_id"

# Tenants whose audit chain grew in the current transaction: after it commits, the
# database's after-commit hooks run for each (the audit log's JSON Lines mirror).
_audited: ContextVar[set[str] | None] = ContextVar("mnemovault_audited", default=None)


def note_audit_append(tenant: str) -> None:
    """Called by the audit log when it appends a row inside :meth:`Database.transaction`."""
    pending = _audited.get()
    if pending is not None:
        pending.add(tenant)


def database_error(exc: psycopg.Error) -> MnemoError:
    """The mnemovault kind of a driver error (the :mod:`mnemovault.errors` docstring); the
    driver's message is never copied (it can quote row values)."""
    if isinstance(exc, psycopg.errors.IntegrityError):
        return Conflict("database: a concurrent change conflicted with this one; nothing was "
                        "changed and retrying is safe")
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return Unavailable("database: unreachable or the operation was cancelled; nothing "
                           "was changed")
    return InternalError(f"database: the operation was refused ({type(exc).__name__}); "
                         "nothing was changed")


def caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``exc`` was raised for a driver error of ``kind`` (its ``__cause__``)."""
    return isinstance(exc.__cause__, kind)


@contextmanager
def owner_connection(url: str, **kwargs: Any) -> Iterator[psycopg.Connection[Any]]:
    """A connection as the database owner (operator paths: migrations' checks, KEK
    rotation, listing tenants), with driver errors turned into mnemovault kinds."""
    try:
        with psycopg.connect(url, **kwargs) as conn:
            yield conn
    except psycopg.Error as exc:
        raise database_error(exc) from exc


def _sqlalchemy_url(url: str) -> str:
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


class Database:
    """One PostgreSQL database: owner URL for migrations, pooled app-role connections.

    ``url`` is a libpq URL of a user that owns (or may create) the schema. Application
    queries run after ``SET ROLE <app_role>``: that role is not a superuser, has no
    BYPASSRLS, and sees only the rows of the tenant set with :meth:`transaction`.
    """

    def __init__(self, url: str, *, app_role: str = "mnemovault_app", pool_max_size: int = 8,
                 embedded_dir: Path | None = None) -> None:
        self.url = url
        self.app_role = app_role
        self.pool_max_size = pool_max_size
        self.embedded_dir = embedded_dir
        self._pool: ConnectionPool[psycopg.Connection[dict[str, Any]]] | None = None
        self.after_commit: list[Callable[[str], object]] = []

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        """Use ``DATABASE_URL``, or start the embedded server in ``settings.data_dir``."""
        if settings.database_url:
            return cls(settings.database_url, app_role=settings.app_role,
                       pool_max_size=settings.pool_max_size)
        from mnemovault.store.embedded import start_embedded

        url = start_embedded(settings.data_dir)
        return cls(url, app_role=settings.app_role, pool_max_size=settings.pool_max_size,
                   embedded_dir=Path(settings.data_dir))

    # -- migrations -------------------------------------------------------------------
    def alembic_config(self, embedding_dim: int) -> Any:
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option(
            "script_location", str(resources.files("mnemovault.store") / "migrations")
        )
        cfg.set_main_option("sqlalchemy.url", _sqlalchemy_url(self.url).replace("%", "%%"))
        cfg.attributes["embedding_dim"] = embedding_dim
        cfg.attributes["app_role"] = self.app_role
        return cfg

    def current_revision(self) -> str | None:
        with owner_connection(self.url, autocommit=True) as conn:
            reg = conn.execute("SELECT to_regclass('alembic_version')").fetchone()
            if not reg or reg[0] is None:
                return None
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            return row[0] if row else None

    def upgrade(self, embedding_dim: int) -> tuple[str | None, str | None]:
        """Run Alembic migrations to head. Returns (revision before, revision after).

        ``embedding_dim`` sizes the vector column when the schema is first created.
        """
        from alembic import command

        before = self.current_revision()
        try:
            command.upgrade(self.alembic_config(embedding_dim), "head")
        except Exception as exc:
            raise Unavailable(f"migration failed: {type(exc).__name__}: {exc}") from exc
        return before, self.current_revision()

    # -- embedder identity --------------------------------------------------------------
    def check_embedder(self, model: str, dimension: int) -> None:
        """Record the embedder on first use; refuse a different one afterwards.

        Raises:
            ConfigError: the database was built with another model or dimension.
        """
        from psycopg.types.json import Jsonb

        with owner_connection(self.url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO mv_meta (key, value) VALUES ('embedder', %s) "
                "ON CONFLICT (key) DO NOTHING",
                (Jsonb({"model": model, "dimension": dimension}),),
            )
            row = conn.execute("SELECT value FROM mv_meta WHERE key = 'embedder'").fetchone()
            col = conn.execute(
                "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'memories'::regclass "
                "AND attname = 'embedding'"
            ).fetchone()
        assert row is not None
        stored = row[0]
        if stored["model"] != model or int(stored["dimension"]) != dimension:
            raise ConfigError(
                f"embedder: this database was built with model {stored['model']!r} "
                f"(dimension {stored['dimension']}); the configured embedder is {model!r} "
                f"(dimension {dimension}). Configure the original model, or use a new database."
            )
        if col and col[0] != dimension:
            raise ConfigError(
                f"embedder: the memories.embedding column has dimension {col[0]}, "
                f"the embedder gives {dimension}"
            )

    # -- application pool -----------------------------------------------------------------
    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(self.app_role)))
        # Plan every execution with its real parameters: a generic plan cannot tell a
        # tenant-sized scope (HNSW) from a small one (B-tree and exact sort).
        conn.execute("SET plan_cache_mode = force_custom_plan")
        register_vector(conn)
        conn.commit()

    def open(self) -> None:
        if self._pool is not None:
            return
        self._pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=self.pool_max_size,
            kwargs={"row_factory": dict_row},
            configure=self._configure,
            open=False,
            name="mnemovault",
        )
        self._pool.open(wait=True, timeout=30)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @contextmanager
    def transaction(self, tenant: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """One transaction as the application role with ``tenant`` set for row-level security.

        Commits on normal exit, rolls back on any exception.
        """
        if self._pool is None:
            self.open()
        assert self._pool is not None
        outer = _audited.get()
        pending: set[str] = set()
        token = _audited.set(pending if outer is None else outer)
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SELECT set_config(%s, %s, true)", (TENANT_SETTING, tenant))
                yield conn
        except psycopg.Error as exc:
            raise database_error(exc) from exc
        finally:
            _audited.reset(token)
        if outer is None:
            for t in sorted(pending):
                for hook in self.after_commit:
                    try:
                        hook(t)
                    except Exception:  # a mirror failure never undoes a commit
                        log.exception("after-commit hook failed for a tenant")

    def ping(self) -> None:
        """Run ``SELECT 1`` on an application connection (raises if the database is down)."""
        with self.unscoped() as conn:
            conn.execute("SELECT 1")

    @contextmanager
    def unscoped(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """A transaction as the application role with no tenant set (it sees no rows).

        Exists for tests and health checks."""
        if self._pool is None:
            self.open()
        assert self._pool is not None
        try:
            with self._pool.connection() as conn, conn.transaction():
                yield conn
        except psycopg.Error as exc:
            raise database_error(exc) from exc
