"""The documented commands that are cheap run as written: the README's example env and the walk-through's
env, saved where their comments say (`mypkg/envs.py`, `mypkg/walk.py`), pass `agentgym envs check`; the
README's rollout of it stores episodes; the README's `envs serve` + `envs check URL` pair works (on a
free port instead of 8000, which another process may hold). The rollout's policy `mypkg.policies:act`
is scripted (labelled): it always says "down", the README env's only action.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import typer.testing

from agentgym import TrajectoryStore
from agentgym.cli import app
from agentgym.launch import free_port, launch
from agentgym.registration import registry
from tests.helpers.doc_commands import command_lines, words

ROOT = Path(__file__).resolve().parents[1]
README, WALK_DOC = ROOT / "README.md", ROOT / "docs" / "train-your-own-env.md"
runner = typer.testing.CliRunner()


def python_block(doc: Path) -> str:
    """The doc's first ```python block."""
    match = re.search(r"```python\n(.*?)```", doc.read_text(), re.S)
    assert match, f"{doc.name} has no python block"
    return match.group(1)


def documented(doc: Path, prefix: str) -> list[str]:
    """The doc's command lines that start with `prefix`, as words after `agentgym`."""
    found = [words(line)[1:] for line in command_lines(doc) if line.startswith(prefix)]
    assert found, f"{doc.name} shows no `{prefix}` command"
    return found


@pytest.fixture
def mypkg(tmp_path, monkeypatch) -> Path:
    """The docs' example package: the README env in mypkg/envs.py, the walk-through env in mypkg/walk.py."""
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "envs.py").write_text(python_block(README))
    (package / "walk.py").write_text(python_block(WALK_DOC))
    (package / "policies.py").write_text('def act(messages, env):\n    return "down"  # scripted\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    # the docs' envs register ids other tests use too (Walk-v0): the registry gets its old entries back afterwards
    monkeypatch.setattr(registry, "_specs", dict(registry._specs))
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        monkeypatch.delitem(sys.modules, name)
    return tmp_path


def test_the_example_envs_pass_envs_check_as_written(mypkg):
    for doc in (README, WALK_DOC):
        for argv in documented(doc, "agentgym envs check mypkg."):
            result = runner.invoke(app, argv)
            assert result.exit_code == 0, f"{doc.name}: agentgym {' '.join(argv)}\n{result.output}"


def test_the_readme_rollout_of_its_env_stores_episodes(mypkg):
    (argv,) = documented(README, "agentgym rollout mypkg.")
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    episodes = TrajectoryStore(str(mypkg / "agentgym.db")).episodes()
    assert episodes and all(e.env_id.endswith("Countdown-v0") and e.total_reward == 1.0 for e in episodes)


def test_the_readme_serve_and_check_by_url_pair_works():
    (serve,) = documented(README, "agentgym envs serve Maze-v0")
    (check,) = documented(README, "agentgym envs check http://")
    port = str(free_port())
    serve = [port if word == "8000" else word for word in serve]
    with launch([sys.executable, "-m", "agentgym", *serve], int(port), what="agentgym envs serve"):
        result = runner.invoke(app, [word.replace(":8000/", f":{port}/") for word in check])
    assert result.exit_code == 0, result.output
