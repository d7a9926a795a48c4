"""Connections: the operator paths (as the database owner: migrations, KEK rotation, listing
tenants, the embedder check) and the application pool, which logs in as the application
role itself (under row-level security, with the tenant set per transaction).

The pool never logs in as the owner and switches with ``SET ROLE``: any statement on such a
connection could ``RESET ROLE`` back to the owner, which bypasses row-level security. Logged
in as a role that is neither superuser nor BYPASSRLS, a connection has no role to go back
to (``session_user`` is the application role), so even an injected statement sees one
tenant's rows at most.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from mnemovault.config import Settings
from mnemovault.errors import ConfigError, Conflict, InternalError, MnemoError, Unavailable
from mnemovault.store import citus, lexstats, memories

log = logging.getLogger(__name__)

TENANT_SETTING = "mnemovault.tenant_id"
CHECK_AFTER_IDLE_SECONDS = 1.0
"""A pooled connection unused for longer is checked (an empty query) before it is handed
out (:meth:`Database._check`)."""
SPARE_WAIT_SECONDS = 0.002
"""How long :meth:`Database.spare_transaction` waits for a free pooled connection: about
nothing (a busy pool gives no spare)."""

# Tenants whose audit chain grew in the current transaction: after it commits, the
# database's after-commit hooks run for each (the audit log's JSON Lines mirror).
_audited: ContextVar[set[str] | None] = ContextVar("mnemovault_audited", default=None)


# The tenant each open :meth:`Database.transaction` was opened for, by connection: the
# helpers of capability modules that get a connection only (the forget walk, retention)
# name it in their queries (:func:`tenant_of`).
_tenants: weakref.WeakKeyDictionary[psycopg.Connection[Any], str] = weakref.WeakKeyDictionary()
_memos: weakref.WeakKeyDictionary[psycopg.Connection[Any], dict[Any, Any]] = (
    weakref.WeakKeyDictionary())


def transaction_memo(conn: psycopg.Connection[Any]) -> dict[Any, Any] | None:
    """A dict that lives as long as the :meth:`Database.transaction` open on ``conn`` (its
    outermost one: a nested call on the same connection shares it); None outside one. For
    what one transaction may read once and reuse (issue 29: the tenant's wrapped secret was
    read up to four times per request); whatever a savepoint could undo must not go in."""
    return _memos.get(conn)


def tenant_of(conn: psycopg.Connection[Any]) -> str:
    """The tenant of the :meth:`Database.transaction` open on ``conn``.

    Raises:
        InternalError: ``conn`` is not in a tenant's transaction (an unscoped or owner
            connection): a tenant's query may not run there.
    """
    tenant = _tenants.get(conn)
    if tenant is None:
        raise InternalError("database: no tenant transaction on this connection")
    return tenant


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


def _lacks_tenant_key(exc: psycopg.Error) -> bool:
    """Whether ``exc`` is a worker's "relation mv_tenant_key does not exist" (Citus relays
    a worker's error with its SQLSTATE)."""
    return (exc.sqlstate == "42P01"
            and "mv_tenant_key" in (exc.diag.message_primary or str(exc)))


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


def app_login_url(owner_url: str, role: str, password: str | None = None) -> str:
    """The application role's libpq connection string, derived from the owner's: the same
    server, database and options, with ``user = role`` and ``password`` (without one, libpq
    falls back to ``PGPASSFILE``/``~/.pgpass``, or the server trusts the connection, as the
    embedded server's unix socket does). The owner's password is never reused."""
    params: dict[str, Any] = dict(conninfo_to_dict(owner_url))
    params["user"] = role
    params.pop("password", None)
    if password:
        params["password"] = password
    return make_conninfo(**params)


MIGRATION_LOCK = 0x6D6E656D6F  # pg_advisory_lock key: one schema migration at a time
_REVISION = re.compile(r"^(revision|down_revision)\s*(?::[^=]*)?=\s*(.+)$", re.MULTILINE)


def code_head() -> str | None:
    """The head revision of the migrations shipped with this code, read from the files
    in ``migrations/versions`` (no Alembic import: that costs about a second, and a command
    at head needs none of it). None when the files have no single head (Alembic decides)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    folder = resources.files("mnemovault.store") / "migrations" / "versions"
    for entry in folder.iterdir():
        if not entry.name.endswith(".py"):
            continue
        for name, value in _REVISION.findall(entry.read_text(encoding="utf-8")):
            ids = re.findall(r"[\"']([^\"']+)[\"']", value)
            (revisions if name == "revision" else parents).update(ids)
    heads = revisions - parents
    return next(iter(heads)) if len(heads) == 1 else None


def _sqlalchemy_url(url: str) -> str:
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


class Database:
    """One PostgreSQL database: the owner's URL for operator paths, a pool of connections
    logged in as the application role.

    ``url`` is a libpq URL of a user that owns (or may create) the schema; migrations, KEK
    rotation, the tenant list of all-tenant jobs and :meth:`check_embedder` use it.
    :meth:`transaction` and :meth:`unscoped` use ``app_url``: a login of ``app_role``, which
    is neither superuser nor BYPASSRLS (:meth:`open` checks) and sees only the rows of the
    tenant set with :meth:`transaction`. Without ``app_url`` it is ``url`` with the user
    replaced by ``app_role`` and the password by ``app_password``
    (:func:`app_login_url`); with ``app_password``, :meth:`upgrade` sets that password on
    the role.
    """

    def __init__(self, url: str, *, app_role: str = "mnemovault_app", pool_max_size: int = 8,
                 embedded_dir: Path | None = None, app_url: str | None = None,
                 app_password: str | None = None, connect_timeout: float = 2.0,
                 pool_timeout: float = 30.0) -> None:
        if not app_role.replace("_", "").isalnum():
            raise ConfigError("app_role: must be letters, digits and underscores",
                              field="app_role")
        self.url = url
        self.app_role = app_role
        self.app_password = app_password
        self.app_url = app_url or app_login_url(url, app_role, app_password)
        self.pool_max_size = pool_max_size
        self.connect_timeout = connect_timeout
        self.pool_timeout = pool_timeout
        self._returned: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = (
            weakref.WeakKeyDictionary())  # when each pooled connection was last in use
        self.embedded_dir = embedded_dir
        self._pool: ConnectionPool[psycopg.Connection[dict[str, Any]]] | None = None
        self.after_commit: list[Callable[[str], object]] = []
        self._fold_counts: dict[str, tuple[int, int]] = {}  # (writes, rows)
        self._fold_lock = threading.Lock()
        # opens the sealed columns of every row read on an application connection
        # (mnemovault.pii.sealing, set by the runtime): (tenant, row) -> row
        self.row_hook: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None
        self._tenant_key: bytes | None = None  # read on first use (migration 0005)
        self.citus = False  # the server has Citus (set by open())
        self._sign_ids: weakref.WeakKeyDictionary[psycopg.Connection[Any], int] = (
            weakref.WeakKeyDictionary())

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        """Use ``DATABASE_URL`` (with ``MNEMOVAULT_APP_DATABASE_URL`` or
        ``MNEMOVAULT_APP_PASSWORD`` for the application login), or start the embedded
        server in ``settings.data_dir`` (the application role logs in over its unix socket,
        which trusts local connections: no password)."""
        password = settings.app_password.get_secret_value() if settings.app_password else None
        connect, wait = settings.db_connect_timeout_seconds, settings.pool_timeout_seconds
        if settings.database_url:
            return cls(settings.database_url, app_role=settings.app_role,
                       pool_max_size=settings.pool_max_size,
                       app_url=settings.app_database_url, app_password=password,
                       connect_timeout=connect, pool_timeout=wait)
        from mnemovault.store.embedded import start_embedded

        url = start_embedded(settings.data_dir,
                             shared_buffers=settings.embedded_shared_buffers)
        return cls(url, app_role=settings.app_role, pool_max_size=settings.pool_max_size,
                   embedded_dir=Path(settings.data_dir), connect_timeout=connect,
                   pool_timeout=wait)

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

    def ensure_schema(self, embedding_dim: int) -> bool:
        """Migrate to head unless the schema is there already: one query of the stored
        revision against :func:`code_head` (Alembic is imported only when there is
        something to do). Returns whether migrations ran."""
        head = code_head()
        if head is not None and self.current_revision() == head:
            self._ensure_app_password()
            return False
        self.upgrade(embedding_dim)
        return True

    def upgrade(self, embedding_dim: int) -> tuple[str | None, str | None]:
        """Run Alembic migrations to head. Returns (revision before, revision after).

        ``embedding_dim`` sizes the vector column when the schema is first created.
        Processes migrating one database at once take turns (a session advisory lock,
        :data:`MIGRATION_LOCK`): the first migrates, the others find the schema at head.
        """
        with owner_connection(self.url, autocommit=True) as lock:
            lock.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            before = self.current_revision()
            if before is None or before != code_head():
                from alembic import command

                try:
                    command.upgrade(self.alembic_config(embedding_dim), "head")
                except Exception as exc:
                    raise Unavailable(f"migration failed: {type(exc).__name__}: "
                                      f"{exc}") from exc
            citus.distribute(self.url, self.app_role)  # no-op without Citus
        self._ensure_app_password()
        return before, self.current_revision()

    def _ensure_app_password(self) -> None:
        if self.app_password and not self._app_login_works(
                app_login_url(self.url, self.app_role, self.app_password)):
            self.set_app_password(self.app_password)

    def set_app_password(self, password: str) -> None:
        """Give the application role ``LOGIN`` and ``password`` (as the owner). The password
        is sent as a SCRAM-SHA-256 verifier computed here, so it appears in no statement
        the server might log. :meth:`upgrade` calls this with ``app_password`` when the
        role cannot log in with it yet.

        Raises:
            ConfigError: the owner may not change the role (it needs CREATEROLE and, from
                PostgreSQL 16, ADMIN on the role); set the password as a role that may.
        """
        with owner_connection(self.url, autocommit=True) as conn:
            verifier = conn.pgconn.encrypt_password(
                password.encode(), self.app_role.encode(), b"scram-sha-256").decode()
            try:
                conn.execute(sql.SQL("ALTER ROLE {} WITH LOGIN PASSWORD {}").format(
                    sql.Identifier(self.app_role), sql.Literal(verifier)))
            except psycopg.errors.InsufficientPrivilege as exc:
                raise ConfigError(
                    f"app_password: the database owner may not set the password of "
                    f"{self.app_role!r}; set it as a role with CREATEROLE (ALTER ROLE "
                    f"{self.app_role} PASSWORD ...)", field="app_password") from exc
        log.info("set the password of the application role %s", self.app_role)

    @staticmethod
    def _app_login_works(url: str) -> bool:
        try:
            with psycopg.connect(url, connect_timeout=10):
                return True
        except psycopg.Error:
            return False

    # -- embedder identity --------------------------------------------------------------
    def check_embedder(self, model: str, dimension: int,
                       text_view: str | None = None) -> str:
        """Record the embedder on first use; refuse a different one afterwards. Returns the
        database's *text view* (what its vectors were made from): ``"kinds"`` (each
        placeholder as its kind word), recorded for every new database (or ``text_view``
        if given), or ``"placeholders"`` for a record made before views were recorded.

        Raises:
            ConfigError: the database was built with another model or dimension, or
                ``text_view`` is given and differs from the database's (field
                ``embed_text_view``).
        """
        from psycopg.types.json import Jsonb

        record = {"model": model, "dimension": dimension, "text_view": text_view or "kinds"}
        with owner_connection(self.url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO mv_meta (key, value) VALUES ('embedder', %s) "
                "ON CONFLICT (key) DO NOTHING",
                (Jsonb(record),),
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
        view = str(stored.get("text_view", "placeholders"))
        if text_view is not None and text_view != view:
            raise ConfigError(
                f"embed_text_view: this database's vectors were made from the "
                f"{view!r} view of its texts; MNEMOVAULT_EMBED_TEXT_VIEW={text_view!r} "
                "would embed queries and new memories another way. Unset it (the database's "
                "view is used), or use a new database.", field="embed_text_view")
        return view

    # -- application pool -----------------------------------------------------------------
    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        # Plan every execution with its real parameters: a generic plan cannot tell a
        # tenant-sized scope (HNSW) from a small one (B-tree and exact sort).
        conn.execute("SET plan_cache_mode = force_custom_plan")
        register_vector(conn)
        if self.citus:  # the tenant reaches the workers by SET LOCAL (store/citus.py)
            conn.execute("SET citus.propagate_set_commands = 'local'")
            self._sign_ids[conn] = citus.signing_id(conn)
        conn.commit()
        self._returned[conn] = time.monotonic()

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        """The pool's check on checkout (issue 22): a connection idle for more than
        :data:`CHECK_AFTER_IDLE_SECONDS` runs an empty query first
        (:meth:`ConnectionPool.check_connection`), so one the server dropped meanwhile (a
        restart) is replaced instead of failing the request; one in use a moment ago is
        handed out as it is (no round trip on the busy path)."""
        last = self._returned.get(conn)
        if last is None or time.monotonic() - last > CHECK_AFTER_IDLE_SECONDS:
            ConnectionPool.check_connection(conn)

    def _stamp(self, conn: psycopg.Connection[Any]) -> None:
        """Note when the connection was last in use (:meth:`_connection`, on return).

        (It was the pool's ``reset`` callback: with one, psycopg_pool hands every returned
        connection to its worker thread, one more thread switch per transaction, and the
        connection is free again only once that thread ran; under 32 clients on two
        cores, issue 29.)"""
        self._returned[conn] = time.monotonic()

    def check_app_login(self) -> None:
        """Log in once as the application role and check that row-level security binds it:
        neither the login role nor any role it may ``SET ROLE`` to is a superuser, has
        BYPASSRLS or owns a table with row-level security (an owner is exempt from its
        table's policies).

        Raises:
            Unavailable: the role cannot log in (the schema predates the login role: run
                ``mnemovault db upgrade``; or a wrong password / URL).
            ConfigError: the login escapes row-level security as above.
        """
        try:
            with psycopg.connect(self.app_url, connect_timeout=10) as conn:
                rows = conn.execute(
                    "SELECT r.rolname FROM pg_roles r "
                    "WHERE pg_has_role(session_user, r.oid, 'MEMBER') AND (r.rolsuper "
                    "OR r.rolbypassrls OR EXISTS (SELECT 1 FROM pg_class c "
                    "WHERE c.relowner = r.oid AND c.relrowsecurity))").fetchall()
        except psycopg.Error as exc:
            raise Unavailable(
                f"database: cannot log in as the application role {self.app_role!r} "
                f"({type(exc).__name__}); run `mnemovault db upgrade` as the owner, and with "
                "DATABASE_URL set MNEMOVAULT_APP_PASSWORD or MNEMOVAULT_APP_DATABASE_URL"
            ) from exc
        if rows:
            raise ConfigError(
                f"app_database_url: the application login is, or may become, "
                f"{sorted(r[0] for r in rows)}: a superuser, a BYPASSRLS role or the owner of "
                "the tables, which row-level security does not bind; log in as "
                f"{self.app_role!r}", field="app_database_url")

    def _signed(self, tenant: str, backend_pid: int) -> str:
        """The tenant setting for one transaction on the backend ``backend_pid``:
        ``<tenant>:<hex HMAC-SHA256(key, "<tenant>:<pid>")>`` (migration 0005: the policies
        accept it only on that backend, and only the owner can read the key)."""
        if self._tenant_key is None:
            with owner_connection(self.url, autocommit=True) as conn:
                row = conn.execute("SELECT key FROM mv_tenant_key WHERE id = 1").fetchone()
            if row is None:
                raise ConfigError("database: no tenant signing key; run `mnemovault db "
                                  "upgrade`")
            self._tenant_key = bytes(row[0])
        mac = hmac.new(self._tenant_key, f"{tenant}:{backend_pid}".encode(),
                       hashlib.sha256).hexdigest()
        return f"{tenant}:{mac}"

    def open(self) -> None:
        """Open the application pool (logged in as the application role; see
        :meth:`check_app_login` for the errors)."""
        if self._pool is not None:
            return
        self.check_app_login()
        with owner_connection(self.url, autocommit=True) as conn:
            self.citus = citus.is_citus(conn)
        self._pool = ConnectionPool(
            self.app_url,
            # two kept open: a recall's dense side reads on a spare connection beside its
            # lexical side (spare_transaction), which must not have to wait for a login
            min_size=min(2, self.pool_max_size),
            max_size=self.pool_max_size,
            kwargs={"row_factory": self._row_factory,
                    "connect_timeout": max(2, math.ceil(self.connect_timeout))},
            configure=self._configure,
            check=self._check,
            timeout=self.pool_timeout,
            open=False,
            name="mnemovault",
        )
        self._pool.open(wait=True, timeout=30)

    def _row_factory(self, cursor: Any) -> Any:
        """Rows as dicts; a row with sealed columns (``<col>_sealed`` and ``key_id``) goes
        through :attr:`row_hook`, which opens them: the one place where stored text is
        decrypted, so every reader gets it by construction (and only rows returned are)."""
        make = dict_row(cursor)
        hook = self.row_hook
        desc = cursor.description
        if hook is None or desc is None or not any(c.name.endswith("_sealed") for c in desc):
            return make
        conn = cursor.connection

        def row(values: Any) -> dict[str, Any]:
            return hook(_tenants.get(conn, ""), make(values))

        return row

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @contextmanager
    def transaction(self, tenant: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """One transaction on an application connection (logged in as the application
        role) with ``tenant`` set for row-level security.

        Commits on normal exit, rolls back on any exception.
        """
        if self._pool is None:
            self.open()
        with self._transaction(tenant, self._connection()) as conn:
            yield conn

    @contextmanager
    def spare_transaction(self, tenant: str
                          ) -> Iterator[psycopg.Connection[dict[str, Any]] | None]:
        """A second :meth:`transaction` for reading beside one already open (recall's
        dense side beside its lexical side), or None when no pooled connection is free
        within :data:`SPARE_WAIT_SECONDS`: the caller then does that work on its own
        connection. Nothing waits for a spare, so requests that each hold one connection
        cannot deadlock waiting for a second. Its snapshot is its own: use it for what the
        caller checks again in its transaction (candidate ids, not rows to return)."""
        pool = self._pool
        if pool is None:
            yield None
            return
        # none ready: no wait, and no login started for it (getconn would grow the pool)
        if pool.get_stats().get("pool_available", 0) == 0:
            yield None
            return
        try:
            conn = pool.getconn(timeout=SPARE_WAIT_SECONDS)
        except (PoolTimeout, PoolClosed):
            yield None
            return
        with self._transaction(tenant, self._held(pool, conn)) as c:
            yield c

    @contextmanager
    def _transaction(self, tenant: str,
                     connection: AbstractContextManager[psycopg.Connection[dict[str, Any]]]
                     ) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """:meth:`transaction` on the connection ``connection`` gives."""
        outer = _audited.get()
        pending: set[str] = set()
        token = _audited.set(pending if outer is None else outer)
        outer_writes = lexstats._writes.get()
        writes: dict[str, list[int]] = {}
        writes_token = lexstats._writes.set(writes if outer_writes is None else outer_writes)
        try:
            with connection as conn, conn.transaction():
                if self.citus:  # signed with the global pid, sent on to the workers
                    citus.set_tenant(conn, TENANT_SETTING,
                                     self._signed(tenant, self._sign_ids[conn]))
                else:
                    conn.execute("SELECT set_config(%s, %s, true)",
                                 (TENANT_SETTING, self._signed(tenant, conn.info.backend_pid)))
                outer_tenant = _tenants.get(conn)
                _tenants[conn] = tenant
                if outer_tenant is None:
                    _memos[conn] = {}
                try:
                    yield conn
                finally:
                    if outer_tenant is None:
                        _tenants.pop(conn, None)
                        _memos.pop(conn, None)
                    else:
                        _tenants[conn] = outer_tenant
        except psycopg.Error as exc:
            if self.citus and _lacks_tenant_key(exc):
                raise self._repair_tenant_key() from exc
            raise database_error(exc) from exc
        finally:
            _audited.reset(token)
            lexstats._writes.reset(writes_token)
        if outer is None:
            for t in sorted(pending):
                for hook in self.after_commit:
                    try:
                        hook(t)
                    except Exception:  # a mirror failure never undoes a commit
                        log.exception("after-commit hook failed for a tenant")
            for t in sorted(pending | writes.keys()):
                statements, rows = writes.get(t, (0, 0))
                self._count_write(t, max(statements, 1), rows)

    def _count_write(self, tenant: str, writes: int = 1, rows: int = 0) -> None:
        """After a commit of ``tenant`` that was audited or appended BM25 statistics'
        deltas (``writes``: the statements that did, at least 1; ``rows``: the memories
        they counted, :func:`lexstats.note_writes`): every :data:`lexstats.FOLD_EVERY`
        writes or :data:`lexstats.FOLD_ROWS` memories (in this process), fold its
        statistics' deltas and its pending access statistics (migration 0016)."""
        with self._fold_lock:
            n, r = self._fold_counts.get(tenant, (0, 0))
            n, r = n + writes, r + rows
            due = n >= lexstats.FOLD_EVERY or r >= lexstats.FOLD_ROWS
            self._fold_counts[tenant] = (0, 0) if due else (n, r)
        if due:
            self.fold_lexical(tenant)
            self.fold_accesses(tenant)

    def fold_accesses(self, tenant: str) -> int:
        """Count ``tenant``'s accesses waiting in ``memory_accesses`` into their memories
        (:func:`mnemovault.store.memories.fold_accesses`, a short transaction); how many.
        Never raises (a failure is logged; they stay for the next fold)."""
        try:
            with self.transaction(tenant) as conn:
                return memories.fold_accesses(conn, tenant)
        except Exception:
            log.exception("folding the pending access statistics failed (kept)")
            return 0

    def fold_lexical(self, tenant: str, scopes: list[str] | None = None, *,
                     wait: bool = False) -> int:
        """Fold the BM25 statistics' deltas of ``tenant`` (of ``scopes``; None: every
        scope that has some) into the base rows, one short transaction per scope
        (:func:`mnemovault.store.lexstats.fold`); a scope another fold holds is skipped
        unless ``wait``. How many delta rows were folded. Never raises: the statistics
        read the same with the deltas unfolded (a failure is logged)."""
        folded = 0
        try:
            if scopes is None:
                with self.transaction(tenant) as conn:
                    scopes = lexstats.delta_scopes(conn, tenant)
            for scope in scopes:
                with self.transaction(tenant) as conn:
                    folded += lexstats.fold(conn, tenant, scope, wait=wait) or 0
        except Exception:
            log.exception("folding the BM25 statistics' deltas failed (kept unfolded)")
        return folded

    def _repair_tenant_key(self) -> MnemoError:
        """A worker lacks ``mv_tenant_key`` (a node added by hand, without ``db add-node``):
        copy the key to every worker now (as the owner) and answer retryable; if that
        fails, say what fixes it. Either way the transaction was rolled back."""
        from mnemovault.store import citus_nodes

        try:
            citus_nodes.repair_tenant_key(self.url, self.app_role)
        except MnemoError as exc:
            log.error("citus: a worker has no tenant signing key and copying it failed: %s",
                      exc.message)
            return Unavailable(
                "database: a Citus worker has no tenant signing key (mv_tenant_key) and "
                "copying it there failed; run `mnemovault db add-node HOST PORT` for that "
                "node (or `mnemovault db upgrade`); nothing was changed")
        log.warning("citus: a worker had no tenant signing key (a node added without "
                    "`mnemovault db add-node`?); copied it to every worker")
        return Unavailable("database: a Citus worker had no tenant signing key "
                           "(mv_tenant_key); it has been copied to every worker now: "
                           "nothing was changed and retrying is safe")

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
            with self._connection() as conn, conn.transaction():
                yield conn
        except psycopg.Error as exc:
            raise database_error(exc) from exc

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """A pooled connection, as :meth:`ConnectionPool.connection` gives it, without the
        full pool timeout when the server is down (issue 29 item 4): after
        ``connect_timeout`` seconds with no connection free, the server is asked directly
        (one login, ``connect_timeout``); if it does not answer the request fails at once,
        else it waits for a pooled connection up to ``pool_timeout`` in all (the pool is
        busy, not broken).

        Raises:
            Unavailable: the server does not answer, or no connection was free within
                ``pool_timeout``.
        """
        pool = self._pool
        assert pool is not None
        started = time.monotonic()
        try:
            conn = pool.getconn(timeout=min(self.connect_timeout, self.pool_timeout))
        except PoolTimeout:
            if not self._server_answers():
                raise Unavailable("database: the server does not answer; nothing was "
                                  "changed and retrying later may work") from None
            left = self.pool_timeout - (time.monotonic() - started)
            try:
                conn = pool.getconn(timeout=max(0.1, left))
            except PoolTimeout:
                raise Unavailable(f"database: no connection free within "
                                  f"{self.pool_timeout:g} s (pool_max_size "
                                  f"{self.pool_max_size}); nothing was changed") from None
        with self._held(pool, conn) as held:
            yield held

    @contextmanager
    def _held(self, pool: ConnectionPool[psycopg.Connection[dict[str, Any]]],
              conn: psycopg.Connection[dict[str, Any]]
              ) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """``conn``, taken from ``pool``, back to it afterwards (stamped)."""
        try:
            with conn:
                yield conn
        finally:
            self._stamp(conn)
            pool.putconn(conn)

    def _server_answers(self) -> bool:
        """Whether the application login reaches the server now (a fresh connection,
        ``connect_timeout``)."""
        try:
            with psycopg.connect(self.app_url,
                                 connect_timeout=max(2, math.ceil(self.connect_timeout))):
                return True
        except psycopg.Error:
            return False
