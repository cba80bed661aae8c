"""The generated task set: size, spread, determinism, and every gold query verified."""

import collections
import sqlite3

from agentgym.envs.sql.dataset import DIFFICULTIES, builtin_taskset
from agentgym.envs.sql.domains import DOMAINS
from agentgym.envs.sql.statements import has_top_level_order_by


def test_at_least_200_tasks_over_five_domains_and_three_difficulties(taskset):
    assert len(taskset.tasks) >= 200
    assert len({t.id for t in taskset.tasks}) == len(taskset.tasks)
    per_level = collections.Counter(t.difficulty for t in taskset.tasks)
    assert set(per_level) == set(DIFFICULTIES) and min(per_level.values()) >= 50
    per_domain = collections.Counter(t.db_id for t in taskset.tasks)
    assert set(per_domain) == set(DOMAINS) and len(DOMAINS) >= 5 and min(per_domain.values()) >= 30


def test_every_gold_query_executes_and_returns_a_meaningful_result(taskset):
    for task in taskset.tasks:
        conn = sqlite3.connect(f"file:{taskset.db_paths[task.db_id]}?mode=ro", uri=True)
        rows = conn.execute(task.gold).fetchall()
        conn.close()
        assert rows, f"{task.id}: gold query returns no rows: {task.gold}"
        assert any(v not in (None, 0) for row in rows for v in row), f"{task.id}: only NULL/0 in {rows}"


def test_ordered_gold_queries_have_no_tie_at_their_limit(taskset):
    """A LIMIT that cuts through tied rows would make the gold answer arbitrary."""
    for task in taskset.tasks:
        if " LIMIT " not in task.gold or not has_top_level_order_by(task.gold):
            continue
        head, _, limit = task.gold.rpartition(" LIMIT ")
        conn = sqlite3.connect(taskset.db_paths[task.db_id])
        rows = conn.execute(head).fetchall()
        conn.close()
        k = int(limit)
        if len(rows) > k:
            assert rows[k - 1][-1] != rows[k][-1], f"{task.id}: tie at the LIMIT boundary: {rows[k - 1]} {rows[k]}"


def test_generation_is_deterministic(tmp_path, taskset, digest):
    again = builtin_taskset(tmp_path, domains=["shop", "hr"])
    for db_id in ("shop", "hr"):
        assert digest(again.db_paths[db_id]) == digest(taskset.db_paths[db_id])
    assert [t for t in taskset.tasks if t.db_id in ("shop", "hr")] == again.tasks
