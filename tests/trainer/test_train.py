"""The training loop end to end at toy scale: outputs, checkpoints, exact data accounting across SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from agentgym.trainer.train import train

from agentgym.config import load_train_config
from agentgym.data.meters import STAGES, bottleneck_name
from agentgym.store import TrajectoryStore
from tests.helpers.usage import reported

TOY = dict(env="Maze-v0", env_kwargs={"difficulty": "open"}, max_turns=8, chat_tools=False, model="tiny",
           torch_threads=1, groups_per_batch=2, group_size=3, concurrency=8, max_new_tokens=4,
           drop_zero_variance=False, tensorboard=True, plot=True, train_tasks=20, eval_tasks=4, eval_every=2)


def toy_config(tmp_path: Path, **changes) -> dict:
    return {**TOY, "output_dir": str(tmp_path / "runs"), **changes}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_env_step_budget_ends_the_run_and_its_first_and_last_policies_are_evaluated(tmp_path, mode):
    """`max_env_steps` stops the run between updates once spent; the update it ends with is evaluated even
    off the `eval_every` grid, so the run's final held-out figure is the policy it ends with; `eval_at_start`
    evaluates the starting policy too, logged as update 0."""
    cfg = load_train_config(None, toy_config(tmp_path, name=f"budget-{mode}", mode=mode, updates=50, max_env_steps=1,
                                             eval_every=5, checkpoint_every=0, tensorboard=False, plot=False,
                                             eval_at_start=True))
    result = train(cfg)
    assert result.stopped_by == "env_steps" and result.updates == 1
    rows = read_jsonl(cfg.run_dir / "metrics.jsonl")
    assert [r["update"] for r in rows] == [0, 1] and rows[0]["env_steps"] == 0 and rows[1]["env_steps"] >= 1
    assert all(0.0 <= r["eval_success_rate"] <= 1.0 for r in rows) and "success_rate" not in rows[0]
    assert [r["step"] for r in TrajectoryStore(cfg.store_url).metrics(cfg.name)] == [0, 1]


def test_eval_at_start_without_held_out_tasks_is_refused_at_load(tmp_path):
    with pytest.raises(Exception, match="eval_at_start evaluates on the held-out tasks, but eval_tasks is 0"):
        load_train_config(None, toy_config(tmp_path, eval_tasks=0, eval_at_start=True))


def test_eval_samples_without_a_temperature_are_refused_at_load(tmp_path):
    with pytest.raises(Exception, match="greedy episodes of one task are all the same episode"):
        load_train_config(None, toy_config(tmp_path, eval_samples=4))


def test_a_sampled_evaluation_plays_each_held_out_task_n_times_and_repeats_for_one_seed(tmp_path):
    """`eval_temperature` > 0 samples `eval_samples` episodes per held-out task from seeds fixed by the run's
    seed: two runs of one seed measure the same held-out figures; the greedy default plays each task once."""
    def run(name: str, **changes) -> list[dict]:
        cfg = load_train_config(None, toy_config(tmp_path, name=name, updates=1, eval_every=1, eval_at_start=True,
                                                 checkpoint_every=0, tensorboard=False, plot=False, **changes))
        train(cfg)
        return read_jsonl(cfg.run_dir / "metrics.jsonl")

    sampled = dict(eval_temperature=1.0, eval_samples=3, seed=5, sft_steps=30, sft_episodes=16)
    first, again = run("sampled-a", **sampled), run("sampled-b", **sampled)
    assert [r["eval_episodes"] for r in first] == [12, 12]  # 4 held-out tasks x 3 samples, at update 0 and 1
    assert [r["eval_success_rate"] for r in first] == [r["eval_success_rate"] for r in again]
    assert all(round(r["eval_success_rate"] * 12, 6).is_integer() for r in first)
    assert [r["eval_episodes"] for r in run("greedy")] == [4, 4]


def test_sync_run_writes_metrics_events_plot_checkpoint_and_store(tmp_path):
    cfg = load_train_config(None, toy_config(tmp_path, name="toy", updates=2, checkpoint_every=1, sft_steps=2,
                                             sft_episodes=2))
    result = train(cfg)
    assert result.updates == 2 and result.policy_version == 2
    rows = read_jsonl(cfg.run_dir / "metrics.jsonl")
    assert [r["update"] for r in rows] == [1, 2] and [r["policy_version"] for r in rows] == [1, 2]
    required = {"success_rate", "reward_mean", "tokens_per_s", "staleness_mean", "data/queue_depth"}
    assert all(required.issubset(r) for r in rows)
    assert "eval_success_rate" in rows[1]
    assert (cfg.run_dir / "curve.png").stat().st_size > 1000
    assert list((cfg.run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert (cfg.run_dir / "checkpoints" / "latest").read_text() == "update-000002"
    store = TrajectoryStore(cfg.store_url)
    assert [m["step"] for m in store.metrics("toy")] == [1, 2]
    stored = store.episodes(run_id="toy", limit=1000)
    assert stored and all(t.prompt_ids and t.action_ids for e in stored for t in e.turns)
    ledger = read_jsonl(cfg.run_dir / "trained.jsonl")
    assert sum(len(r["episode_ids"]) for r in ledger) == 12


def test_async_run_trains_with_bounded_staleness(tmp_path):
    cfg = load_train_config(None, toy_config(tmp_path, name="toy-async", mode="async", updates=3, staleness_bound=1,
                                             eval_every=0, eval_tasks=0, checkpoint_every=0))
    result = train(cfg)
    rows = read_jsonl(cfg.run_dir / "metrics.jsonl")
    assert result.updates == 3 and [r["update"] for r in rows] == [1, 2, 3]
    assert max(r["staleness_max"] for r in rows) <= 1
    # what the collected episodes cost, per update (agentgym.cost)
    # (an update may see no episode end in its window; the run as a whole must)
    assert all(r["cost/tokens_out"] >= 0 and "cost/env_s" in r for r in rows)
    assert sum(r["cost/episodes"] for r in rows) > 0 and all(reported(r["cost/policy_s"]) for r in rows)
    assert all(bottleneck_name(r) in STAGES for r in rows)  # every row names the stage that limits the run


def test_run_against_a_served_policy_ends_cleanly_with_its_weights_served(tmp_path, tiny_dir):
    """backend: openai against `agentgym serve`: the run closes its HTTP client on its own event loop (closing it on
    a second one failed every served run at its end with 'Event loop is closed')."""
    pytest.importorskip("uvicorn")
    import httpx

    from agentgym.launch import serve_model

    with serve_model(tiny_dir) as served:
        cfg = load_train_config(None, toy_config(tmp_path, name="toy-served", updates=1, eval_every=0, eval_tasks=0,
                                                 checkpoint_every=0, backend="openai", backend_url=f"{served.url}/v1"))
        result = train(cfg)
        assert result.updates == 1 and httpx.get(f"{served.url}/health", timeout=10).json()["version"] == 1
    assert [r["update"] for r in read_jsonl(cfg.run_dir / "metrics.jsonl")] == [1]


def test_resume_after_sigkill_neither_repeats_nor_loses_episodes(tmp_path):
    conf = toy_config(tmp_path, name="killed", updates=8, checkpoint_every=2, eval_every=0, eval_tasks=0,
                      tensorboard=False, plot=False)
    path = tmp_path / "killed.yaml"
    path.write_text(yaml.safe_dump(conf))
    run_dir = tmp_path / "runs" / "killed"
    cmd = [sys.executable, "-m", "agentgym", "train", str(path)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    latest = run_dir / "checkpoints" / "latest"
    deadline = time.monotonic() + 300
    while not (latest.exists() and latest.read_text() >= "update-000004"):
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        if time.monotonic() > deadline:
            pytest.fail("no second checkpoint within 300 s")
        time.sleep(0.05)
    ledger_at_kill = read_jsonl(run_dir / "trained.jsonl")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    checkpoint = latest.read_text()
    cut = int(checkpoint.split("-")[1])
    store = TrajectoryStore(run_dir / "episodes.db")
    summaries = store.summaries(run_id="killed", limit=100000)
    before = {e["id"] for e in summaries if e["status"] != "partial"}  # partial: in flight at the kill
    in_flight = {e["id"] for e in summaries} - before

    done = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resumed killed from {checkpoint}" in done.stdout
    ledger = read_jsonl(run_dir / "trained.jsonl")
    assert [r["update"] for r in ledger] == list(range(1, 9))
    # the surviving lineage: updates up to the checkpoint are exactly what was trained before the kill
    kept = [r for r in ledger_at_kill if r["update"] <= cut]
    assert ledger[:cut] == kept
    trained = [i for r in ledger for i in r["episode_ids"]]
    assert len(trained) == len(set(trained)), "an episode was trained twice"
    # every episode collected before the kill and not trained by the checkpoint is trained after resume
    # (nothing is dropped in this config: no curation, no staleness in sync mode)
    lost = before - set(trained)
    assert not lost, f"{len(lost)} episodes collected before the kill were never trained"
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["update"] for r in rows] == list(range(1, 9))
    # in flight at the kill: ended on resume as infra failures (retried, never trained); none left in flight
    assert {e.id for e in store.episodes(run_id="killed", status="error", failure="infra")} >= in_flight
    assert not in_flight & set(trained) and store.count(run_id="killed", status="partial") == 0


def test_two_sync_runs_of_one_seed_store_the_same_episodes_and_train_the_same_weights(tmp_path):
    """Each turn's sampler is seeded from the run's seed and the episode's key, and groups reach the data manager
    in the order they were started: concurrent collection (8 requests batched) repeats exactly."""
    def run(name: str) -> tuple[list, list]:
        cfg = load_train_config(None, toy_config(tmp_path / name, name="same", updates=3, sft_steps=30, sft_episodes=8,
                                                 eval_tasks=0, eval_every=0, checkpoint_every=0, tensorboard=False,
                                                 plot=False, temperature=1.0))
        train(cfg)
        stored = TrajectoryStore(cfg.store_url).episodes(run_id="same", limit=1000)
        episodes = sorted((e.metadata["sample_key"], e.policy_version, e.total_reward,
                           tuple(tuple(t.action_ids) for t in e.turns)) for e in stored)
        losses = [(r["update"], r["loss"], r["success_rate"]) for r in read_jsonl(cfg.run_dir / "metrics.jsonl")]
        return episodes, losses

    (episodes, losses), (episodes_again, losses_again) = run("a"), run("b")
    assert len(episodes) == 18 and {e[1] for e in episodes} == {0, 1, 2}
    assert any(e[2] > 0 for e in episodes) and any(e[2] == 0 for e in episodes)  # a learning signal, not all equal
    assert episodes == episodes_again
    # the sampler's log-probs come from batched forwards whose padding depends on which requests share a batch:
    # the losses agree to float precision, not bit for bit
    assert [r[::2] for r in losses] == [r[::2] for r in losses_again]
    assert [r[1] for r in losses] == pytest.approx([r[1] for r in losses_again], rel=1e-4, abs=1e-7)
