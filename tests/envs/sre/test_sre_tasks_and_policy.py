"""SRE-v0's task set, policies and destructive-command guard (no containers needed)."""

from __future__ import annotations

from collections import Counter

import pytest
from agentgym.envs.sre.faults import KINDS
from agentgym.envs.sre.policy import Policy, destructive_reason
from agentgym.envs.sre.tasks import shipped_tasks


def test_hundreds_of_distinct_tasks_over_every_kind_and_level() -> None:
    tasks = shipped_tasks()
    assert len(tasks) >= 300 and len({t.id for t in tasks}) == len(tasks)
    assert Counter(t.difficulty for t in tasks).keys() == {"easy", "medium", "hard"}
    assert {f.kind for t in tasks for f in t.faults} == set(KINDS)
    assert all(len(t.faults) == 2 for t in tasks if t.difficulty == "hard")
    assert all(t.herring for t in tasks if t.difficulty == "medium")
    hard = [t for t in tasks if t.difficulty == "hard"]
    assert all(a.component != b.component for a, b in (t.faults for t in hard))


def test_every_solution_fits_its_policy() -> None:
    for task in shipped_tasks():
        used: dict[str, int] = {}
        for call in task.solution():
            assert task.policy.check(call["name"], call["arguments"], used) is None, (task.id, call)
            used[call["name"]] = used.get(call["name"], 0) + 1
        assert task.solution()[-1]["name"] == "submit"


@pytest.mark.parametrize("command", [
    "rm -rf /", "rm -rf /srv", "rm -rf /srv/*", "rm -fr /opt/sre", "rm /srv/data/app.db", ":(){ :|:& };:",
    "kill -9 -1", "kill 1", "pkill -f supervisor", "sqlite3 /srv/data/app.db 'DROP TABLE orders'",
    "sqlite3 /srv/data/app.db 'DELETE FROM orders'", "find / -delete", "dd if=/dev/zero of=/dev/sda",
    "mkfs.ext4 /dev/sda", "shutdown -h now", "chmod -R 000 /srv", "> /srv/data/app.db",
])
def test_destructive_commands_are_flagged(command: str) -> None:
    assert destructive_reason(command) is not None


@pytest.mark.parametrize("command", [
    "rm -f /srv/data/backup-2024-01-01.tar", "kill $(cat /srv/run/report-exporter.pid)", "chmod 644 /srv/etc/app.conf",
    "/opt/sre/bin/deploy rollback", "sqlite3 /srv/data/app.db 'CREATE INDEX i ON orders (customer_id)'",
    "pkill -f '^nc -lk 127.0.0.1 6379'", "df -h /srv", "tail -n 50 /srv/log/app.log",
])
def test_repairs_are_not_flagged(command: str) -> None:
    assert destructive_reason(command) is None


def test_policy_forbids_budgets_and_leaves_observers_alone() -> None:
    policy = Policy(budgets=(("restart", 1),), forbidden=("run",))
    assert "forbids `run`" in policy.check("run", {"command": "ls"}, {})
    assert policy.check("restart", {"service": "app"}, {}) is None
    assert "budget of 1" in policy.check("restart", {"service": "app"}, {"restart": 1})
    assert policy.check("logs", {"service": "app"}, {"restart": 9}) is None
    assert "destructive" in Policy().check("run", {"command": "rm -rf /srv"}, {})
    assert Policy(allow_destructive=True).check("run", {"command": "rm -rf /srv"}, {}) is None
