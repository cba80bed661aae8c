"""`agentgym eval`: pass@k, the table, bad input, infra retries, kill -9 and --resume, compare, reverify."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentgym import TrajectoryStore
from agentgym.cli import app
from agentgym.eval import compare_runs, pass_at_k, summarize
from agentgym.eval.metrics import mean_ci95
from agentgym.trajectory import Episode, EpisodeStatus, Failure, Turn

ROOT = Path(__file__).resolve().parents[3]
COUNTER = "tests.helpers.counter_env:Counter-v0"
SOLVE = "scripted:tests.helpers.counter_env:scripted_up_to_target"
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.mark.parametrize("n,c,k,expected", [
    (5, 2, 1, 2 / 5),
    (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
    (5, 2, 3, 1 - 1 / 10),  # 1 - C(3,3)/C(5,3)
    (5, 2, 4, 1.0),  # fewer failures than draws: some draw always succeeds
    (4, 1, 2, 1 - 3 / 6),  # 1 - C(3,2)/C(4,2)
    (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
    (3, 0, 2, 0.0),
    (3, 3, 3, 1.0),
])
def test_pass_at_k_matches_hand_computed_cases(n, c, k, expected):
    assert math.isclose(pass_at_k(n, c, k), expected, rel_tol=1e-12)


@pytest.mark.parametrize("n,c,k", [(3, 1, 4), (3, 4, 1), (3, 1, 0)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_summary_never_scores_infra_failures_and_counts_capped_turns():
    def ep(task, reward, failure=None, reason="stop"):
        status = EpisodeStatus.ERROR if failure else EpisodeStatus.COMPLETE
        turn = Turn(prompt_ids=[1, 2, 3], action_ids=[4, 5], reward=reward, finish_reason=reason)
        return Episode(env_id="E", task_id=task, status=status, failure=failure, turns=[turn]).finish()

    episodes = [ep("a", 1), ep("a", 0, reason="length"), ep("a", 0, Failure.INFRA), ep("b", 1), ep("b", 1)]
    s = summarize("E", episodes, k=2, success_reward=1.0)
    assert (s.tasks, s.episodes, s.infra_failures, s.capped_turns) == (2, 4, 1, 1)
    assert s.success == 3 / 4 and s.pass_at_1 == (0.5 + 1.0) / 2 and s.pass_at_k == (1.0 + 1.0) / 2
    mean, half = mean_ci95([1, 0, 1, 1])
    assert (s.reward_mean, s.reward_ci95) == (mean, half) and half > 0
    assert (s.tokens_in_mean, s.tokens_out_mean) == (3, 2)


def test_eval_table_json_and_stored_run(tmp_path):
    store = str(tmp_path / "e.db")
    result = invoke("eval", COUNTER, "--policy", SOLVE, "--tasks", "4", "-k", "3", "--store", store, "--run", "ev1",
                    "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    row = data["envs"]["Counter-v0"]
    assert (row["tasks"], row["episodes"], row["pass_at_1"], row["pass_at_k"], row["infra_failures"]) == (4, 12, 1, 1, 0)
    db = TrajectoryStore(store)
    [run] = [r for r in db.runs() if r["id"] == "ev1"]
    assert run["config"]["kind"] == "eval" and run["config"]["k"] == 3
    assert all(e.metadata["policy"]["spec"] == SOLVE for e in db.episodes(run_id="ev1"))
    table = invoke("eval", COUNTER, "--policy", SOLVE, "--tasks", "target-1,target-2", "--store", store)
    assert table.exit_code == 0 and "pass@1" in table.output and "Counter-v0" in table.output


@pytest.mark.parametrize("args,message", [
    (["Maze-v9", "--policy", "random"], "Maze-v0"),  # unknown env: the closest ids
    (["Maze-v0", "--policy", "random", "-k", "0"], "-k must be >= 1"),
    (["Maze-v0", "--policy", "random", "--tasks", "easy-0,nope-7"], "has no task 'nope-7'"),
    (["Maze-v0", "--policy", "random", "--tasks", "100000"], "--tasks 100000: Maze-v0 has"),
    (["Maze-v0", "--policy", "hf:/no/such/model"], "no such model directory"),
    (["Maze-v0", "--policy", "openai:http://127.0.0.1:9/v1", "--tasks", "2"], "the endpoint does not answer"),
    (["Maze-v0"], "--policy is required"),
])
def test_bad_input_is_rejected_before_any_episode(tmp_path, args, message):
    store = tmp_path / "e.db"
    result = runner.invoke(app, ["eval", *args, "--store", str(store)])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    if store.exists():
        assert TrajectoryStore(str(store)).count() == 0


def test_default_tasks_are_the_envs_eval_split(tmp_path):
    from agentgym import make, splits

    store = str(tmp_path / "e.db")
    env = make("Maze-v0")
    held_out = splits.task_ids(env, "eval")
    env.close()
    assert invoke("eval", "Maze-v0", "--policy", "solver", "--store", store, "--run", "r").exit_code == 0
    assert sorted({e["task_id"] for e in TrajectoryStore(store).summaries(run_id="r")}) == sorted(held_out)


def test_an_existing_run_needs_resume(tmp_path):
    store = str(tmp_path / "e.db")
    assert invoke("eval", COUNTER, "--policy", SOLVE, "--tasks", "1", "--store", store, "--run", "r").exit_code == 0
    again = runner.invoke(app, ["eval", COUNTER, "--policy", SOLVE, "--tasks", "1", "--store", store, "--run", "r"])
    assert again.exit_code == 2 and "pass --resume" in again.output
    other = runner.invoke(app, ["eval", COUNTER, "--policy", SOLVE, "--tasks", "2", "--store", store, "--run", "r",
                                "--resume"])
    assert other.exit_code == 2 and "asks for another eval than the stored one" in " ".join(other.output.split())


def test_infra_failures_are_retried_and_never_scored(tmp_path):
    store = str(tmp_path / "e.db")
    policy = "scripted:tests.helpers.eval_policies:breaks_first_call_of_target_1"
    result = invoke("eval", COUNTER, "--policy", policy, "--tasks", "3", "-k", "2", "--store", store, "--run", "r",
                    "--json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["envs"]["Counter-v0"]
    assert row["infra_failures"] == 1 and row["episodes"] == 6 and row["pass_at_1"] == 1.0
    episodes = TrajectoryStore(store).episodes(run_id="r")
    infra = [e for e in episodes if e.failure == Failure.INFRA]
    assert len(infra) == 1 and infra[0].task_id == "target-1" and "went away" in infra[0].error


def _stored_attempts(store: str, run: str) -> Counter:
    return Counter(e["task_id"] for e in TrajectoryStore(store).summaries(run_id=run)
                   if e["failure"] != "infra" and e["status"] != "partial")


def test_an_eval_killed_mid_run_and_resumed_stores_every_task_exactly_k_times(tmp_path):
    store = str(tmp_path / "e.db")
    command = [sys.executable, "-m", "agentgym", "eval", COUNTER, "--policy",
               "scripted:tests.helpers.eval_policies:slow_solver", "--tasks", "5", "-k", "3", "--store", store,
               "--run", "killed", "--concurrency", "2", "--json"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if Path(store).exists() and sum(_stored_attempts(store, "killed").values()) >= 3:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail(f"the eval ended (rc {proc.returncode}) or stored nothing within 120 s before it could be killed")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    before = _stored_attempts(store, "killed")
    assert 3 <= sum(before.values()) < 15, before  # killed mid-run
    resumed = subprocess.run([sys.executable, "-m", "agentgym", "eval", "--resume", "--run", "killed", "--store", store,
                              "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert resumed.returncode == 0, resumed.stderr
    data = json.loads(resumed.stdout)
    assert data["episodes_run"] == 15 - sum(before.values())
    assert _stored_attempts(store, "killed") == {f"target-{n}": 3 for n in range(1, 6)}
    assert data["envs"]["Counter-v0"]["episodes"] == 15 and data["envs"]["Counter-v0"]["pass_at_k"] == 1.0


def test_compare_and_reverify(tmp_path):
    store = str(tmp_path / "e.db")
    assert invoke("eval", COUNTER, "--policy", SOLVE, "--tasks", "3", "-k", "2", "--store", store, "--run", "good",
                  "--max-turns", "3").exit_code == 0
    assert invoke("eval", COUNTER, "--policy", "scripted:tests.helpers.counter_env:scripted_garbage_then_solve",
                  "--tasks", "3", "-k", "2", "--store", store, "--run", "worse", "--max-turns", "3").exit_code == 0
    comparison = compare_runs(TrajectoryStore(store), "worse", "good")
    [env] = comparison.envs
    assert [f.task_id for f in env.gained] == ["target-3"] and not env.lost and env.both_solved == 2
    shown = invoke("eval", "compare", "worse", "good", "--store", store)
    assert shown.exit_code == 0 and "gained in B" in shown.output and "target-3" in shown.output
    assert runner.invoke(app, ["eval", "compare", "good", "nope", "--store", store]).exit_code == 2

    db = TrajectoryStore(store)
    victim = db.episodes(run_id="good", task_id="target-1")[0]
    victim.turns[-1].reward = 0.0  # a stored reward that the env's reward code no longer gives
    db.put(victim.finish())
    listed = json.loads(invoke("eval", "reverify", "good", "--store", store, "--json").stdout)
    assert listed["checked"] == 6 and [c["episode_id"] for c in listed["changed"]] == [victim.id]
    assert listed["changed"][0]["old_reward"] == 0.0 and listed["changed"][0]["new_reward"] == 1.0
    assert db.get(victim.id).total_reward == 0.0  # not written without --write
    assert invoke("eval", "reverify", "good", "--store", store, "--write").exit_code == 0
    assert db.get(victim.id).total_reward == 1.0 and db.get(victim.id).metadata["reverified"]["old_reward"] == 0.0
