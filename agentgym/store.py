"""The trajectory store: episodes and their turns in a SQL database.

A SQLite file by default, PostgreSQL by URL, both through SQLAlchemy 2:

    store = TrajectoryStore("runs/demo.db")                   # SQLite file
    store = TrajectoryStore("postgresql://user@host/db")      # PostgreSQL

Writes are idempotent, keyed by episode id (writing an episode again replaces
it). Queries filter by run, env, task, group, status, failure and reward, and
are paginated so that stores of 100,000+ episodes stay fast. Run metrics (the
training curves) live beside the episodes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, SQLAlchemyError

from agentgym.cost import SUMMED
from agentgym.errors import StoreError
from agentgym.store_schema import (
    EPISODE_COLUMNS,
    SCHEMA_VERSION,
    chunks,
    cost_row,
    episode_costs_table,
    episode_from_row,
    episode_row,
    episodes_table,
    export_record,
    load_turns,
    meta_table,
    metadata,
    metrics_table,
    runs_table,
    turn_credit_table,
    turn_row,
    turns_table,
)
from agentgym.trajectory import Episode, EpisodeStatus, Failure, Turn

if TYPE_CHECKING:
    from agentgym.credit.record import TurnCredit

log = logging.getLogger("agentgym.store")
T = TypeVar("T")
_TRIES = 4  #: attempts of a write or a read when the database drops the connection

#: the reasons `end_in_flight` stores (infra failures: the data manager retries them, they are never trained)
IN_FLIGHT_AT_RESUME = "in flight when the trainer stopped (killed); ended on resume"
IN_FLIGHT_AT_END = "in flight when the run ended; collection stopped"

__all__ = ["IN_FLIGHT_AT_END", "IN_FLIGHT_AT_RESUME", "SCHEMA_VERSION", "EpisodeFilter", "TrajectoryStore", "episodes_table", "export_record", "meta_table",
           "metadata", "metrics_table", "normalise_url", "runs_table", "turn_credit_table", "turns_table"]


def normalise_url(url: str | Path) -> str:
    """A SQLAlchemy URL for `url`: bare paths become SQLite files, PostgreSQL gets an installed driver."""
    text = str(url)
    if "://" not in text:
        if not text or text.endswith("/"):
            raise StoreError(f"store URL {text!r} is neither a database URL nor a file path; use e.g. runs/demo.db")
        return f"sqlite:///{Path(text).expanduser()}"
    try:
        parsed = make_url(text)
    except ArgumentError as exc:
        raise StoreError(
            f"cannot parse store URL {text!r} ({exc}); use 'sqlite:///path.db', a file path, "
            "or 'postgresql://user@host:port/db'"
        ) from None
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise StoreError(
            f"unsupported store backend '{backend}' in {text!r}: agentgym stores episodes in SQLite "
            "('sqlite:///path.db' or a plain path) or PostgreSQL ('postgresql://user@host/db')"
        )
    if backend == "postgresql" and parsed.get_driver_name() in ("", "psycopg2"):
        parsed = parsed.set(drivername="postgresql+" + _postgres_driver())
    return parsed.render_as_string(hide_password=False)


def _postgres_driver() -> str:
    import importlib.util

    for module, driver in (("psycopg", "psycopg"), ("psycopg2", "psycopg2")):
        if importlib.util.find_spec(module) is not None:
            return driver
    raise StoreError(
        "a PostgreSQL store needs a driver; install it with: pip install 'agentgym[postgres]'"
    )


@dataclass(frozen=True)
class EpisodeFilter:
    """Which episodes a query selects; None means any."""

    run_id: str | None = None
    env_id: str | None = None
    task_id: str | None = None
    group_id: str | None = None
    parent_id: str | None = None
    status: str | Sequence[str] | None = None
    failure: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    policy_version: int | None = None

    def where(self) -> list[Any]:
        c = episodes_table.c
        clauses: list[Any] = []
        for name in ("run_id", "env_id", "task_id", "group_id", "parent_id", "policy_version"):
            value = getattr(self, name)
            if value is not None:
                clauses.append(c[name] == value)
        if isinstance(self.status, str):
            clauses.append(c.status == self.status)
        elif self.status is not None:
            clauses.append(c.status.in_(list(self.status)))
        if self.failure == "none":
            clauses.append(c.failure.is_(None))
        elif self.failure is not None:
            clauses.append(c.failure == self.failure)
        if self.min_reward is not None:
            clauses.append(c.total_reward >= self.min_reward)
        if self.max_reward is not None:
            clauses.append(c.total_reward <= self.max_reward)
        return clauses


_SORTABLE = {"created_at", "total_reward", "num_turns", "task_id", "env_id", "status", "policy_version"}


def _dropped(exc: OperationalError) -> bool:
    """True when the server closed a connection it had accepted (``pg_terminate_backend``, a restart), as
    opposed to refusing it (not running, wrong port, bad login, no such database), which will not heal."""
    text = str(exc.orig).lower()
    return any(word in text for word in ("terminat", "closed the connection", "server closed", "connection reset",
                                         "ssl syscall", "consuming input failed"))


class TrajectoryStore:
    """Episodes, turns, runs and metrics in one SQL database (SQLite file or PostgreSQL)."""

    def __init__(self, url: str | Path = "agentgym.db", *, create: bool = True, echo: bool = False):
        self.url = normalise_url(url)
        self.engine = self._connect(self.url, echo)
        # the probe in `_connect` passed: a dropped connection now is run again, as reads and writes are
        self._retrying(lambda: self._check_schema(create), "opening")

    # ---- opening ---------------------------------------------------------
    @staticmethod
    def _connect(url: str, echo: bool) -> Engine:
        kwargs: dict[str, Any] = {"echo": echo, "future": True}
        if url.startswith("sqlite"):
            path = make_url(url).database
            if path and path != ":memory:":
                parent = Path(path).expanduser().resolve().parent
                if not parent.exists():
                    raise StoreError(f"cannot create SQLite store {path!r}: folder {str(parent)!r} does not exist")
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        else:
            kwargs["pool_pre_ping"] = True
        try:
            engine = sa.create_engine(url, **kwargs)
            for attempt in range(_TRIES):
                try:
                    with engine.connect() as conn:
                        conn.execute(sa.text("SELECT 1"))
                    break
                except OperationalError as exc:  # dropped right after connecting: again; refused, bad login: fail
                    if attempt == _TRIES - 1 or not _dropped(exc):
                        raise
                    time.sleep(0.2 * (attempt + 1))
        except NoSuchModuleError as exc:
            raise StoreError(f"no SQLAlchemy driver for store URL {url!r}: {exc}") from None
        except (OperationalError, SQLAlchemyError, OSError) as exc:
            reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0] if str(exc) else type(exc).__name__
            raise StoreError(
                f"cannot open store {make_url(url).render_as_string(hide_password=True)!r}: {reason}. "
                "Check that the server is running and the URL's host, port, user and database are right."
            ) from None
        if url.startswith("sqlite"):
            sa.event.listen(engine, "connect", _sqlite_pragmas)
            engine.dispose()
        return engine

    def _check_schema(self, create: bool) -> None:
        inspector = sa.inspect(self.engine)
        tables = set(inspector.get_table_names())
        if "episodes" in tables and "agentgym_meta" not in tables:
            raise StoreError(
                f"store {self.display_url} has an 'episodes' table from before schema versioning; "
                "export it with the agentgym version that wrote it, or point at a new store"
            )
        if "agentgym_meta" in tables:
            with self.engine.connect() as conn:
                row = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version")).first()
            # no row yet: another process is creating this store right now
            if row is not None and int(row[0]) != SCHEMA_VERSION:
                raise StoreError(
                    f"store {self.display_url} has schema version {row[0]}, this agentgym reads version "
                    f"{SCHEMA_VERSION}; open it with a matching agentgym or export and re-import the episodes"
                )
        if not create and "episodes" not in tables:
            raise StoreError(f"store {self.display_url} holds no agentgym episodes (no 'episodes' table)")
        self._create_schema()

    def _create_schema(self) -> None:
        """Create missing tables and the version row; safe when several processes open a new store at once."""
        for attempt in range(5):
            try:
                metadata.create_all(self.engine)
                with self.engine.begin() as conn:
                    exists = conn.execute(
                        sa.select(meta_table.c.key).where(meta_table.c.key == "schema_version")).first()
                    if not exists:
                        conn.execute(sa.insert(meta_table).values(key="schema_version", value=str(SCHEMA_VERSION)))
                return
            except (OperationalError, sa.exc.ProgrammingError, sa.exc.IntegrityError):
                if attempt == 4:
                    raise
                time.sleep(0.05 * (attempt + 1))

    @property
    def display_url(self) -> str:
        return make_url(self.url).render_as_string(hide_password=True)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> TrajectoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- writing ---------------------------------------------------------
    def _write(self, work: Callable[[sa.Connection], T]) -> T:
        """Run `work` in one transaction, again (up to `_TRIES` times) when the database dropped the connection
        or was busy (a server restart, ``pg_terminate_backend``, a locked SQLite file): every write here
        replaces rows by key, so running it again is safe."""
        return self._again(work, self.engine.begin, "write")

    def _read(self, work: Callable[[sa.Connection], T]) -> T:
        """Run the query `work` on a connection, again when the database dropped it (see `_write`)."""
        return self._again(work, self.engine.connect, "read")

    def _again(self, work: Callable[[sa.Connection], T], connect: Callable[[], Any], what: str) -> T:
        def once() -> T:
            with connect() as conn:
                return work(conn)
        return self._retrying(once, what)

    @staticmethod
    def _retrying(call: Callable[[], T], what: str) -> T:
        """`call()`, again (up to `_TRIES` times) when the database dropped the connection or was busy."""
        for attempt in range(_TRIES):
            try:
                return call()
            except OperationalError as exc:
                if attempt == _TRIES - 1:
                    raise
                log.warning("store %s failed (%s); trying again", what, str(exc.orig).strip().splitlines()[0])
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def put(self, episode: Episode) -> None:
        """Write one episode (replacing any earlier version with the same id)."""
        self.put_many([episode])

    def put_many(self, episodes: Iterable[Episode]) -> int:
        """Write episodes in one transaction; returns how many were written."""
        episodes = list(episodes)
        if not episodes:
            return 0
        ids = [e.id for e in episodes]
        ep_rows = [episode_row(e) for e in episodes]
        turn_rows = [turn_row(e.id, t) for e in episodes for t in e.turns]
        cost_rows = [row for row in map(cost_row, episodes) if row is not None]

        def write(conn: sa.Connection) -> None:
            for chunk in chunks(ids, 500):
                for table, column in ((turns_table, "episode_id"), (episode_costs_table, "episode_id"),
                                      (episodes_table, "id")):
                    conn.execute(sa.delete(table).where(table.c[column].in_(chunk)))
            conn.execute(sa.insert(episodes_table), ep_rows)
            if turn_rows:
                conn.execute(sa.insert(turns_table), turn_rows)
            if cost_rows:
                conn.execute(sa.insert(episode_costs_table), cost_rows)

        self._write(write)
        return len(episodes)

    def end_in_flight(self, run_id: str, reason: str) -> int:
        """End every episode of `run_id` still stored as in flight (its collector stopped or died before it ended)
        as ``error`` / ``infra`` with `reason`; returns how many. Run by a trainer on resume and when it stops."""
        partial = [e for e in self.iter_episodes(run_id=run_id, status="partial") if e.metadata.get("in_flight")]
        for episode in partial:
            episode.metadata.pop("in_flight")
            episode.end(EpisodeStatus.ERROR, reason, Failure.INFRA)
        return self.put_many(partial)

    def put_credit(self, records: Iterable[TurnCredit]) -> int:
        """Write what training computed per turn (replacing earlier records of the same turns), and set
        `turns.advantage` of every trained turn. Returns how many records were written."""
        rows = [asdict(r) for r in records]
        if not rows:
            return 0
        trained = [{"eid": r["episode_id"], "idx": r["index"], "adv": r["advantage"]} for r in rows if not r["dropped"]]
        keys = sa.tuple_(turn_credit_table.c.episode_id, turn_credit_table.c["index"])

        def write(conn: sa.Connection) -> None:
            for chunk in chunks(rows, 400):
                conn.execute(sa.delete(turn_credit_table).where(
                    keys.in_([(r["episode_id"], r["index"]) for r in chunk])))
            conn.execute(sa.insert(turn_credit_table), rows)
            if trained:
                conn.execute(sa.update(turns_table).where(
                    (turns_table.c.episode_id == sa.bindparam("eid")) & (turns_table.c["index"] == sa.bindparam("idx"))
                ).values(advantage=sa.bindparam("adv")).execution_options(synchronize_session=False), trained)

        self._write(write)
        return len(rows)

    def credit(self, episode_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """Episode id -> its turns' credit records (dicts, in turn order); episodes without any are absent."""
        out: dict[str, list[dict[str, Any]]] = {}
        with self.engine.connect() as conn:
            for chunk in chunks(list(episode_ids), 500):
                query = sa.select(turn_credit_table).where(turn_credit_table.c.episode_id.in_(chunk)).order_by(
                    turn_credit_table.c.episode_id, turn_credit_table.c["index"])
                for r in conn.execute(query).mappings():
                    out.setdefault(r["episode_id"], []).append(dict(r))
        return out

    def delete(self, episode_id: str) -> bool:
        def write(conn: sa.Connection) -> bool:
            for table in (turn_credit_table, turns_table, episode_costs_table):
                conn.execute(sa.delete(table).where(table.c.episode_id == episode_id))
            return conn.execute(sa.delete(episodes_table).where(episodes_table.c.id == episode_id)).rowcount > 0

        return self._write(write)

    def log_run(self, run_id: str, config: dict[str, Any] | None = None) -> None:
        """Record a run and its config (idempotent)."""
        def write(conn: sa.Connection) -> None:
            conn.execute(sa.delete(runs_table).where(runs_table.c.id == run_id))
            conn.execute(sa.insert(runs_table).values(id=run_id, created_at=time.time(), config=config or {}))

        self._write(write)

    def log_metrics(self, run_id: str, step: int, values: dict[str, float]) -> None:
        """Record one step of a run's metrics (idempotent per run and step)."""
        def write(conn: sa.Connection) -> None:
            conn.execute(sa.delete(metrics_table).where(
                (metrics_table.c.run_id == run_id) & (metrics_table.c.step == step)))
            conn.execute(sa.insert(metrics_table).values(run_id=run_id, step=step, time=time.time(), values=values))

        self._write(write)

    # ---- reading ---------------------------------------------------------
    def get(self, episode_id: str) -> Episode:
        """One episode with its turns; `StoreError` naming the id when it is absent."""
        found = self.get_many([episode_id])
        if not found:
            raise StoreError(f"no episode with id '{episode_id}' in store {self.display_url}")
        return found[0]

    def get_many(self, episode_ids: Sequence[str]) -> list[Episode]:
        def read(conn: sa.Connection) -> tuple[dict[str, Any], dict[str, list[Turn]]]:
            rows = conn.execute(sa.select(episodes_table).where(episodes_table.c.id.in_(list(episode_ids)))).mappings().all()
            by_id = {r["id"]: r for r in rows}
            return by_id, load_turns(conn, list(by_id))

        by_id, turns = self._read(read)
        return [episode_from_row(by_id[i], turns.get(i, [])) for i in episode_ids if i in by_id]

    def count(self, filter: EpisodeFilter | None = None, **filters: Any) -> int:
        flt = filter or EpisodeFilter(**filters)
        query = sa.select(sa.func.count()).select_from(episodes_table).where(*flt.where())
        return self._read(lambda conn: int(conn.execute(query).scalar_one()))

    def summaries(
        self,
        filter: EpisodeFilter | None = None,
        *,
        order_by: str = "created_at",
        descending: bool = False,
        limit: int | None = None,
        offset: int = 0,
        **filters: Any,
    ) -> list[dict[str, Any]]:
        """Episode rows without turns (cheap: for listings and pagination)."""
        flt = filter or EpisodeFilter(**filters)
        if order_by not in _SORTABLE:
            raise StoreError(f"cannot sort episodes by {order_by!r}; choose one of {sorted(_SORTABLE)}")
        column = episodes_table.c[order_by]
        query = (
            sa.select(episodes_table)
            .where(*flt.where())
            .order_by(column.desc() if descending else column.asc(), episodes_table.c.id)
            .offset(offset)
        )
        if limit is not None:
            query = query.limit(limit)
        return self._read(lambda conn: [dict(r) for r in conn.execute(query).mappings().all()])

    def episodes(self, filter: EpisodeFilter | None = None, **kwargs: Any) -> list[Episode]:
        """Full episodes (with turns) matching the filter; same arguments as `summaries`."""
        rows = self.summaries(filter, **kwargs)
        turns = self._read(lambda conn: load_turns(conn, [r["id"] for r in rows]))
        return [episode_from_row(r, turns.get(r["id"], [])) for r in rows]

    def iter_episodes(self, filter: EpisodeFilter | None = None, *, batch_size: int = 500, **filters: Any) -> Iterator[Episode]:
        """Stream every matching episode in creation order, `batch_size` at a time."""
        flt = filter or EpisodeFilter(**filters)
        offset = 0
        while True:
            batch = self.episodes(flt, limit=batch_size, offset=offset)
            yield from batch
            if len(batch) < batch_size:
                return
            offset += batch_size

    def distinct(self, column: str, filter: EpisodeFilter | None = None) -> list[Any]:
        """The distinct values of one episode column (e.g. env ids of a run)."""
        if column not in EPISODE_COLUMNS:
            raise StoreError(f"unknown episode column {column!r}")
        flt = filter or EpisodeFilter()
        col = episodes_table.c[column]
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(sa.select(col).where(*flt.where()).distinct().order_by(col))]

    def runs(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(runs_table).order_by(runs_table.c.created_at)).mappings().all()
            known = {r["id"] for r in rows}
            extra = [r[0] for r in conn.execute(sa.select(episodes_table.c.run_id).distinct()) if r[0] not in known]
        return [dict(r) for r in rows] + [{"id": rid, "created_at": None, "config": {}} for rid in extra]

    def run_costs(self, run_id: str) -> dict[str, float]:
        """What a run's episodes cost in all (`agentgym.cost`): sums, ``env_peak_mb`` the maximum, ``episodes``."""
        c = episode_costs_table.c
        columns = [sa.func.count().label("episodes"), sa.func.max(c.env_peak_mb).label("env_peak_mb"),
                   *[sa.func.sum(c[name]).label(name) for name in SUMMED]]
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(*columns).where(c.run_id == run_id)).mappings().one()
        return {k: round(float(v or 0), 4) for k, v in row.items()}

    def metrics(self, run_id: str) -> list[dict[str, Any]]:
        """A run's metrics as rows {step, time, **values}, in step order."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(metrics_table).where(metrics_table.c.run_id == run_id).order_by(metrics_table.c.step)
            ).mappings().all()
        return [{"step": r["step"], "time": r["time"], **(r["values"] or {})} for r in rows]

    # ---- export ----------------------------------------------------------
    def export_jsonl(self, path: str | Path, filter: EpisodeFilter | None = None, **filters: Any) -> int:
        """Write matching episodes as JSON lines that `datasets.load_dataset("json", ...)` reads.

        `info`, `timings` and `metadata` are JSON-encoded strings, because their keys vary
        from row to row and Arrow needs one schema per column.
        """
        count = 0
        with open(path, "w", encoding="utf-8") as fh:
            for episode in self.iter_episodes(filter, **filters):
                fh.write(json.dumps(export_record(episode), ensure_ascii=False) + "\n")
                count += 1
        return count


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
