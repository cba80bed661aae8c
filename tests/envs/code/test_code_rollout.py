"""Code-v0 through the real pipeline: `agentgym rollout` with the solver and the random policy into a SQLite
store, then the viewer's pages (the app over HTTP via Starlette's test client) show the episodes."""

from __future__ import annotations

import html

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from agentgym import TrajectoryStore
from agentgym.cli import app
from agentgym.store import EpisodeFilter
from agentgym.viewer import create_app

pytestmark = pytest.mark.docker


def rollout(store: str, policy: str, run: str, episodes: int) -> None:
    result = CliRunner().invoke(app, ["rollout", "Code-v0", "--policy", policy, "-n", str(episodes), "--store",
                                      store, "--run", run, "--concurrency", "4"])
    assert result.exit_code == 0, result.output


def test_solver_and_random_rollouts_land_in_the_store_and_show_in_the_viewer(docker_engine, tmp_path):
    store_path = str(tmp_path / "code.db")
    rollout(store_path, "solver", "code-solver", 6)
    rollout(store_path, "random", "code-random", 6)
    store = TrajectoryStore(store_path)
    solved = store.episodes(EpisodeFilter(run_id="code-solver"))
    random_eps = store.episodes(EpisodeFilter(run_id="code-random"))
    assert len(solved) == len(random_eps) == 6
    assert all(e.total_reward == 1.0 and e.env_id == "Code-v0" for e in solved)
    assert sum(e.total_reward for e in random_eps) < 6
    last = solved[0].turns[-1]
    assert last.info["hidden_passed"] == last.info["hidden_total"] and last.info["tests"][0]["status"] == "passed"

    client = TestClient(create_app(store))
    overview = client.get("/")
    assert overview.status_code == 200 and "Code-v0" in overview.text and "code-random" in overview.text
    run_page = client.get("/runs/code-solver")
    assert run_page.status_code == 200
    assert "Code-v0" in run_page.text
    page = html.unescape(client.get(f"/episodes/{solved[0].id}").text)
    assert "hidden tests passed" in page and "write_file" in page and "run_tests" in page
