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
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, SQLAlchemyError

from agentgym.errors import StoreError
from agentgym.trajectory import Episode, Turn

SCHEMA_VERSION = 1

metadata = sa.MetaData()

meta_table = sa.Table(
    "agentgym_meta", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

episodes_table = sa.Table(
    "episodes", metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("run_id", sa.String(128), nullable=False, default=""),
    sa.Column("env_id", sa.String(128), nullable=False, default=""),
    sa.Column("task_id", sa.String(256), nullable=False, default=""),
    sa.Column("seed", sa.BigInteger),
    sa.Column("group_id", sa.String(128), nullable=False, default=""),
    sa.Column("parent_id", sa.String(64)),
    sa.Column("branch_turn", sa.Integer),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("failure", sa.String(16)),
    sa.Column("error", sa.Text),
    sa.Column("total_reward", sa.Float, nullable=False, default=0.0),
    sa.Column("num_turns", sa.Integer, nullable=False, default=0),
    sa.Column("policy_version", sa.Integer),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("metadata", sa.JSON, nullable=False, default=dict),
    sa.Index("ix_episodes_run", "run_id", "created_at"),
    sa.Index("ix_episodes_env", "env_id", "created_at"),
    sa.Index("ix_episodes_task", "env_id", "task_id"),
    sa.Index("ix_episodes_group", "group_id"),
    sa.Index("ix_episodes_status", "status", "created_at"),
    sa.Index("ix_episodes_reward", "total_reward"),
    sa.Index("ix_episodes_parent", "parent_id"),
    sa.Index("ix_episodes_created", "created_at"),
    sa.Index("ix_episodes_env_status", "env_id", "status", "created_at"),
    sa.Index("ix_episodes_version", "policy_version", "created_at"),
    sa.Index("ix_episodes_failure", "failure", "created_at"),
)

_TURN_JSON_FIELDS = ("prompt_ids", "action_ids", "action_logprobs", "token_versions", "info", "timings", "loss_mask")

turns_table = sa.Table(
    "turns", metadata,
    sa.Column("episode_id", sa.String(64), sa.ForeignKey("episodes.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("index", sa.Integer, primary_key=True),
    sa.Column("observation", sa.Text, nullable=False, default=""),
    sa.Column("action_text", sa.Text, nullable=False, default=""),
    sa.Column("reward", sa.Float, nullable=False, default=0.0),
    sa.Column("terminated", sa.Boolean, nullable=False, default=False),
    sa.Column("truncated", sa.Boolean, nullable=False, default=False),
    sa.Column("state_fingerprint", sa.String(128), nullable=False, default=""),
    sa.Column("finish_reason", sa.String(32)),
    sa.Column("advantage", sa.Float),
    *[sa.Column(name, sa.JSON) for name in _TURN_JSON_FIELDS],
)

metrics_table = sa.Table(
    "metrics", metadata,
    sa.Column("run_id", sa.String(128), primary_key=True),
    sa.Column("step", sa.Integer, primary_key=True),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("values", sa.JSON, nullable=False),
)

runs_table = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.String(128), primary_key=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("config", sa.JSON, nullable=False, default=dict),
)

_EPISODE_COLUMNS = [c.name for c in episodes_table.columns]


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


class TrajectoryStore:
    """Episodes, turns, runs and metrics in one SQL database (SQLite file or PostgreSQL)."""

    def __init__(self, url: str | Path = "agentgym.db", *, create: bool = True, echo: bool = False):
        self.url = normalise_url(url)
        self.engine = self._connect(self.url, echo)
        self._check_schema(create)

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
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
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
    def put(self, episode: Episode) -> None:
        """Write one episode (replacing any earlier version with the same id)."""
        self.put_many([episode])

    def put_many(self, episodes: Iterable[Episode]) -> int:
        """Write episodes in one transaction; returns how many were written."""
        episodes = list(episodes)
        if not episodes:
            return 0
        ids = [e.id for e in episodes]
        ep_rows = [_episode_row(e) for e in episodes]
        turn_rows = [_turn_row(e.id, t) for e in episodes for t in e.turns]
        with self.engine.begin() as conn:
            for chunk in _chunks(ids, 500):
                conn.execute(sa.delete(turns_table).where(turns_table.c.episode_id.in_(chunk)))
                conn.execute(sa.delete(episodes_table).where(episodes_table.c.id.in_(chunk)))
            conn.execute(sa.insert(episodes_table), ep_rows)
            if turn_rows:
                conn.execute(sa.insert(turns_table), turn_rows)
        return len(episodes)

    def delete(self, episode_id: str) -> bool:
        with self.engine.begin() as conn:
            conn.execute(sa.delete(turns_table).where(turns_table.c.episode_id == episode_id))
            return conn.execute(sa.delete(episodes_table).where(episodes_table.c.id == episode_id)).rowcount > 0

    def log_run(self, run_id: str, config: dict[str, Any] | None = None) -> None:
        """Record a run and its config (idempotent)."""
        with self.engine.begin() as conn:
            conn.execute(sa.delete(runs_table).where(runs_table.c.id == run_id))
            conn.execute(sa.insert(runs_table).values(id=run_id, created_at=time.time(), config=config or {}))

    def log_metrics(self, run_id: str, step: int, values: dict[str, float]) -> None:
        """Record one step of a run's metrics (idempotent per run and step)."""
        with self.engine.begin() as conn:
            conn.execute(sa.delete(metrics_table).where(
                (metrics_table.c.run_id == run_id) & (metrics_table.c.step == step)))
            conn.execute(sa.insert(metrics_table).values(run_id=run_id, step=step, time=time.time(), values=values))

    # ---- reading ---------------------------------------------------------
    def get(self, episode_id: str) -> Episode:
        """One episode with its turns; `StoreError` naming the id when it is absent."""
        found = self.get_many([episode_id])
        if not found:
            raise StoreError(f"no episode with id '{episode_id}' in store {self.display_url}")
        return found[0]

    def get_many(self, episode_ids: Sequence[str]) -> list[Episode]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(episodes_table).where(episodes_table.c.id.in_(list(episode_ids)))).mappings().all()
            by_id = {r["id"]: r for r in rows}
            turns = _load_turns(conn, list(by_id))
        return [_episode_from_row(by_id[i], turns.get(i, [])) for i in episode_ids if i in by_id]

    def count(self, filter: EpisodeFilter | None = None, **filters: Any) -> int:
        flt = filter or EpisodeFilter(**filters)
        query = sa.select(sa.func.count()).select_from(episodes_table).where(*flt.where())
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

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
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings().all()]

    def episodes(self, filter: EpisodeFilter | None = None, **kwargs: Any) -> list[Episode]:
        """Full episodes (with turns) matching the filter; same arguments as `summaries`."""
        rows = self.summaries(filter, **kwargs)
        with self.engine.connect() as conn:
            turns = _load_turns(conn, [r["id"] for r in rows])
        return [_episode_from_row(r, turns.get(r["id"], [])) for r in rows]

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
        if column not in _EPISODE_COLUMNS:
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


def export_record(episode: Episode) -> dict[str, Any]:
    """An episode as one flat, Arrow-friendly JSON object (see `TrajectoryStore.export_jsonl`)."""
    data = episode.to_dict()
    data["metadata"] = json.dumps(data["metadata"], ensure_ascii=False)
    data["seed"] = data["seed"] if data["seed"] is not None else -1
    data["branch_turn"] = data["branch_turn"] if data["branch_turn"] is not None else -1
    for turn in data["turns"]:
        turn["info"] = json.dumps(turn["info"], ensure_ascii=False, default=str)
        turn["timings"] = json.dumps(turn["timings"])
        turn["action_logprobs"] = [float(x) for x in turn["action_logprobs"]]
        turn["loss_mask"] = turn["loss_mask"] if turn["loss_mask"] is not None else [1] * len(turn["action_ids"])
        turn["advantage"] = float(turn["advantage"]) if turn["advantage"] is not None else float("nan")
    return data


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _safe_text(text: str | None) -> str | None:
    """Text every backend can store: lone surrogates escaped, NUL (refused by PostgreSQL) replaced."""
    if text is None:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _safe_json(value: Any) -> Any:
    if isinstance(value, str):
        return _safe_text(value)
    if isinstance(value, dict):
        return {_safe_text(str(k)): _safe_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_safe_json(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    if value is None or isinstance(value, bool | int | float):
        return value
    return _safe_text(str(value))


def _episode_row(e: Episode) -> dict[str, Any]:
    return {
        "id": e.id, "run_id": e.run_id, "env_id": e.env_id, "task_id": str(e.task_id), "seed": e.seed,
        "group_id": e.group_id, "parent_id": e.parent_id, "branch_turn": e.branch_turn,
        "status": str(e.status), "failure": str(e.failure) if e.failure is not None else None,
        "error": _safe_text(e.error), "total_reward": float(e.total_reward), "num_turns": len(e.turns),
        "policy_version": e.policy_version, "created_at": e.created_at, "metadata": _safe_json(e.metadata),
    }


def _turn_row(episode_id: str, t: Turn) -> dict[str, Any]:
    row = {
        "episode_id": episode_id, "index": t.index, "observation": _safe_text(t.observation),
        "action_text": _safe_text(t.action_text),
        "reward": float(t.reward), "terminated": bool(t.terminated), "truncated": bool(t.truncated),
        "state_fingerprint": t.state_fingerprint, "finish_reason": t.finish_reason, "advantage": t.advantage,
    }
    for name in _TURN_JSON_FIELDS:
        row[name] = getattr(t, name)
    row["info"] = _safe_json(t.info)
    return row


def _load_turns(conn: sa.Connection, episode_ids: list[str]) -> dict[str, list[Turn]]:
    turns: dict[str, list[Turn]] = {}
    for chunk in _chunks(episode_ids, 500):
        query = sa.select(turns_table).where(turns_table.c.episode_id.in_(chunk)).order_by(
            turns_table.c.episode_id, turns_table.c["index"])
        for r in conn.execute(query).mappings():
            data = {k: v for k, v in r.items() if k != "episode_id"}
            for name in ("prompt_ids", "action_ids", "action_logprobs", "token_versions"):
                data[name] = data[name] or []
            data["info"] = data["info"] or {}
            data["timings"] = data["timings"] or {}
            turns.setdefault(r["episode_id"], []).append(Turn.from_dict(data))
    return turns


def _episode_from_row(row: Any, turns: list[Turn]) -> Episode:
    data = {k: row[k] for k in _EPISODE_COLUMNS if k != "num_turns"}
    data["metadata"] = data["metadata"] or {}
    return Episode(**data, turns=turns)
