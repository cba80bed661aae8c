"""Code-v0 episodes on real Docker sandboxes: tools, observations, rewards, snapshots and the contract check."""

from __future__ import annotations

import json

import pytest

import agentgym
from agentgym.checker import check_env_contract
from tests.helpers.code_env import REPO_TASKS, play, solve

pytestmark = pytest.mark.docker


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


SUBMIT = call("submit")


@pytest.mark.parametrize("task_id", ["sum_multiples-00", "window_max-04", "weighted_edit-09"])
def test_the_solver_scores_1_on_each_difficulty(code_env, task_id):
    reward, info = solve(code_env, task_id)
    assert reward == 1.0 and info["success"] and info["hidden_passed"] == info["hidden_total"] >= 10


def test_the_workspace_holds_the_task_files_and_visible_tests_but_never_the_hidden_ones(code_env):
    obs, info = code_env.reset(seed=0, options={"task_id": "caesar-04"})
    assert info["difficulty"] == "easy" and "caesar(text)" in obs and "test_visible.py" in obs
    hidden = code_env.unwrapped.task.hidden[0].code
    probe = call("run", command="cat /work/* ; grep -rl test_hidden / 2>/dev/null | head -3; echo done")
    out = play(code_env, [probe])[0][0]
    assert "test_visible_1" in out and hidden not in out and "test_hidden" not in out.replace("grep -rl test_hidden", "")


def test_run_shows_output_and_exit_code_and_caps_long_output(code_env):
    code_env.reset(seed=0, options={"task_id": "caesar-04"})
    (obs, *_), = play(code_env, [call("run", command="echo out; echo err >&2; exit 3")])
    assert obs == "$ echo out; echo err >&2; exit 3\nout\nerr\n[exit code 3]"
    (obs, *_), = play(code_env, [call("run", command="seq 1 100000")])
    assert "characters cut: output is capped at 2,000 characters" in obs and obs.rstrip().endswith("[exit code 0]")
    assert len(obs) < 2300 and "\n1\n" in obs and "100000" in obs


def test_run_has_a_per_call_timeout(code_env):
    code_env.reset(seed=0, options={"task_id": "caesar-04"})
    (obs, _, terminated, truncated, info), = play(code_env, [call("run", command="sleep 30", timeout=1)])
    assert "[killed: the command ran past its timeout of 1s" in obs and info["runs"][0]["timed_out"]
    assert not (terminated or truncated)


def test_a_code_block_writes_the_solution_and_runs_the_visible_tests(code_env):
    code_env.reset(seed=0, options={"task_id": "power_sum-02"})
    reference = code_env.unwrapped.task.reference["solution.py"]
    (obs, reward, terminated, _, info), = play(code_env, [f"Here it is:\n```python\n{reference}```"])
    assert obs.startswith("Wrote solution.py") and "Ran 3 visible tests: 3 passed." in obs
    assert info["action_source"] == "code_block" and info["visible_tests"] == {"passed": 3, "total": 3}
    assert not terminated and reward == 0.0
    assert play(code_env, [SUBMIT])[0][1] == 1.0


@pytest.mark.parametrize("solution, kind, words", [
    ("def power_sum(xs:\n", "syntax", "SyntaxError"),
    ("def power_sum(xs):\n    while True:\n        pass\n", "timeout", "timed out"),
    ("def power_sum(xs):\n    return 0\n", "wrong_answer", "wrong answer"),
    ("def power_sum(xs):\n    return xs[100]\n", "crash", "IndexError"),
])
def test_each_error_kind_is_reported_in_the_observation_and_info(docker_engine, solution, kind, words):
    env = agentgym.make("Code-v0", test_timeout_s=0.5)
    try:
        env.reset(seed=0, options={"task_id": "power_sum-02"})
        obs, *_ = env.step(call("write_file", path="solution.py", content=solution) + call("run_tests"))
        assert words in obs
        obs, reward, terminated, _, info = env.step(SUBMIT)
        assert terminated and info["test_error_kind"] == kind and 0 <= reward < 1
        assert {t["status"] for t in info["tests"]} <= {kind, "passed"}
        assert all(t["error"] for t in info["tests"] if not t["passed"])
    finally:
        env.close()


def test_partial_credit_is_the_fraction_of_hidden_tests(code_env):
    code_env.reset(seed=0, options={"task_id": "power_sum-02"})
    half = "def power_sum(xs):\n    return sum(x ** 2 for x in xs) if len(xs) % 2 else -1\n"
    _, reward, _, _, info = play(code_env, [call("write_file", path="solution.py", content=half), SUBMIT])[-1]
    assert 0 < reward < 1 and reward == info["hidden_passed"] / info["hidden_total"]


def test_malformed_replies_are_error_observations_and_the_turn_limit_truncates(docker_engine):
    env = agentgym.make("Code-v0", max_turns=3)
    try:
        env.reset(seed=0, options={"task_id": "caesar-04"})
        results = play(env, ["just words", call("delete_everything"), call("run", command=5)])
        assert [r[4]["error_kind"] for r in results] == ["malformed_action", "unknown_tool", "invalid_arguments"]
        assert results[0][0].startswith("Error: the reply holds neither a tool call nor a ```python code block")
        assert results[-1][3] and "turn limit of 3" in results[-1][4]["truncation_reason"]
    finally:
        env.close()


def test_snapshot_and_restore_bring_back_files_and_state(code_env):
    inner = code_env.unwrapped
    code_env.reset(seed=0, options={"task_id": "caesar-04"})
    code_env.step(call("write_file", path="notes.txt", content="first"))
    token, fingerprint = inner.snapshot(), inner.state_fingerprint()
    code_env.step(call("write_file", path="notes.txt", content="second") + call("run", command="rm solution.py"))
    assert inner.state_fingerprint() != fingerprint
    inner.restore(token)
    assert inner.state_fingerprint() == fingerprint
    (obs, *_), = play(code_env, [call("run", command="cat notes.txt; ls")])
    assert "first" in obs and "solution.py" in obs


@pytest.mark.parametrize("task_id", ["repo/stats_mean", "repo/slugify"])
def test_repo_tasks_fail_before_the_fix_and_the_solver_fixes_them(docker_engine, task_id):
    env = agentgym.make("Code-v0", task_set="repo", path=str(REPO_TASKS))
    try:
        env.reset(seed=0, options={"task_id": task_id})
        (listing, *_), = play(env, [call("run", command="find / -name '*hidden*' -not -path '/proc/*' 2>/dev/null")])
        assert "test_hidden" not in listing and "test_slug_hidden" not in listing  # hidden files: grader only
        obs, *_ = env.step(call("run_tests"))
        assert "[exit code 1]" in obs and "FAILED" in obs
        _, reward, _, _, info = play(env, [SUBMIT])[0]
        assert reward == 0.0 and info["tests"][0]["status"] == "wrong_answer"
        reward, info = solve(env, task_id)
        assert reward == 1.0 and info["tests"][0]["output"]
    finally:
        env.close()


def test_bad_configs_are_rejected_before_any_sandbox_starts():
    with pytest.raises(agentgym.ConfigError, match="task_set must be one of"):
        agentgym.make("Code-v0", task_set="leetcode")
    with pytest.raises(agentgym.ConfigError, match="needs path="):
        agentgym.make("Code-v0", task_set="humaneval")
    with pytest.raises(agentgym.ConfigError, match="difficulty must be one of"):
        agentgym.make("Code-v0", difficulty="brutal")


def test_envs_check_passes(docker_engine):
    report = check_env_contract("Code-v0", lambda: agentgym.make("Code-v0"))
    assert report.passed, [(r.name, r.detail) for r in report.failures()]
    assert {r.name for r in report.results if r.skipped} == {"determinism"}


def test_an_ended_episode_gives_its_sandbox_back_and_can_still_be_snapshotted(code_env):
    inner = code_env.unwrapped
    code_env.reset(seed=0, options={"task_id": "caesar-04"})
    live = inner.snapshot()
    _, _, terminated, _, _ = code_env.step(SUBMIT)
    assert terminated and inner._sandbox is None
    ended = inner.snapshot()
    assert ended.files is None and inner.restore(ended).startswith("Submitted.")
    inner.restore(live)  # back before the submit: a sandbox again, with the files of that moment
    (obs, *_), = play(code_env, [call("run", command="ls")])
    assert "solution.py" in obs
