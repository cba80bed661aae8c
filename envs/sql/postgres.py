"""PostgreSQL backend of SQL-v0, through SQLAlchemy (``dialect="postgresql", url=...``).

Setup (once per database version, under an advisory lock so parallel workers
do not race): every SQLite database of the task set is copied into its own
schema ``agentgym_sql_<db_id>`` (INTEGER -> BIGINT, REAL -> NUMERIC, TEXT ->
TEXT COLLATE "C" so text sorts as in SQLite), and a login role
``agentgym_sql_reader`` gets USAGE and SELECT on those schemas only, with
``default_transaction_read_only`` on.

Episodes connect as that role, never as the admin, and run each statement in
its own ``READ ONLY`` transaction with ``SET LOCAL statement_timeout`` and the
task's schema as the search path, then roll back. Read statements stream
through a server-side cursor, so only `max_rows + 1` rows ever reach the
client. The reader can neither write, nor read the trajectory store or any
other schema, nor regain the admin's rights (its session user is not a
superuser).
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

from agentgym.envs.sql.backends import QueryError, QueryLimits, check_statement
from agentgym.envs.sql.dataset import DATA_VERSION
from agentgym.envs.sql.results import QueryResult
from agentgym.envs.sql.statements import statement_kind

from agentgym.errors import ConfigError, require

PG_READ_KINDS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "EXPLAIN", "SHOW"})
_STREAMED = frozenset({"SELECT", "WITH", "VALUES", "TABLE"})
READER_ROLE = "agentgym_sql_reader"


def schema_name(db_id: str) -> str:
    """The PostgreSQL schema that holds database `db_id`."""
    return "agentgym_sql_" + re.sub(r"[^a-z0-9_]", "_", db_id.lower())


def _pg_type(sqlite_type: str) -> str:
    t = sqlite_type.upper()
    if "INT" in t:
        return "BIGINT"
    if any(k in t for k in ("REAL", "FLOA", "DOUB", "NUM", "DEC")):
        return "NUMERIC"
    return 'TEXT COLLATE "C"'


def _file_tag(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return f"agentgym-sql v{DATA_VERSION} sha256:{digest}"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PostgresBackend:
    """Runs each query in a read-only transaction as a role that can read only the task schemas."""

    dialect = "postgresql"
    allowed = PG_READ_KINDS

    def __init__(self, url: str, db_paths: dict[str, Path], limits: QueryLimits = QueryLimits(),
                 reader_role: str = READER_ROLE):
        sqlalchemy = require("sqlalchemy", extra="postgres", what="SQL-v0 on PostgreSQL")
        require("psycopg", extra="postgres", what="SQL-v0 on PostgreSQL")
        from sqlalchemy.engine import make_url
        from sqlalchemy.pool import NullPool

        if not re.fullmatch(r"[a-z_][a-z0-9_]*", reader_role):
            raise ConfigError(f"reader_role {reader_role!r} must be a lower-case SQL identifier")
        admin_url = make_url(url).set(drivername="postgresql+psycopg")
        self.db_paths, self.limits, self.reader_role = dict(db_paths), limits, reader_role
        admin = sqlalchemy.create_engine(admin_url, poolclass=NullPool)
        try:
            self._load(admin)
        except sqlalchemy.exc.OperationalError as exc:
            raise ConfigError(f"cannot reach PostgreSQL at {admin_url.render_as_string(hide_password=True)}: "
                              f"{exc.orig}. Start the server or pass another url") from None
        finally:
            admin.dispose()
        reader_url = admin_url.set(username=reader_role, password=None)
        self._engine = sqlalchemy.create_engine(reader_url, pool_size=1, max_overflow=4)

    # ---- setup -----------------------------------------------------------
    def _load(self, admin: Any) -> None:
        with admin.begin() as conn:
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtext('agentgym_sql_setup'))")
            conn.exec_driver_sql(
                f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{self.reader_role}') THEN "
                f"CREATE ROLE {self.reader_role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT; END IF; END $$")
            conn.exec_driver_sql(f"ALTER ROLE {self.reader_role} SET default_transaction_read_only = on")
            conn.exec_driver_sql(f"ALTER ROLE {self.reader_role} SET statement_timeout = '60s'")
            for db_id, path in self.db_paths.items():
                self._load_one(conn, db_id, Path(path))

    def _load_one(self, conn: Any, db_id: str, path: Path) -> None:
        schema, tag = schema_name(db_id), _file_tag(path)
        current = conn.exec_driver_sql(
            "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %(s)s", {"s": schema}
        ).scalar()
        if current != tag:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
            source = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
            try:
                self._copy_tables(conn, source, schema)
            finally:
                source.close()
            conn.exec_driver_sql(f"COMMENT ON SCHEMA {schema} IS '{tag}'")
        conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA {schema} TO {self.reader_role}")
        conn.exec_driver_sql(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {self.reader_role}")

    @staticmethod
    def _copy_tables(conn: Any, source: sqlite3.Connection, schema: str) -> None:
        tables = [r[0] for r in source.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
        for table in tables:
            cols = list(source.execute(f"PRAGMA table_info({_q(table)})"))
            ddl = ", ".join(f"{_q(c[1])} {_pg_type(c[2] or '')}" for c in cols)
            conn.exec_driver_sql(f"CREATE TABLE {schema}.{_q(table)} ({ddl})")
            rows = source.execute(f"SELECT * FROM {_q(table)}").fetchall()
            if rows:
                marks = ", ".join(["%s"] * len(cols))
                conn.exec_driver_sql(f"INSERT INTO {schema}.{_q(table)} VALUES ({marks})", rows)

    # ---- queries ---------------------------------------------------------
    def run(self, db_id: str, sql: str, *, max_rows: int) -> QueryResult:
        statement = check_statement(sql, allowed=self.allowed, dialect=self.dialect, limits=self.limits)
        if db_id not in self.db_paths:
            raise QueryError(f"database {db_id!r} is not loaded into PostgreSQL", kind="refused")
        import psycopg
        import sqlalchemy

        started = time.monotonic()
        try:
            with self._engine.connect() as conn:
                raw = conn.connection.driver_connection
                try:
                    return self._run_in(raw, db_id, statement, max_rows, started)
                except psycopg.OperationalError:
                    conn.invalidate()  # a dead connection must not go back to the pool
                    raise
                finally:
                    if not conn.invalidated:
                        raw.rollback()
        except sqlalchemy.exc.OperationalError as exc:
            raise QueryError(f"the PostgreSQL server is unavailable: {exc.orig}", kind="unavailable") from None
        except psycopg.errors.QueryCanceled:
            raise QueryError(f"the statement ran past the {self.limits.timeout_s:g} s timeout and was stopped; "
                             "add filters or LIMIT", kind="timeout") from None
        except psycopg.OperationalError as exc:
            raise QueryError(f"the PostgreSQL server is unavailable: {exc}", kind="unavailable") from None
        except psycopg.Error as exc:
            primary = exc.diag.message_primary if exc.diag and exc.diag.message_primary else str(exc)
            raise QueryError(f"{type(exc).__name__}: {primary}") from None
        except UnicodeEncodeError as exc:
            raise QueryError(f"the query is not valid Unicode text (a lone surrogate at position {exc.start}); "
                             "send plain UTF-8 text", kind="refused") from None
        except ValueError as exc:
            raise QueryError(f"{type(exc).__name__}: {exc}") from None

    def _run_in(self, raw: Any, db_id: str, statement: str, max_rows: int, started: float) -> QueryResult:
        timeout_ms = max(int(self.limits.timeout_s * 1000), 1)
        raw.execute(f"SET TRANSACTION READ ONLY; SET LOCAL statement_timeout = {timeout_ms}; "  # one round trip
                    f"SET LOCAL search_path TO {schema_name(db_id)}")
        streamed = statement_kind(statement) in _STREAMED
        with (raw.cursor(name="agentgym_sql_episode") if streamed else raw.cursor()) as cursor:
            cursor.execute(statement)
            description = cursor.description
            rows = cursor.fetchmany(max_rows + 1) if description else []
        columns = tuple(d.name for d in description or ())
        return QueryResult(columns, tuple(tuple(r) for r in rows[:max_rows]), len(rows) > max_rows,
                           time.monotonic() - started)

    def close(self) -> None:
        self._engine.dispose()
