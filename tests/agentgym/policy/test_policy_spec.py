"""The policy grammar: parsing, checkpoint lookup, loading, and model policies in rollout and branch replay."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket

import pytest
from typer.testing import CliRunner

from agentgym import TrajectoryStore
from agentgym.cli import app
from agentgym.errors import ConfigError
from agentgym.policy.checkpoints import RUN_CONFIG, locate_model
from agentgym.policy.loading import PolicyOptions, open_policy
from agentgym.policy.spec import parse_policy

runner = CliRunner()


@pytest.mark.parametrize("text,kind,target,model,ref", [
    ("random", "random", "", None, None),
    ("solver", "solver", "", None, None),
    ("scripted:pkg.mod:act", "scripted", "pkg.mod:act", None, None),
    ("hf:/models/tiny", "hf", "/models/tiny", None, None),
    ("hf:runs/quickstart@latest", "hf", "runs/quickstart", None, "latest"),
    ("hf:runs/quickstart@update-50", "hf", "runs/quickstart", None, "update-50"),
    ("hf:runs/quickstart@sft", "hf", "runs/quickstart", None, "sft"),
    ("openai:http://127.0.0.1:8000/v1#tiny", "openai", "http://127.0.0.1:8000/v1", "tiny", None),
    ("openai:https://api.example.com/v1/", "openai", "https://api.example.com/v1", None, None),
    ("vllm:/models/qwen", "vllm", "/models/qwen", None, None),
])
def test_grammar(text, kind, target, model, ref):
    spec = parse_policy(text)
    assert (spec.kind, spec.target, spec.model, spec.ref) == (kind, target, model, ref)
    assert spec.is_model == (kind in ("hf", "openai", "vllm"))


@pytest.mark.parametrize("text,message", [
    ("greedy", "unknown policy 'greedy'"),
    ("hf:", "names no model path"),
    ("hf:runs/q@update-x", "unknown checkpoint '@update-x'"),
    ("openai:localhost:8000", "must start with http"),
    ("vllm:runs/q@latest", "vllm takes a model directory"),
])
def test_grammar_errors_name_the_fix(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_policy(text)


def _fake_run(tmp_path, tiny_dir, updates=(40, 50), sft=True):
    run = tmp_path / "runs" / "q"
    for u in updates:
        shutil.copytree(tiny_dir, run / "checkpoints" / f"update-{u:06d}" / "policy")
    if sft:
        shutil.copytree(tiny_dir, run / "checkpoints" / "sft" / "policy")
    (run / "checkpoints" / "latest").write_text(f"update-{updates[-1]:06d}")
    (run / RUN_CONFIG).write_text(json.dumps({"env": "Maze-v0", "env_kwargs": {"difficulty": "open"},
                                              "max_turns": 10, "max_new_tokens": 4, "chat_tools": False}))
    return run


def test_run_checkpoints_resolve_and_missing_ones_list_what_exists(tmp_path, tiny_dir):
    run = _fake_run(tmp_path, tiny_dir)
    latest = locate_model(str(run), "latest")
    assert latest.checkpoint == "update-000050" and latest.update == 50
    assert latest.profile.env_kwargs == {"difficulty": "open"} and latest.profile.max_new_tokens == 4
    assert locate_model(str(run), "update-40").path.endswith("update-000040/policy")
    assert locate_model(str(run), "sft").checkpoint == "sft"
    assert locate_model(str(run), None).checkpoint == "update-000050"  # a bare run dir means @latest
    with pytest.raises(ConfigError, match=r"no checkpoint @update-30; it has @update-40, @update-50 and @sft"):
        locate_model(str(run), "update-30")
    with pytest.raises(ConfigError, match="no such model directory"):
        locate_model(str(tmp_path / "nowhere"), None)


def test_run_checkpoint_loads_with_the_runs_prompt_settings(tmp_path, tiny_dir):
    run = _fake_run(tmp_path, tiny_dir)
    opened = asyncio.run(open_policy(f"hf:{run}@update-40", PolicyOptions(temperature=0)))
    try:
        assert opened.sampling.max_new_tokens == 4 and opened.sampling.temperature == 0
        assert type(opened.prompt_tokenizer).__name__ == "WithoutTools"  # chat_tools: false in the run
        record = opened.record()
        assert record["kind"] == "hf" and record["checkpoint"]["update"] == 40
    finally:
        asyncio.run(opened.aclose())


def test_unreachable_endpoint_fails_before_any_episode():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConfigError, match="the endpoint does not answer.*agentgym serve"):
        asyncio.run(open_policy(f"openai:http://127.0.0.1:{port}/v1", PolicyOptions(max_retries=0)))


def test_rollout_with_a_model_stores_exact_tokens_and_the_policy(tmp_path, tiny_dir):
    store = str(tmp_path / "s.db")
    result = runner.invoke(app, ["rollout", "Maze-v0", "--policy", f"hf:{tiny_dir}", "-n", "3", "--store", store,
                                 "--max-turns", "3", "--max-new-tokens", "5", "--seed", "7"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    episodes = TrajectoryStore(store).episodes()
    assert len(episodes) == 3
    for ep in episodes:
        assert ep.metadata["policy"]["spec"] == f"hf:{tiny_dir}" and ep.metadata["policy"]["sampling"]["seed"] == 7
        for turn in ep.turns:
            assert turn.prompt_ids and 0 < len(turn.action_ids) <= 5
            assert len(turn.action_logprobs) == len(turn.action_ids) and all(lp <= 0 for lp in turn.action_logprobs)


def test_branch_a_text_episode_with_a_model_into_k_siblings(tmp_path, tiny_dir):
    store = str(tmp_path / "s.db")
    assert runner.invoke(app, ["rollout", "Maze-v0", "--policy", "random", "-n", "1", "--store", store,
                               "--max-turns", "6"]).exit_code == 0
    [parent] = TrajectoryStore(store).episodes()
    turn = min(2, parent.num_turns - 1)
    result = runner.invoke(app, ["replay", parent.id, "--store", store, "--from-turn", str(turn), "--policy",
                                 f"hf:{tiny_dir}", "-n", "3", "--max-new-tokens", "4"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    children = TrajectoryStore(store).episodes(parent_id=parent.id)
    assert len(children) == 3
    for child in children:
        assert child.branch_turn == turn and child.metadata["branch"]["siblings"] == 3
        prefix, own = child.turns[:turn], child.turns[turn:]
        assert [t.action_text for t in prefix] == [t.action_text for t in parent.turns[:turn]]
        assert all(t.info.get("tokenized_prefix") and set(t.loss_mask) == {0} for t in prefix)
        assert own and all(t.action_ids and len(t.action_logprobs) == len(t.action_ids) for t in own)
    assert "differs from parent at" in result.output
