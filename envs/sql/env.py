"""SQL-v0: answer a question about a database with SQL, exploring it with live queries first.

A task is a database, a question and a gold query. Each turn the model either
runs an exploratory query (``execute_sql``) and sees its result table, capped
in rows and characters, or the database's error text; or it submits its final
query (``submit``), which ends the episode. At the turn limit the episode is
truncated. See `envs.sql.actions` for the accepted reply formats.

Reward at submit: 1.0 when the submitted query returns the gold query's rows
(a multiset, or a list when the gold query has a top-level ORDER BY; see
`envs.sql.results`), plus optional weighted terms for a submitted query that
ran without error (`format_reward`) and for at least one exploratory query that
ran (`exploration_reward`). Every term is reported in ``info["reward_terms"]``
whatever its weight.

Isolation: queries run on read-only connections (SQLite ``immutable`` files
behind an authorizer, or PostgreSQL read-only transactions as a reader role),
one statement at a time, with a timeout; nothing an episode sends can change a
database. Task sets: the built-in generated domains (``dataset="builtin"``) or
a Spider/BIRD folder (``dataset="spider"``, ``path=...``, ``split=...``).
A lost database connection raises `EnvInfraError` (the infrastructure's fault,
not the model's); the next `reset` reconnects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from agentgym.envs.sql.actions import TOOLS, SqlAction, parse_sql_action
from agentgym.envs.sql.backends import QueryError, QueryLimits, SqlBackend, SqliteBackend
from agentgym.envs.sql.dataset import SqlTask, TaskSet, builtin_taskset
from agentgym.envs.sql.results import QueryResult, TableFormat, format_table, results_match
from agentgym.envs.sql.statements import has_top_level_order_by
from agentgym.envs.task_state import EpisodeState, TaskStateEnv, next_turn

from agentgym.errors import ConfigError, EnvInfraError, MalformedActionError
from agentgym.toolcalls import error_observation

_SURROGATE = re.compile("[\ud800-\udfff]")
_FROM_TABLE = re.compile(r"\bFROM\s+([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)


@dataclass(frozen=True)
class SqlEpisodeState(EpisodeState):
    """Everything that changes during an episode (the databases never do), for snapshot/restore."""

    explored_ok: bool = False


def _system_prompt(dialect: str, bare_sql: str) -> str:
    bare = ("runs as an exploratory query" if bare_sql == "explore"
            else "is submitted as your final answer")
    return (
        f"You answer questions about a {dialect} database by writing SQL. Each turn, do exactly one thing:\n"
        '- explore: <tool_call>{"name": "execute_sql", "arguments": {"query": "SELECT ..."}}</tool_call> '
        "shows you the result (or the database error);\n"
        '- answer: <tool_call>{"name": "submit", "arguments": {"query": "SELECT ..."}}</tool_call> '
        "submits your final query and ends the episode.\n"
        f"Without a tool call, a line starting with 'SUBMIT:' followed by SQL submits it, and a ```sql block "
        f"or a reply that starts with SELECT/WITH {bare}. The database is read-only, one statement per query. "
        "Your answer is right when it returns the same rows as the reference query (row order matters only "
        "when the question asks for an order)."
    )


class SqlEnv(TaskStateEnv):
    """Text-to-SQL with execution feedback; see the module docstring."""

    #: instances share nothing: the collector may step them in threads of one process
    thread_safe = True

    def __init__(self, dataset: str = "builtin", path: str | None = None, split: str = "dev",
                 domains: list[str] | None = None, difficulty: str | None = None,
                 dialect: str = "sqlite", url: str | None = None, max_turns: int = 10,
                 max_rows: int = 20, max_cell_chars: int = 60, max_obs_chars: int = 4000,
                 timeout_s: float = 2.0, max_query_chars: int = 20_000, max_action_chars: int = 100_000,
                 compare_rows: int = 100_000, bare_sql: str = "explore", show_schema: bool = True,
                 format_reward: float = 0.0, exploration_reward: float = 0.0, solver_explores: bool = False,
                 data_dir: str | None = None, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        if bare_sql not in ("explore", "submit"):
            raise ConfigError(f"bare_sql must be 'explore' or 'submit', got {bare_sql!r}")
        if min(max_turns, max_rows, max_obs_chars, compare_rows, max_action_chars) < 1 or timeout_s <= 0:
            raise ConfigError("max_turns, max_rows, max_obs_chars, compare_rows, max_action_chars and timeout_s "
                              f"must be positive, got {max_turns}, {max_rows}, {max_obs_chars}, {compare_rows}, "
                              f"{max_action_chars}, {timeout_s}")
        self.taskset = _load_taskset(dataset, path, split, domains, data_dir)
        self.tasks = [t for t in self.taskset.tasks if difficulty in (None, t.difficulty)]
        if not self.tasks:
            raise ConfigError(f"no {dataset} task has difficulty {difficulty!r}; "
                              f"known: {sorted({t.difficulty for t in self.taskset.tasks})}")
        self._index_tasks(self.tasks)
        self.backend = _make_backend(dialect, url, self.taskset, QueryLimits(timeout_s, max_query_chars))
        self.dialect, self.max_turns, self.bare_sql, self.show_schema = dialect, max_turns, bare_sql, show_schema
        self.table_format = TableFormat(max_rows, max_cell_chars, max_obs_chars)
        self.compare_rows, self.max_action_chars = compare_rows, max_action_chars
        self.format_reward, self.exploration_reward = format_reward, exploration_reward
        self.solver_explores = solver_explores
        self.system_prompt = _system_prompt(dialect, bare_sql)
        self._schemas: dict[str, str] = {}
        self._gold: dict[str, QueryResult] = {}
        self._state = SqlEpisodeState()
        self._closed = False

    # ---- tasks -----------------------------------------------------------
    def tools(self) -> list[dict[str, Any]]:
        return list(TOOLS.values())

    @property
    def task(self) -> SqlTask:
        return super().task

    # ---- gymnasium API ---------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task_id = self.choose_task(options, self._task_ids)
        task = self._by_id[task_id]
        observation = self._opening(task)
        self._state = SqlEpisodeState(task_id=task_id, observation=observation)
        return observation, {"task_id": task_id, "db_id": task.db_id, "difficulty": task.difficulty,
                             "dialect": self.dialect}

    def step(self, action: str):
        self._state, info = next_turn(self._state)
        try:
            parsed = self._parse(action, info)
        except MalformedActionError as exc:
            info.update(error_kind=exc.kind, error=str(exc))
            return self._continue(error_observation(exc), info)
        info.update(action_kind=parsed.kind, query=parsed.query, action_source=parsed.source)
        if parsed.kind == "submit":
            return self._submit(parsed, info)
        return self._explore(parsed, info)

    def _parse(self, action: str, info: dict[str, Any]) -> SqlAction:
        if len(action) > self.max_action_chars:
            raise MalformedActionError(f"the reply is {len(action):,} characters long; the limit is "
                                       f"{self.max_action_chars:,}", kind="action_too_long",
                                       hint="send one short query per turn")
        cleaned, replaced = _SURROGATE.subn("\ufffd", action)
        parsed = parse_sql_action(cleaned, bare_sql=self.bare_sql)
        query, in_json = _SURROGATE.subn("\ufffd", parsed.query)  # JSON "\\ud800" escapes decode to surrogates
        if replaced or in_json:
            info["replaced_surrogates"] = replaced + in_json
        return replace(parsed, query=query)

    def _explore(self, parsed: SqlAction, info: dict[str, Any]):
        try:
            result = self.backend.run(self.task.db_id, parsed.query, max_rows=self.table_format.max_rows)
        except QueryError as exc:
            return self._query_failed(exc, info)
        self._state = replace(self._state, explored_ok=True)
        info.update(rows=result.row_count, more_rows=result.more_rows)
        return self._continue(format_table(result, self.table_format), info)

    def _submit(self, parsed: SqlAction, info: dict[str, Any]):
        terms = {"execution_match": 0.0, "valid_sql": 0.0, "exploration": float(self._state.explored_ok)}
        try:
            predicted = self.backend.run(self.task.db_id, parsed.query, max_rows=self.compare_rows)
        except QueryError as exc:
            if exc.kind == "unavailable":
                return self._query_failed(exc, info)
            info.update(error_kind=exc.kind, error=str(exc))
            observation = f"Submitted, but the query failed: {exc}. The answer is wrong."
        else:
            terms["valid_sql"] = 1.0
            match = results_match(predicted, self._gold_result(), ordered=has_top_level_order_by(self.task.gold))
            terms["execution_match"] = float(match.matched)
            info.update(match_reason=match.reason, ordered=match.ordered, rows=predicted.row_count)
            observation = ("Submitted. The result matches the expected answer." if match.matched
                           else f"Submitted. The result does not match the expected answer: {match.reason}.")
        reward = (terms["execution_match"] + self.format_reward * terms["valid_sql"]
                  + self.exploration_reward * terms["exploration"])
        info.update(reward_terms=terms, success=bool(terms["execution_match"]))
        self._state = replace(self._state, done=True, observation=observation)
        return observation, reward, True, False, info

    def _query_failed(self, exc: QueryError, info: dict[str, Any]):
        if exc.kind == "unavailable":  # infrastructure, not the model: the episode ends; reset reconnects
            self._state = replace(self._state, done=True)
            raise EnvInfraError(str(exc), kind="database_unavailable") from exc
        info.update(error_kind=exc.kind, error=str(exc))
        label = {"timeout": "Timeout", "refused": "Refused"}.get(exc.kind, "SQL error")
        return self._continue(f"{label}: {exc}", info)

    def _continue(self, observation: str, info: dict[str, Any]):
        truncated = self._state.turn >= self.max_turns
        if truncated:
            info["truncation_reason"] = f"turn limit of {self.max_turns} reached without a submitted query"
        self._state = replace(self._state, done=truncated, observation=observation)
        return observation, 0.0, False, truncated, info

    # ---- helpers ---------------------------------------------------------
    def _opening(self, task: SqlTask) -> str:
        parts = [f"Database: {task.db_id} ({self.dialect})"]
        if self.show_schema:
            parts.append("Tables:\n" + self._schema(task.db_id))
        parts.append(f"Question: {task.question}")
        if task.evidence:
            parts.append(f"Hint: {task.evidence}")
        return "\n\n".join(parts)

    def _schema(self, db_id: str) -> str:
        if db_id not in self._schemas:
            source = SqliteBackend({db_id: self.taskset.db_paths[db_id]})
            try:
                self._schemas[db_id] = "\n".join(source.table_summaries(db_id))
            finally:
                source.close()
        return self._schemas[db_id]

    def _gold_result(self) -> QueryResult:
        task = self.task
        if task.id not in self._gold:
            try:
                self._gold[task.id] = self.backend.run(task.db_id, task.gold, max_rows=self.compare_rows)
            except QueryError as exc:
                if exc.kind == "unavailable":
                    self._state = replace(self._state, done=True)
                    raise EnvInfraError(str(exc), kind="database_unavailable") from exc
                raise RuntimeError(f"the gold query of task {task.id} failed on {self.dialect}: {exc}") from exc
        return self._gold[task.id]

    # ---- agentgym extras -------------------------------------------------
    def solver_action(self) -> str:
        """Submit the gold query (after one look at its first table when `solver_explores`)."""
        task = self.task
        if self.solver_explores and not self._state.explored_ok:
            table = _FROM_TABLE.search(task.gold)
            query = f"SELECT * FROM {table.group(1)} LIMIT 3" if table else "SELECT 1"
            return _tool_call("execute_sql", query)
        return _tool_call("submit", task.gold)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.backend.close()
        super().close()


def _tool_call(name: str, query: str) -> str:
    import json

    return "<tool_call>" + json.dumps({"name": name, "arguments": {"query": query}}) + "</tool_call>"


def _load_taskset(dataset: str, path: str | None, split: str, domains: list[str] | None,
                  data_dir: str | None) -> TaskSet:
    if dataset == "builtin":
        try:
            return builtin_taskset(data_dir, domains)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if dataset in ("spider", "bird"):
        if not path:
            raise ConfigError(f"dataset={dataset!r} needs path=<folder with the question file and database/>")
        from agentgym.envs.sql.spider import load_spider

        return load_spider(path, split)
    raise ConfigError(f"dataset must be 'builtin', 'spider' or 'bird', got {dataset!r}")


def _make_backend(dialect: str, url: str | None, taskset: TaskSet, limits: QueryLimits) -> SqlBackend:
    if dialect == "sqlite":
        return SqliteBackend(taskset.db_paths, limits)
    if dialect in ("postgresql", "postgres"):
        if not url:
            raise ConfigError("dialect='postgresql' needs url='postgresql://user@host:port/dbname'")
        from agentgym.envs.sql.postgres import PostgresBackend

        return PostgresBackend(url, taskset.db_paths, limits)
    raise ConfigError(f"dialect must be 'sqlite' or 'postgresql', got {dialect!r}")
