"""The same greedy eval in-process (`hf:`) and through `agentgym serve` (`openai:`) takes the same actions;
a model the server does not serve is refused before any episode; a server that dies mid-eval gives
infrastructure failures and a resumable eval."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentgym import TrajectoryStore
from agentgym.cli import app
from agentgym.launch import serve_model

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()
GREEDY = ["--tasks", "3", "-k", "1", "--temperature", "0", "--max-new-tokens", "6", "--max-turns", "3",
          "--concurrency", "1", "--json"]


@pytest.fixture(scope="module")
def server(tiny_dir):
    with serve_model(tiny_dir, "--name", "tiny") as served:
        yield served.url


def _actions(store: str, run: str) -> dict[str, list[tuple[str, list[int]]]]:
    return {e.task_id: [(t.action_text, t.action_ids) for t in e.turns]
            for e in TrajectoryStore(store).episodes(run_id=run)}


def test_greedy_eval_through_agentgym_serve_matches_in_process(tmp_path, tiny_dir, server):
    store = str(tmp_path / "e.db")
    local = runner.invoke(app, ["eval", "Maze-v0", "--policy", f"hf:{tiny_dir}", "--store", store, "--run", "local",
                                *GREEDY], catch_exceptions=False)
    assert local.exit_code == 0, local.output
    served = runner.invoke(app, ["eval", "Maze-v0", "--policy", f"openai:{server}/v1#tiny", "--store", store,
                                 "--run", "served", *GREEDY], catch_exceptions=False)
    assert served.exit_code == 0, served.output
    a, b = _actions(store, "local"), _actions(store, "served")
    assert len(a) == 3 and a == b
    for ep in TrajectoryStore(store).episodes(run_id="served"):
        assert ep.metadata["policy"]["kind"] == "openai" and ep.metadata["policy"]["model"] == "tiny"
        assert all(t.prompt_ids and len(t.action_logprobs) == len(t.action_ids) for t in ep.turns)
    assert json.loads(local.stdout)["envs"]["Maze-v0"] == json.loads(served.stdout)["envs"]["Maze-v0"]


def test_a_model_the_server_does_not_serve_is_refused(tmp_path, server):
    result = runner.invoke(app, ["eval", "Maze-v0", "--policy", f"openai:{server}/v1#qwen-72b", "--tasks", "2",
                                 "--store", str(tmp_path / "e.db")])
    assert result.exit_code == 2
    assert "does not serve model 'qwen-72b'; it serves ['tiny']" in " ".join(result.output.split())


def test_a_server_that_dies_mid_eval_leaves_infra_failures_and_a_resumable_eval(tmp_path, tiny_dir):
    served = serve_model(tiny_dir)
    url = served.url
    store = str(tmp_path / "e.db")
    command = [sys.executable, "-m", "agentgym", "eval", "Maze-v0", "--policy", f"openai:{url}/v1", "--tasks", "4",
               "-k", "2", "--max-new-tokens", "6", "--max-turns", "4", "--concurrency", "2", "--store", store,
               "--run", "dies", "--max-infra-retries", "0", "--json"]
    evaluation = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and evaluation.poll() is None:
        if Path(store).exists() and TrajectoryStore(store).count(run_id="dies") >= 2:
            break
        time.sleep(0.05)
    served.proc.kill()  # the endpoint goes away mid-eval
    served.stop()
    out, err = evaluation.communicate(timeout=300)
    assert evaluation.returncode in (0, 3), err  # never a traceback
    assert "Traceback" not in err
    data = json.loads(out)
    if evaluation.returncode == 0:  # finished before the kill (a fast machine): nothing to resume
        assert data["complete"]
        return
    assert not data["complete"] and data["missing"]["Maze-v0"] > 0  # the rest is infra, not model failure
    assert data["envs"]["Maze-v0"]["infra_failures"] > 0 and "--resume" in err
    with serve_model(tiny_dir) as back:  # the endpoint comes back elsewhere
        resumed = subprocess.run([sys.executable, "-m", "agentgym", "eval", "--resume", "--run", "dies", "--store",
                                  store, "--policy", f"openai:{back.url}/v1", "--json"], cwd=ROOT, capture_output=True,
                                 text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["complete"]
    scored = [e for e in TrajectoryStore(store).summaries(run_id="dies") if e["failure"] != "infra"]
    counts = {t: sum(e["task_id"] == t for e in scored) for t in {e["task_id"] for e in scored}}
    assert len(counts) == 4 and set(counts.values()) == {2}
