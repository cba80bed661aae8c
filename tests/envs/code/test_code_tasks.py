"""Code-v0's task sets: the generated set's shape, every reference solution passing, and the file loaders."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest
from agentgym.envs.code.generate import builtin_tasks
from agentgym.envs.code.loaders import load_humaneval, load_mbpp, load_repo_tasks
from agentgym.envs.code.testing import Suite, run_suites
from agentgym.sandboxes import Limits

from agentgym import sandboxes
from agentgym.errors import ConfigError
from tests.helpers.code_env import REPO_TASKS

BATCH_LIMITS = Limits(memory_bytes=512 << 20, disk_bytes=64 << 20, exec_timeout_s=600, output_bytes=16 << 20)


def test_generated_set_has_200_tasks_at_three_levels_with_visible_and_hidden_tests():
    tasks = builtin_tasks()
    assert len(tasks) >= 200
    assert len({t.id for t in tasks}) == len(tasks)
    assert len({t.statement for t in tasks}) == len(tasks)
    assert set(Counter(t.difficulty for t in tasks)) == {"easy", "medium", "hard"}
    assert all(len(t.visible) >= 3 and len(t.hidden) >= 8 for t in tasks)
    assert all(not {c.code for c in t.visible} & {c.code for c in t.hidden} for t in tasks)


def run_references(tasks, timeout_s: float = 5.0) -> dict:
    """Every task's reference solution against all its tests, in one sandbox exec (each in its own folder)."""
    files, suites = {}, []
    for n, task in enumerate(tasks):
        folder = f"/work/t{n}"
        files.update({f"{folder}/{path}": content for path, content in task.reference.items()})
        suites.append(Suite(task.id, task.visible + task.hidden, directory=folder, setup=task.setup))
    with sandboxes.open(sandboxes.BASE_IMAGE, limits=BATCH_LIMITS) as sb:
        sb.write_files(files)
        reports, result = run_suites(sb, suites, timeout_s=timeout_s, output_chars=300)
    assert not result.truncated and not result.timed_out, result.error
    return reports


@pytest.mark.docker
def test_every_generated_reference_solution_passes_all_its_tests(docker_engine):
    tasks = builtin_tasks()
    reports = run_references(tasks)
    failing = {tid: [(o.name, o.status, o.error) for o in r.outcomes if not o.passed]
               for tid, r in reports.items() if r.passed != len(r.outcomes)}
    assert not failing
    assert sum(len(r.outcomes) for r in reports.values()) == sum(len(t.visible + t.hidden) for t in tasks)


def _jsonl(path, records, gz=False):
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


MBPP = [
    {"task_id": 2, "text": "Write a function to find the similar elements from the given two tuple lists.",
     "code": "def similar_elements(test_tup1, test_tup2):\r\n  res = tuple(set(test_tup1) & set(test_tup2))\r\n  return (res) ",
     "test_list": ["assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
                   "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))",
                   "assert set(similar_elements((11, 12, 14, 13),(17, 15, 14, 13))) == set((13, 14))"],
     "test_setup_code": "", "challenge_test_list": []},
    {"task_id": 3, "text": "Write a python function to identify non-prime numbers.",
     "code": "import math\r\ndef is_not_prime(n):\r\n    result = False\r\n    for i in range(2,int(math.sqrt(n)) + 1):\r\n        if n % i == 0:\r\n            result = True\r\n    return result",
     "test_list": ["assert is_not_prime(2) == False", "assert is_not_prime(10) == True",
                   "assert is_not_prime(35) == True"], "test_setup_code": "", "challenge_test_list": []},
]


def test_mbpp_loader_reads_the_format_and_names_the_function(tmp_path):
    tasks = load_mbpp(_jsonl(tmp_path / "mbpp.jsonl", MBPP))
    assert [t.id for t in tasks] == ["mbpp/2", "mbpp/3"]
    assert tasks[0].entry_point == "similar_elements" and "similar_elements" in tasks[0].statement
    assert len(tasks[1].visible) == 1 and len(tasks[1].hidden) == 3


@pytest.mark.docker
def test_mbpp_references_pass_and_a_wrong_solution_fails(tmp_path, docker_engine):
    tasks = load_mbpp(_jsonl(tmp_path / "mbpp.jsonl", MBPP, gz=True).rename(tmp_path / "mbpp.jsonl.gz"))
    reports = run_references(tasks)
    assert all(r.fraction == 1.0 for r in reports.values())
    wrong = [t.__class__(**{**t.__dict__, "reference": {"solution.py": "def is_not_prime(n):\n    return n % 2 == 0\n"}})
             for t in tasks[1:]]
    assert 0 < run_references(wrong)["mbpp/3"].fraction < 1


@pytest.mark.parametrize("records, message", [
    ([{"task_id": 1, "text": "x"}], r"lacks the field\(s\) code, test_list"),
    ([{"task_id": 1, "text": "x", "code": "", "test_list": []}], "empty test_list"),
])
def test_mbpp_loader_rejects_bad_records(tmp_path, records, message):
    with pytest.raises(ConfigError, match=message):
        load_mbpp(_jsonl(tmp_path / "bad.jsonl", records))


def test_loaders_name_missing_files_and_bad_json(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_humaneval(tmp_path / "missing.jsonl")
    (tmp_path / "broken.jsonl").write_text('{"task_id": 1}\n{oops\n')
    with pytest.raises(ConfigError, match="line 2: not valid JSON"):
        load_humaneval(tmp_path / "broken.jsonl")
    with pytest.raises(ConfigError, match="lacks the field"):
        load_humaneval(_jsonl(tmp_path / "one.jsonl", [{"task_id": "x", "prompt": "def f():\n"}]))
    with pytest.raises(ConfigError, match="holds no task folder"):
        load_repo_tasks(tmp_path)


def test_repo_loader_reads_the_fixture_folder():
    tasks = {t.id: t for t in load_repo_tasks(REPO_TASKS)}
    assert set(tasks) == {"repo/slugify", "repo/stats_mean"}
    slug = tasks["repo/slugify"]
    assert slug.is_repo and "textutil/slug.py" in slug.files and "tests/test_slug_hidden.py" in slug.hidden_files
    assert "tests/test_slug_hidden.py" not in slug.files and slug.reference
