"""The foundation CLI, driven end to end (typer's runner in process, plus one real subprocess)."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from agentgym import TrajectoryStore
from agentgym.cli import app

runner = CliRunner()
COUNTER = "tests.helpers.counter_env:Counter-v0"
SCRIPTED = "scripted:tests.helpers.counter_env:scripted_up_to_target"


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_envs_list_json():
    result = invoke("envs", "list", "--json")
    assert result.exit_code == 0
    ids = {row["id"] for row in json.loads(result.stdout)}
    assert "Maze-v0" in ids


def builtin_env_ids() -> list[str]:
    """The ids our own `agentgym.envs` entry point registers (not the ones tests add)."""
    import agentgym.registration as registration

    saved, registration.registry = registration.registry, registration.Registry()
    try:
        registration.registry.load_plugins()
        return list(registration.registry)
    finally:
        registration.registry = saved
        saved.load_plugins()


NEEDS_DOCKER = {"SRE-v0", "Code-v0"}  # a live system / a sandbox in a container per episode
NEEDS_BROWSER = {"Browser-v0"}  # headless Chromium


#: checked through the CLI by `make test-exhaustive` only (CI's time): `make test` checks them through their env
#: servers and containers (tests/envs/sre/test_sre_served.py, tests/envs/browser/test_browser_env_server.py,
#: tests/runtime/test_family_containers.py), and the CLI's check with the other envs
EXTENDED = {"SRE-v0", "Browser-v0"}


def _marked(env_id: str):
    marks = [pytest.mark.extended] if env_id in EXTENDED else []
    if env_id in NEEDS_DOCKER:
        marks.append(pytest.mark.docker)
    if env_id in NEEDS_BROWSER:
        marks.append(pytest.mark.browser)
    return pytest.param(env_id, marks=marks)


@pytest.mark.parametrize("env_id", [_marked(e) for e in builtin_env_ids()])
def test_envs_check_passes_for_every_builtin_env(env_id):
    result = invoke("envs", "check", env_id, "--json")
    assert result.exit_code == 0, result.stdout
    assert json.loads(result.stdout)["passed"]


def test_envs_check_catches_a_nondeterministic_env_and_names_the_turn():
    result = runner.invoke(app, ["envs", "check", "tests.helpers.counter_env:NoisyCounter-v0"])
    assert result.exit_code == 1
    assert "determinism" in result.output and "diverged at turn 2" in result.output.replace("\n", " ")


def test_third_party_env_rollout_and_replay(tmp_path):
    store = str(tmp_path / "s.db")
    result = invoke("rollout", COUNTER, "--policy", SCRIPTED, "--episodes", "6", "--group-size", "2", "--store", store)
    assert result.exit_code == 0, result.output
    assert "100.0%" in result.output
    listed = json.loads(invoke("episodes", "list", "--store", store, "--json").stdout)
    assert len(listed) == 6 and len({r["group_id"] for r in listed}) == 3
    for row in listed:
        replayed = invoke("replay", row["id"], "--store", store)
        assert replayed.exit_code == 0, replayed.output
        assert "replay matches" in replayed.output


def test_replay_reports_the_first_differing_turn(tmp_path):
    store_path = str(tmp_path / "s.db")
    invoke("rollout", "Maze-v0", "--policy", "solver", "--episodes", "1", "--store", store_path,
           "--env-kwargs", '{"difficulty": "medium"}')
    store = TrajectoryStore(store_path)
    episode = store.episodes()[0]
    episode.turns[2].reward = 5.0
    store.put(episode)
    assert episode.metadata["env_kwargs"] == {"difficulty": "medium"}  # replay makes the env with them again
    result = runner.invoke(app, ["replay", episode.id, "--store", store_path])
    assert result.exit_code == 1 and "turn 2: reward differs" in result.output


def test_rollout_solver_and_random_on_the_builtin_env(tmp_path):
    store = str(tmp_path / "s.db")
    assert invoke("rollout", "Maze-v0", "--policy", "solver", "-n", "5", "--store", store, "--run", "solved").exit_code == 0
    assert invoke("rollout", "Maze-v0", "--policy", "random", "-n", "3", "--store", store, "--run", "rnd").exit_code == 0
    db = TrajectoryStore(store)
    assert all(e.total_reward == 1.0 for e in db.episodes(run_id="solved"))
    assert db.count(run_id="rnd") == 3


def test_malformed_action_becomes_an_error_observation_and_the_episode_goes_on(tmp_path):
    store = str(tmp_path / "s.db")
    policy = "scripted:tests.helpers.counter_env:scripted_garbage_then_solve"
    assert invoke("rollout", COUNTER, "--policy", policy, "-n", "2", "--store", store).exit_code == 0
    for ep in TrajectoryStore(store).episodes():
        assert ep.turns[0].info["error_kind"] == "malformed_action"
        assert ep.turns[1].observation.startswith("Error:")
        assert ep.status == "complete" and ep.total_reward == 1.0


def test_unknown_env_lists_closest_ids(tmp_path):
    result = runner.invoke(app, ["rollout", "Maz-v0", "--store", str(tmp_path / "s.db")])
    assert result.exit_code == 2
    assert "Did you mean" in result.output and "Maze-v0" in result.output


def test_bad_store_url_fails_before_any_work(tmp_path):
    result = runner.invoke(app, ["rollout", "Maze-v0", "--store", "postgresql://nobody@127.0.0.1:1/x"])
    assert result.exit_code == 2 and "cannot open store" in result.output
    result = runner.invoke(app, ["episodes", "list", "--store", str(tmp_path / "missing.db")])
    assert result.exit_code == 2 and "holds no agentgym episodes" in result.output


@pytest.mark.parametrize("args,message", [
    (["--env-kwargs", "{not json"], "--env-kwargs is not valid JSON"),
    (["--env-kwargs", "[1]"], "must be a JSON object"),
    (["--policy", "greedy"], "unknown policy 'greedy'"),
    (["--policy", "scripted:nope_module:f"], "cannot import scripted policy"),
    (["--env-kwargs", '{"difficulty": "insane"}'], "difficulty"),
])
def test_bad_options_are_rejected_clearly(tmp_path, args, message):
    result = runner.invoke(app, ["rollout", "Maze-v0", "--store", str(tmp_path / "s.db"), *args])
    assert result.exit_code != 0
    assert message in result.output.replace("\n", " ")


def test_the_installed_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "agentgym", "envs", "list", "--json"], capture_output=True, text=True)
    assert out.returncode == 0 and "Maze-v0" in out.stdout


def test_an_error_message_keeps_its_brackets(capsys):
    """A missing extra's hint names the extra in brackets; rich must print it, not read it as markup."""
    import typer

    from agentgym.cli.common import fail
    from agentgym.errors import MissingExtraError

    with pytest.raises(typer.Exit):
        fail(str(MissingExtraError("playwright", "browser", "Browser-v0")))
    assert "pip install 'agentgym[browser]'" in capsys.readouterr().err.replace("\n", "")
