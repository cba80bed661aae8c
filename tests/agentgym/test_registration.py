import sys
import textwrap

import gymnasium
import pytest

import agentgym
from agentgym.errors import RegistrationError, UnknownEnvError
from agentgym.registration import Registry


def test_builtin_envs_are_registered_and_mirrored_into_gymnasium():
    assert "Maze-v0" in agentgym.registry
    env = gymnasium.make("agentgym/Maze-v0", difficulty="open")
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str) and info["task_id"].startswith("open-")
    env.close()
    assert agentgym.make("agentgym/Maze-v0").unwrapped.difficulty == "easy"


def test_register_make_with_default_and_override_kwargs():
    from tests.helpers.counter_env import CounterEnv

    spec = agentgym.register("TestCounter-v3", CounterEnv, max_turns=7)
    assert spec.gymnasium_id == "agentgym/TestCounter-v3" and spec.version == 3
    env = agentgym.make("TestCounter-v3", max_turns=4)
    assert isinstance(env, CounterEnv) and env.max_turns == 4
    assert gymnasium.spec("agentgym/TestCounter-v3").max_episode_steps == 7
    agentgym.register("myorg/Thing-v1", "tests.helpers.counter_env:CounterEnv", max_turns=3)
    assert agentgym.make("myorg/Thing-v1").max_turns == 12
    assert "myorg/Thing-v1" in gymnasium.registry


def test_unknown_ids_list_the_closest():
    with pytest.raises(UnknownEnvError) as info:
        agentgym.make("Maz-v0")
    assert "Did you mean" in str(info.value) and "Maze-v0" in str(info.value)
    with pytest.raises(UnknownEnvError, match="Maze-v0"):
        agentgym.make("Maze-v7")
    with pytest.raises(UnknownEnvError, match="agentgym envs list"):
        agentgym.make("Completely-Different-v0")


@pytest.mark.parametrize("bad", ["Maze", "Maze-v", "Maze-vx", "a b-v0", ""])
def test_malformed_ids_are_rejected(bad):
    with pytest.raises(RegistrationError, match="malformed env id"):
        agentgym.register(bad, "x:y")


def test_bad_entry_points_say_what_is_wrong():
    with pytest.raises(RegistrationError, match="package.module:ClassName"):
        agentgym.register("Bad-v0", "no_colon_here")
    agentgym.register("Missing-v0", "no_such_module_xyz:Env")
    with pytest.raises(RegistrationError, match="cannot import module 'no_such_module_xyz'"):
        agentgym.make("Missing-v0")


def test_module_prefixed_ids_import_the_module_first():
    sys.modules.pop("tests.helpers.counter_env", None)
    env = agentgym.make("tests.helpers.counter_env:Counter-v0")
    assert type(env).__name__ == "CounterEnv"


def test_entry_point_plugins_register_on_install(tmp_path, monkeypatch):
    """A package that declares an `agentgym.envs` entry point adds its envs when installed."""
    pkg = tmp_path / "thirdparty_gym"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import agentgym

        def register_envs():
            agentgym.register("ThirdParty-v0", "tests.helpers.counter_env:CounterEnv", max_turns=5)
    """))
    dist = tmp_path / "thirdparty_gym-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-gym\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[agentgym.envs]\nthirdparty = thirdparty_gym:register_envs\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fresh = Registry()
    import agentgym.registration as registration

    monkeypatch.setattr(registration, "registry", fresh)
    assert "ThirdParty-v0" in fresh
    assert "Maze-v0" in fresh  # our own envs arrive through the same entry-point group


def test_a_broken_plugin_warns_instead_of_crashing(tmp_path, monkeypatch):
    dist = tmp_path / "broken_gym-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-gym\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[agentgym.envs]\nbroken = not_a_module_at_all:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import agentgym.registration as registration

    fresh = Registry()
    monkeypatch.setattr(registration, "registry", fresh)
    with pytest.warns(RuntimeWarning, match="broken"):
        fresh.load_plugins()
    assert "Maze-v0" in fresh


def test_choose_task_takes_the_given_id_or_draws_a_seeded_one():
    from tests.helpers.counter_env import CounterEnv

    env = CounterEnv()
    ids = env.task_ids()
    env.reset(seed=3)
    assert env.choose_task({"task_id": "target-2"}, ids) == "target-2"
    drawn = env.choose_task(None, ids)
    env.reset(seed=3)
    assert env.choose_task({}, ids) == drawn
    with pytest.raises(ValueError, match="unknown task id 'nope'.*target-1"):
        env.choose_task({"task_id": "nope"}, ids)
