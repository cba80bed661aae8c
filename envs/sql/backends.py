"""Where queries run: a read-only SQLite connection per database (PostgreSQL lives in `envs.sql.postgres`).

Every backend enforces the same rules before the database sees a query:
one statement per call, a read statement (SELECT, WITH, VALUES, EXPLAIN, and
for SQLite a few read-only PRAGMAs), no ATTACH, a length cap. Then the
database enforces them again: SQLite files are opened with
``mode=ro&immutable=1`` and an authorizer that denies every write, attach and
state-changing pragma; a progress handler aborts statements that run past the
timeout; SQLite's length limit keeps a single value from growing past 1 MB.
Only `max_rows + 1` rows are ever fetched, so a huge result costs no memory.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

from agentgym.envs.sql.results import QueryResult
from agentgym.envs.sql.statements import split_statements, statement_kind

from agentgym.errors import AgentGymError

SQLITE_READ_KINDS = frozenset({"SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA"})
#: PRAGMAs that only read the schema (whatever their argument); every other PRAGMA is denied.
SQLITE_READ_PRAGMAS = frozenset({"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
                                 "foreign_key_list", "table_list", "collation_list", "database_list"})
_MAX_VALUE_BYTES = 1_000_000


class QueryError(AgentGymError):
    """A query that failed: `kind` is 'sql_error', 'timeout' or 'refused'; the message is shown to the model."""

    def __init__(self, message: str, *, kind: str = "sql_error"):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class QueryLimits:
    """Per-statement limits shared by every backend."""

    timeout_s: float = 2.0
    max_query_chars: int = 20_000


class SqlBackend(Protocol):
    """Runs one read statement on one database and returns at most `max_rows` rows (+ whether more exist)."""

    dialect: str

    def run(self, db_id: str, sql: str, *, max_rows: int) -> QueryResult: ...

    def close(self) -> None: ...


def check_statement(sql: str, *, allowed: frozenset[str], dialect: str, limits: QueryLimits) -> str:
    """The single statement of `sql`, or `QueryError(kind='refused')` naming the rule it breaks."""
    if len(sql) > limits.max_query_chars:
        raise QueryError(f"the query is {len(sql):,} characters long; the limit is {limits.max_query_chars:,}. "
                         "Write a shorter query", kind="refused")
    if "\x00" in sql:
        raise QueryError("the query contains a NUL character; remove it", kind="refused")
    bad = next((i for i, ch in enumerate(sql) if "\ud800" <= ch <= "\udfff"), None)
    if bad is not None:
        raise QueryError(f"the query is not valid Unicode text (a lone surrogate at position {bad}); "
                         "send plain UTF-8 text", kind="refused")
    statements = split_statements(sql)
    if not statements:
        raise QueryError("the query is empty; write one SQL statement", kind="refused")
    if len(statements) > 1:
        raise QueryError(f"the query holds {len(statements)} statements; multiple statements are not allowed. "
                         "Send one statement per call", kind="refused")
    kind = statement_kind(statements[0])
    if kind in ("ATTACH", "DETACH"):
        raise QueryError("attaching databases is not allowed; query only the tables of this database",
                         kind="refused")
    if kind not in allowed:
        shown = kind or statements[0][:30]
        raise QueryError(f"{shown} statements are not allowed: the {dialect} database is read-only here. "
                         f"Use one of: {', '.join(sorted(allowed))}", kind="refused")
    return statements[0]


class _Authorizer:
    """SQLite authorizer: reads only; remembers why it denied, for a clear message."""

    _READS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}

    def __init__(self) -> None:
        self.denied = ""

    def __call__(self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        if action in self._READS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in SQLITE_READ_PRAGMAS:
            return sqlite3.SQLITE_OK
        if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
            self.denied = "attaching databases is not allowed; query only the tables of this database"
        elif action == sqlite3.SQLITE_PRAGMA:
            self.denied = (f"PRAGMA {arg1}{'=' + arg2 if arg2 else ''} is not allowed; only schema-reading pragmas "
                           f"run here ({', '.join(sorted(SQLITE_READ_PRAGMAS))})")
        else:
            self.denied = "the database is read-only: only SELECT-style statements run here"
        return sqlite3.SQLITE_DENY


class SqliteBackend:
    """Read-only SQLite: one immutable, authorizer-guarded connection per database file."""

    dialect = "sqlite"
    allowed = SQLITE_READ_KINDS

    def __init__(self, db_paths: dict[str, Path], limits: QueryLimits = QueryLimits()):
        self.db_paths = dict(db_paths)
        self.limits = limits
        self._conns: dict[str, tuple[sqlite3.Connection, _Authorizer]] = {}
        self._lock = threading.Lock()
        self._deadline = 0.0

    def _connect(self, db_id: str) -> tuple[sqlite3.Connection, _Authorizer]:
        if db_id not in self._conns:
            path = self.db_paths.get(db_id)
            if path is None or not Path(path).is_file():
                raise QueryError(f"database {db_id!r} has no SQLite file (looked for {path})", kind="refused")
            uri = f"file:{quote(str(Path(path).resolve()))}?mode=ro&immutable=1"
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_VALUE_BYTES)
            conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, max(self.limits.max_query_chars * 4, 1000))
            conn.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
            authorizer = _Authorizer()
            conn.set_authorizer(authorizer)
            conn.set_progress_handler(self._past_deadline, 2_000)
            self._conns[db_id] = (conn, authorizer)
        return self._conns[db_id]

    def _past_deadline(self) -> int:
        return int(time.monotonic() > self._deadline)

    def run(self, db_id: str, sql: str, *, max_rows: int) -> QueryResult:
        statement = check_statement(sql, allowed=self.allowed, dialect=self.dialect, limits=self.limits)
        with self._lock:
            conn, authorizer = self._connect(db_id)
            authorizer.denied = ""
            started = time.monotonic()
            self._deadline = started + self.limits.timeout_s
            cursor = conn.cursor()
            try:
                cursor.execute(statement)
                rows = cursor.fetchmany(max_rows + 1) if cursor.description else []
            except sqlite3.Error as exc:
                if str(exc) == "interrupted":
                    raise QueryError(f"the statement ran past the {self.limits.timeout_s:g} s timeout and was "
                                     "stopped; add filters or LIMIT", kind="timeout") from None
                if authorizer.denied:
                    raise QueryError(authorizer.denied, kind="refused") from None
                raise QueryError(f"{type(exc).__name__}: {exc}") from None
            except UnicodeEncodeError as exc:
                raise QueryError(f"the query is not valid Unicode text (a lone surrogate at position {exc.start}); "
                                 "send plain UTF-8 text", kind="refused") from None
            except (ValueError, OverflowError) as exc:
                raise QueryError(f"{type(exc).__name__}: {exc}") from None
            finally:
                cursor.close()
        columns = tuple(d[0] for d in cursor.description or ())
        return QueryResult(columns, tuple(tuple(r) for r in rows[:max_rows]), len(rows) > max_rows,
                           time.monotonic() - started)

    def table_summaries(self, db_id: str) -> Sequence[str]:
        """One line per table: ``name(col TYPE, ...)`` plus its foreign keys, for the prompt."""
        conn, _ = self._connect(db_id)
        with self._lock:
            names = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
            lines = []
            for name in names:
                cols = [f"{r[1]} {r[2] or 'ANY'}".strip() + (" PRIMARY KEY" if r[5] else "")
                        for r in conn.execute(f"PRAGMA table_info({_quote_ident(name)})")]
                fks = [f"{r[3]} -> {r[2]}.{r[4] or 'rowid'}"
                       for r in conn.execute(f"PRAGMA foreign_key_list({_quote_ident(name)})")]
                lines.append(f"{name}({', '.join(cols)})" + (f"  foreign keys: {', '.join(fks)}" if fks else ""))
        return lines

    def close(self) -> None:
        with self._lock:
            for conn, _ in self._conns.values():
                conn.close()
            self._conns.clear()


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
