"""The viewer's read queries over the store's tables: aggregates and pages, never full scans of turns.

Every listing is paginated (LIMIT/OFFSET on an indexed order) and every
aggregate filters on indexed columns first (run, env, task, group), so pages
stay fast on stores of 100,000+ episodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from agentgym.errors import StoreError
from agentgym.store import EpisodeFilter, TrajectoryStore, episodes_table, runs_table, turns_table

E = episodes_table.c
SORTABLE = ("created_at", "total_reward", "num_turns", "task_id", "env_id", "status", "policy_version")
STATUSES = ("complete", "truncated", "error", "partial")
FAILURES = ("infra", "model", "none")


@dataclass(frozen=True)
class Page:
    """One page of a listing: which rows, out of how many."""

    rows: list[dict[str, Any]]
    total: int
    page: int  #: 1-based
    page_size: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.page_size))

    @property
    def first_index(self) -> int:
        return (self.page - 1) * self.page_size + 1 if self.rows else 0

    @property
    def last_index(self) -> int:
        return (self.page - 1) * self.page_size + len(self.rows)


@dataclass(frozen=True)
class Aggregate:
    """Episode counts and reward statistics of one bucket (a run, env, task or group)."""

    key: str
    episodes: int
    mean_reward: float
    success_rate: float  #: fraction of episodes with total reward > 0
    min_reward: float
    max_reward: float
    extra: dict[str, Any] = field(default_factory=dict)


def _aggregate_columns() -> list[Any]:
    return [
        sa.func.count().label("episodes"),
        sa.func.avg(E.total_reward).label("mean_reward"),
        sa.func.avg(sa.case((E.total_reward > 0, 1.0), else_=0.0)).label("success_rate"),
        sa.func.min(E.total_reward).label("min_reward"),
        sa.func.max(E.total_reward).label("max_reward"),
    ]


def _aggregates(store: TrajectoryStore, key: Any, where: list[Any], limit: int, offset: int,
                extra: list[Any] = ()) -> list[Aggregate]:
    query = (sa.select(key.label("key"), *_aggregate_columns(), *extra).where(*where)
             .group_by(key).order_by(key).limit(limit).offset(offset))
    with store.engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
    names = [c.name for c in extra]
    return [Aggregate(key=str(r["key"]), episodes=int(r["episodes"]), mean_reward=float(r["mean_reward"] or 0.0),
                      success_rate=float(r["success_rate"] or 0.0), min_reward=float(r["min_reward"] or 0.0),
                      max_reward=float(r["max_reward"] or 0.0), extra={n: r[n] for n in names})
            for r in rows]


def _bucket_count(store: TrajectoryStore, key: Any, where: list[Any]) -> int:
    inner = sa.select(key).where(*where).group_by(key).subquery()
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(inner)).scalar_one())


def runs_overview(store: TrajectoryStore) -> list[Aggregate]:
    """One row per run id found in the episodes, with the number of envs it touched."""
    return _aggregates(store, E.run_id, [], limit=1000, offset=0,
                       extra=[sa.func.count(sa.distinct(E.env_id)).label("envs")])


def envs_overview(store: TrajectoryStore, run_id: str | None) -> list[Aggregate]:
    where = [E.run_id == run_id] if run_id is not None else []
    return _aggregates(store, E.env_id, where, limit=1000, offset=0,
                       extra=[sa.func.count(sa.distinct(E.task_id)).label("tasks")])


def tasks_page(store: TrajectoryStore, flt: EpisodeFilter, page: int, page_size: int) -> tuple[list[Aggregate], int]:
    """Tasks of an env (and run) with their aggregates; and how many tasks there are."""
    where = flt.where()
    rows = _aggregates(store, E.task_id, where, limit=page_size, offset=(page - 1) * page_size,
                       extra=[sa.func.count(sa.distinct(E.group_id)).label("groups")])
    return rows, _bucket_count(store, E.task_id, where)


def groups_page(store: TrajectoryStore, flt: EpisodeFilter, page: int, page_size: int) -> tuple[list[Aggregate], int]:
    where = flt.where()
    rows = _aggregates(store, E.group_id, where, limit=page_size, offset=(page - 1) * page_size,
                       extra=[sa.func.min(E.task_id).label("task_id"), sa.func.min(E.env_id).label("env_id")])
    return rows, _bucket_count(store, E.group_id, where)


def episodes_page(store: TrajectoryStore, flt: EpisodeFilter, *, sort: str, descending: bool,
                  page: int, page_size: int) -> Page:
    """One page of episode rows (no turns), sorted by `sort` then by insertion order, and the total count.

    Pages past the middle are read from the other end (reversed order, smaller OFFSET), so the
    last page costs what the first does.
    """
    if sort not in SORTABLE:
        raise StoreError(f"cannot sort episodes by {sort!r}; choose one of {', '.join(SORTABLE)}")
    total = store.count(flt)
    offset = (page - 1) * page_size
    from_end = offset > total // 2 and offset < total
    if from_end:
        limit = min(page_size, total - offset)
        rows = _sorted_rows(store, flt, sort, not descending, limit, total - offset - limit)[::-1]
    else:
        rows = _sorted_rows(store, flt, sort, descending, page_size, offset)
    return Page(rows=rows, total=total, page=page, page_size=page_size)


def _tiebreak(store: TrajectoryStore) -> Any:
    """The column that orders equal sort keys: SQLite's rowid (in every index, so no sort step), else id."""
    if store.engine.dialect.name == "sqlite":
        return sa.literal_column("episodes.rowid")
    return E.id


def _sorted_rows(store: TrajectoryStore, flt: EpisodeFilter, sort: str, descending: bool, limit: int,
                 offset: int) -> list[dict[str, Any]]:
    column, tiebreak = E[sort], _tiebreak(store)
    order = (column.desc(), tiebreak.desc()) if descending else (column.asc(), tiebreak.asc())
    query = sa.select(episodes_table).where(*flt.where()).order_by(*order).limit(limit).offset(offset)
    with store.engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings().all()]


def env_ids(store: TrajectoryStore) -> list[str]:
    return [str(v) for v in store.distinct("env_id")]


def run_ids(store: TrajectoryStore) -> list[str]:
    with store.engine.connect() as conn:
        return [str(r[0]) for r in conn.execute(sa.select(E.run_id).distinct().order_by(E.run_id))]


def children(store: TrajectoryStore, episode_id: str, limit: int = 500) -> list[dict[str, Any]]:
    """Episodes branched off `episode_id`, oldest first (sorted here, so the parent_id index is used)."""
    query = sa.select(episodes_table).where(E.parent_id == episode_id).limit(limit)
    with store.engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(query).mappings().all()]
    return sorted(rows, key=lambda r: (r["created_at"], r["id"]))


def episode_row(store: TrajectoryStore, episode_id: str) -> dict[str, Any] | None:
    with store.engine.connect() as conn:
        row = conn.execute(sa.select(episodes_table).where(E.id == episode_id)).mappings().first()
    return dict(row) if row else None


def tree_rows(store: TrajectoryStore, episode_id: str, *, max_nodes: int = 2000) -> tuple[str, list[dict[str, Any]]]:
    """The root of `episode_id`'s branch tree and every episode in that tree (breadth first)."""
    root = episode_id
    seen = {root}
    row = episode_row(store, root)
    while row is not None and row["parent_id"] and row["parent_id"] not in seen:
        parent = episode_row(store, row["parent_id"])
        if parent is None:  # the parent was deleted: this episode roots what is left of the tree
            break
        root, row = parent["id"], parent
        seen.add(root)
    rows: list[dict[str, Any]] = []
    frontier = [root]
    with store.engine.connect() as conn:
        while frontier and len(rows) < max_nodes:
            found = conn.execute(sa.select(episodes_table).where(E.id.in_(frontier))).mappings().all()
            rows.extend(dict(r) for r in found)
            frontier = [r[0] for r in conn.execute(sa.select(E.id).where(E.parent_id.in_(frontier)))]
    return root, rows


def turn_actions(store: TrajectoryStore, episode_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Light turn rows (index, action, reward, fingerprint, flags) of a few episodes, for trees and groups."""
    columns = [turns_table.c.episode_id, turns_table.c["index"], turns_table.c.action_text, turns_table.c.reward,
               turns_table.c.state_fingerprint, turns_table.c.terminated, turns_table.c.truncated,
               turns_table.c.advantage, turns_table.c.observation]
    out: dict[str, list[dict[str, Any]]] = {i: [] for i in episode_ids}
    with store.engine.connect() as conn:
        for start in range(0, len(episode_ids), 500):
            chunk = episode_ids[start:start + 500]
            query = sa.select(*columns).where(turns_table.c.episode_id.in_(chunk)).order_by(
                turns_table.c.episode_id, turns_table.c["index"])
            for r in conn.execute(query).mappings():
                out[r["episode_id"]].append(dict(r))
    return out


def eval_run_ids(store: TrajectoryStore) -> list[str]:
    """Ids of the eval runs (``kind: eval`` in their config), oldest first."""
    return [r["id"] for r in store.runs() if (r.get("config") or {}).get("kind") == "eval"]


def run_config(store: TrajectoryStore, run_id: str) -> dict[str, Any] | None:
    """The config a run logged (None when the run only appears in episodes)."""
    with store.engine.connect() as conn:
        row = conn.execute(sa.select(runs_table.c.config).where(runs_table.c.id == run_id)).first()
    return dict(row[0] or {}) if row else None


def version_curve(store: TrajectoryStore, run_id: str) -> list[dict[str, Any]]:
    """Per policy version of a run: episodes, mean reward and success rate (from the episodes themselves)."""
    query = (sa.select(E.policy_version.label("version"), *_aggregate_columns())
             .where(E.run_id == run_id, E.policy_version.is_not(None))
             .group_by(E.policy_version).order_by(E.policy_version))
    with store.engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings().all()]
