"""runtime: ray — short runs on a local Ray cluster, inside a loopback-only network namespace.

Each Ray test runs ``python -m agentgym.trainer.ray_runtime`` through ``scripts/ray-netns.sh`` (a fresh network
namespace with only ``lo`` up, so Ray binds to 127.0.0.1 and never advertises the machine's address),
then checks what the run left behind: the run result, metrics.jsonl, the ledger of trained episode ids,
the trajectory store and the checkpoint, and that no process of that Ray session outlived it.
The model is the tiny local one on Maze-v0 (open rooms), a few updates.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NETNS = ROOT / "scripts" / "ray-netns.sh"

#: A run small enough for two shared CPU cores: 8 episodes per update, 4 turns of 4 tokens at most.
TINY: dict[str, Any] = {
    "runtime": "ray", "env": "Maze-v0", "env_kwargs": {"difficulty": "open"}, "max_turns": 4, "max_new_tokens": 4,
    "groups_per_batch": 2, "group_size": 4, "concurrency": 8, "drop_zero_variance": False, "staleness_bound": 1,
    "tensorboard": False, "plot": False, "torch_threads": 1, "name": "ray-run",
}

needs_netns = pytest.mark.skipif(not (shutil.which("unshare") and shutil.which("ip")),
                                 reason="needs unshare (util-linux) and ip (iproute2): run scripts/apt.sh")


def processes_mentioning(text: str) -> list[str]:
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if text in cmdline:
            found.append(cmdline[:200])
    return found


def run_on_local_ray(cwd: Path, overrides: dict[str, Any], *args: str) -> dict[str, Any]:
    """Run the config in a loopback-only namespace; returns the JSON summary after checking for leaks."""
    pytest.importorskip("ray", reason="install the ray extra: pip install -e '.[ray]'")
    session_root = tempfile.mkdtemp(prefix="agr-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    sets = [f"--set={key}={json.dumps(value)}" for key, value in {**TINY, **overrides}.items()]
    cmd = [str(NETNS), sys.executable, "-m", "agentgym.trainer.ray_runtime", "--json", "--num-cpus", "2",
           "--temp-dir", session_root, *args, *sets]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=480)
        leaked = processes_mentioning(session_root)
    finally:
        shutil.rmtree(session_root, ignore_errors=True)
    assert out.returncode == 0, f"ray run failed (rc {out.returncode}):\n{out.stderr[-6000:]}"
    assert leaked == [], f"processes of the Ray session outlived the run: {leaked}"
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["leftover_processes"] == []
    return summary


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def stored_episodes(run_dir: Path, run_id: str) -> list[Any]:
    from agentgym.store import TrajectoryStore

    return list(TrajectoryStore(str(run_dir / "episodes.db")).iter_episodes(run_id=run_id))


@pytest.mark.extended  # async on Ray with 2 rollout workers and an env worker: the Ray soak (staleness, versions)
@pytest.mark.ray
@needs_netns
def test_async_run_on_local_ray_trains_with_remote_envs_and_two_rollout_workers(tmp_path):
    summary = run_on_local_ray(tmp_path, {"mode": "async", "updates": 3, "checkpoint_every": 0, "keep_turns": 1},
                               "--rollout-workers", "2", "--env-workers", "1")
    assert (summary["updates"], summary["policy_version"], summary["stopped_by"]) == (3, 3, "updates")

    run_dir = tmp_path / "runs" / "ray-run"
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["update"] for r in rows] == [1, 2, 3]
    assert [r["policy_version"] for r in rows] == [1, 2, 3]
    assert all(r["staleness_max"] <= 1 for r in rows)  # the bound, enforced by the data manager actor
    assert sum(r.get("windowed_turns", 0) for r in rows) > 0  # rollout workers keep the run's context window

    ledger = read_jsonl(run_dir / "trained.jsonl")
    trained = [i for entry in ledger for i in entry["episode_ids"]]
    assert len(trained) == 3 * 8 and len(set(trained)) == len(trained)  # no episode trained twice

    episodes = {e.id: e for e in stored_episodes(run_dir, "ray-run")}
    assert set(trained) <= set(episodes)  # every trained episode was stored by a rollout worker
    versions = [v for e in episodes.values() for t in e.turns for v in t.token_versions]
    assert versions and min(versions) >= 0 and max(versions) <= 3
    assert max(versions) >= 1  # new weights reached the rollout workers and tagged the tokens they sampled
    assert all(e.env_id == "Maze-v0" for e in episodes.values())
    assert all(t.state_fingerprint for e in episodes.values() for t in e.turns)  # from the env worker
    assert not [e for e in episodes.values() if e.status == "partial"]  # in flight at the end: ended by the driver
    assert (run_dir / "checkpoints" / "latest").exists()
    assert json.loads((run_dir / "run_config.json").read_text())["keep_turns"] == 1  # hf:RUN@latest reads it


@pytest.mark.extended  # sync on Ray: the fsdp2 disaggregated run (test_distributed.py); resume: the Ray soak's driver kill
@pytest.mark.ray
@needs_netns
def test_sync_run_on_local_ray_resumes_from_its_checkpoint(tmp_path):
    first = run_on_local_ray(tmp_path, {"mode": "sync", "updates": 2, "checkpoint_every": 1}, "--env-workers", "0")
    assert (first["updates"], first["policy_version"]) == (2, 2)

    resumed = run_on_local_ray(tmp_path, {"mode": "sync", "updates": 3, "checkpoint_every": 1}, "--env-workers", "0",
                               "--resume")
    assert (resumed["updates"], resumed["policy_version"]) == (3, 3)

    run_dir = tmp_path / "runs" / "ray-run"
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["update"] for r in rows] == [1, 2, 3] and all(r["staleness_max"] == 0 for r in rows)
    ledger = read_jsonl(run_dir / "trained.jsonl")
    trained = [i for entry in ledger for i in entry["episode_ids"]]
    assert len(trained) == 3 * 8 and len(set(trained)) == len(trained)
    episodes = {e.id: e for e in stored_episodes(run_dir, "ray-run")}
    for entry in ledger:  # sync is on-policy: update u trains on tokens sampled by version u - 1, also after resume
        versions = {v for i in entry["episode_ids"] for t in episodes[i].turns for v in t.token_versions}
        assert versions == {entry["update"] - 1}


# ---- pieces that need no cluster -----------------------------------------------------------------

def test_settings_reject_impossible_layouts_and_start_local_clusters_on_loopback(monkeypatch):
    from agentgym.trainer.ray_runtime import RaySettings

    from agentgym.errors import ConfigError

    with pytest.raises(ConfigError, match="rollout_workers must be >= 1"):
        RaySettings(rollout_workers=0)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    local = RaySettings(num_cpus=2).init_kwargs()
    assert local["_node_ip_address"] == "127.0.0.1" and local["num_cpus"] == 2 and local["include_dashboard"] is False
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert RaySettings().init_kwargs() == {"address": "10.0.0.5:6379"}


def test_config_paths_are_made_absolute_for_actors(tmp_path, monkeypatch):
    from agentgym.trainer.ray_runtime.driver import absolute_paths

    from agentgym.config import TrainConfig

    monkeypatch.chdir(tmp_path)
    cfg = absolute_paths(TrainConfig(output_dir="runs", store="runs/x.db"))
    assert cfg.output_dir == str(tmp_path / "runs") and cfg.store == str(tmp_path / "runs" / "x.db")
    pg = "postgresql://postgres@127.0.0.1:5432/test"
    assert absolute_paths(TrainConfig(store=pg)).store == pg


def test_tallies_of_rollout_workers_add_up():
    from agentgym.trainer.collection import CollectTally
    from agentgym.trainer.ray_runtime.trainer_actor import merge_tallies

    from agentgym.cost import EpisodeCost

    a = CollectTally(episodes=3, successes=1, reward_sum=1.5, turns=9, action_tokens=30, started=5.0)
    b = CollectTally(episodes=2, successes=2, reward_sum=2.0, turns=4, action_tokens=12, started=3.0)
    a.costs, b.costs = [EpisodeCost(tokens_out=4)], [EpisodeCost(tokens_out=5)]
    merged = merge_tallies([a, b])
    assert [c.tokens_out for c in merged.costs] == [4, 5]
    assert (merged.episodes, merged.successes, merged.reward_sum, merged.turns, merged.action_tokens) == (
        5, 3, 3.5, 13, 42)
    assert merged.started == 3.0


def test_the_run_config_sets_the_placement():
    from agentgym.trainer.ray_runtime import RaySettings

    from agentgym.config import load_train_config

    cfg = load_train_config(None, {"runtime": "ray", "ray_rollout_workers": 3, "ray_env_workers": 0,
                                   "ray_address": "ray://head:10001"})
    settings = RaySettings.from_config(cfg)
    assert (settings.rollout_workers, settings.env_workers) == (3, 0)
    assert settings.init_kwargs() == {"address": "ray://head:10001"}
