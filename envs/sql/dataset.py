"""Tasks and databases of SQL-v0: the built-in generated domains and their task set.

A task is a database, a question and a gold query. The built-in task set comes
from `envs.sql.domains`: each domain declares its tables, a seeded generator
of rows and question templates; `build_database` writes the rows into a SQLite
file under the agentgym cache (``$AGENTGYM_CACHE/sql``), once, atomically, so
concurrent first uses do not see half-written files. The same seed always gives
the same bytes of data, so task answers never drift between machines.
"""

from __future__ import annotations

import os
import random
import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Bump when a domain's tables or rows change, so cached files are rebuilt.
DATA_VERSION = 1
DIFFICULTIES = ("easy", "medium", "hard")


@dataclass(frozen=True)
class Column:
    """One column: SQL type is INTEGER, REAL or TEXT (dates are ISO-8601 TEXT)."""

    name: str
    type: str
    primary_key: bool = False
    references: str | None = None  # "table.column"
    nullable: bool = True


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]

    def ddl(self) -> str:
        """The SQLite CREATE TABLE statement."""
        parts = []
        for c in self.columns:
            text = f"{c.name} {c.type}" + (" PRIMARY KEY" if c.primary_key else "")
            text += "" if c.nullable or c.primary_key else " NOT NULL"
            if c.references:
                table, col = c.references.split(".")
                text += f" REFERENCES {table}({col})"
            parts.append(text)
        return f"CREATE TABLE {self.name} ({', '.join(parts)})"


@dataclass(frozen=True)
class Template:
    """A question pattern with its gold SQL, instantiated once per parameter dict."""

    difficulty: str
    question: str
    sql: str
    params: tuple[dict[str, Any], ...] = ({},)


@dataclass(frozen=True)
class Domain:
    """A generated database: its tables, a seeded row generator and its question templates."""

    name: str
    description: str
    tables: tuple[Table, ...]
    populate: Callable[[random.Random], dict[str, list[tuple[Any, ...]]]]
    templates: tuple[Template, ...]


@dataclass(frozen=True)
class SqlTask:
    """One task: which database, the question, the gold query and a difficulty tag."""

    id: str
    db_id: str
    question: str
    gold: str
    difficulty: str = ""
    evidence: str = ""  # BIRD's external-knowledge hint, shown with the question when present


@dataclass
class TaskSet:
    """Tasks plus where each database lives (a SQLite file per db_id)."""

    name: str
    tasks: list[SqlTask]
    db_paths: dict[str, Path] = field(default_factory=dict)

    def by_id(self) -> dict[str, SqlTask]:
        return {t.id: t for t in self.tasks}


def default_data_dir() -> Path:
    """Where generated databases are cached (``$AGENTGYM_CACHE/sql``)."""
    from agentgym.cache import default_cache_dir

    return default_cache_dir() / "sql"


def build_database(domain: Domain, directory: Path) -> Path:
    """The SQLite file of `domain` in `directory`, generated on first use (atomic rename)."""
    path = directory / f"{domain.name}-v{DATA_VERSION}.sqlite"
    if path.exists():
        return path
    directory.mkdir(parents=True, exist_ok=True)
    rows = domain.populate(random.Random(f"agentgym-sql-{domain.name}-v{DATA_VERSION}"))
    fd, tmp = tempfile.mkstemp(prefix=f".{domain.name}-", suffix=".sqlite", dir=directory)
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp)
        with conn:
            for table in domain.tables:
                conn.execute(table.ddl())
                marks = ", ".join("?" * len(table.columns))
                conn.executemany(f"INSERT INTO {table.name} VALUES ({marks})", rows[table.name])
        conn.close()
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def domain_tasks(domain: Domain) -> list[SqlTask]:
    """Every instantiation of every template of `domain`, ids ``<domain>-<difficulty>-<n>``."""
    tasks: list[SqlTask] = []
    counters = dict.fromkeys(DIFFICULTIES, 0)
    for template in domain.templates:
        for params in template.params:
            n = counters[template.difficulty]
            counters[template.difficulty] += 1
            tasks.append(SqlTask(id=f"{domain.name}-{template.difficulty}-{n}", db_id=domain.name,
                                 question=template.question.format(**params), gold=template.sql.format(**params),
                                 difficulty=template.difficulty))
    return tasks


def builtin_taskset(data_dir: str | os.PathLike[str] | None = None,
                    domains: Sequence[str] | None = None) -> TaskSet:
    """The generated task set (all domains, or the named ones), databases built on first use."""
    from agentgym.envs.sql.domains import DOMAINS

    unknown = sorted(set(domains or ()) - set(DOMAINS))
    if unknown:
        raise ValueError(f"unknown SQL domain(s) {unknown}; choose from {sorted(DOMAINS)}")
    directory = Path(data_dir) if data_dir else default_data_dir()
    chosen = [DOMAINS[name] for name in (domains or DOMAINS)]
    tasks = [task for domain in chosen for task in domain_tasks(domain)]
    paths = {domain.name: build_database(domain, directory) for domain in chosen}
    return TaskSet("builtin", tasks, paths)
