"""The store's tables and the mapping between rows and `Episode`/`Turn` records.

`agentgym.store.TrajectoryStore` is the interface; this module is the layout
it reads and writes (and that the viewer queries directly). Bump
`SCHEMA_VERSION` on any incompatible change: stores of another version are
refused with a clear message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from agentgym.cost import EpisodeCost
from agentgym.trajectory import Episode, Turn

SCHEMA_VERSION = 1
COST_FIELDS = [f for f in EpisodeCost.__dataclass_fields__ if f != "version"]

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

#: What training computed for each turn (written by the trainer after every update; the viewer reads it).
#: One row per (episode, turn); `dropped` rows are turns of episodes the data manager did not train.
turn_credit_table = sa.Table(
    "turn_credit", metadata,
    sa.Column("episode_id", sa.String(64), primary_key=True),
    sa.Column("index", sa.Integer, primary_key=True),
    sa.Column("run_id", sa.String(128), nullable=False, default=""),
    sa.Column("estimator", sa.String(64), nullable=False, default=""),
    sa.Column("update", sa.Integer),
    sa.Column("policy_version", sa.Integer),
    sa.Column("advantage", sa.Float),
    sa.Column("episode_part", sa.Float),
    sa.Column("step_part", sa.Float),
    sa.Column("return_", sa.Float),
    sa.Column("value", sa.Float),
    sa.Column("turn_reward", sa.Float),
    sa.Column("step_group", sa.Integer),
    sa.Column("step_group_size", sa.Integer),
    sa.Column("dropped", sa.Boolean, nullable=False, default=False),
    sa.Column("drop_reason", sa.String(32)),
    sa.Index("ix_turn_credit_run", "run_id", "update"),
)

#: What each episode cost (`agentgym.cost.EpisodeCost`, from ``metadata["cost"]``): one row per episode, with
#: the record's version; added beside the episodes (older stores get the table when opened).
episode_costs_table = sa.Table(
    "episode_costs", metadata,
    sa.Column("episode_id", sa.String(64), sa.ForeignKey("episodes.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("run_id", sa.String(128), nullable=False, default=""),
    sa.Column("env_id", sa.String(128), nullable=False, default=""),
    sa.Column("version", sa.Integer, nullable=False),
    *[sa.Column(name, sa.Float) for name in COST_FIELDS],
    sa.Index("ix_episode_costs_run", "run_id"),
)

runs_table = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.String(128), primary_key=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("config", sa.JSON, nullable=False, default=dict),
)

EPISODE_COLUMNS = [c.name for c in episodes_table.columns]


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


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
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


def episode_row(e: Episode) -> dict[str, Any]:
    return {
        "id": e.id, "run_id": e.run_id, "env_id": e.env_id, "task_id": str(e.task_id), "seed": e.seed,
        "group_id": e.group_id, "parent_id": e.parent_id, "branch_turn": e.branch_turn,
        "status": str(e.status), "failure": str(e.failure) if e.failure is not None else None,
        "error": _safe_text(e.error), "total_reward": float(e.total_reward), "num_turns": len(e.turns),
        "policy_version": e.policy_version, "created_at": e.created_at, "metadata": _safe_json(e.metadata),
    }


def cost_row(e: Episode) -> dict[str, Any] | None:
    """The `episode_costs` row of `e` (None when the collector recorded no cost for it)."""
    data = e.metadata.get("cost")
    if not isinstance(data, dict):
        return None
    record = EpisodeCost.from_dict(data)
    return {"episode_id": e.id, "run_id": e.run_id, "env_id": e.env_id, "version": record.version,
            **{name: getattr(record, name) for name in COST_FIELDS}}


def turn_row(episode_id: str, t: Turn) -> dict[str, Any]:
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


def load_turns(conn: sa.Connection, episode_ids: list[str]) -> dict[str, list[Turn]]:
    turns: dict[str, list[Turn]] = {}
    for chunk in chunks(episode_ids, 500):
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


def episode_from_row(row: Any, turns: list[Turn]) -> Episode:
    data = {k: row[k] for k in EPISODE_COLUMNS if k != "num_turns"}
    data["metadata"] = data["metadata"] or {}
    return Episode(**data, turns=turns)
