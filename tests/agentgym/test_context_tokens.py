"""Token accounting helpers and the chat-template append-only check (library and CLI)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.context_tokens import ChatFormat, check_template
from agentgym.policy.models import CHATML_TEMPLATE, tiny_model_dir

transformers = pytest.importorskip("transformers")

# A Qwen3-style template: earlier assistant turns lose their <think> blocks.
DROPS_REASONING = CHATML_TEMPLATE.replace(
    "{{ message.content }}<|im_end|>",
    "{% if message.role == 'assistant' and not loop.last %}{{ message.content.split('</think>')[-1] }}"
    "{% else %}{{ message.content }}{% endif %}<|im_end|>")


@pytest.fixture
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(str(tiny_model_dir()))


def test_observation_delta_appends_exactly_what_the_template_adds(tokenizer):
    fmt = ChatFormat(tokenizer)
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"}]
    action = fmt.encode("up") + [tokenizer.eos_token_id]
    observation = {"role": "user", "content": "second"}
    ids = fmt.prompt_ids(history) + action + fmt.observation_ids(history, observation, action)
    full = [*history, {"role": "assistant", "content": "up"}, observation]
    assert ids == fmt.encode(fmt.render(full, add_generation_prompt=True))
    # an action cut by length (no end-of-turn token) gets the end-of-message marker from the template
    cut = fmt.encode("up")
    assert fmt.observation_ids(history, observation, cut)[0] == tokenizer.eos_token_id


def test_append_only_template_passes_with_tools(tokenizer):
    tools = [{"type": "function", "function": {"name": "move", "parameters": {"type": "object"}}}]
    assert check_template(tokenizer, tools=tools).append_only


def test_a_template_that_drops_reasoning_is_caught_at_the_first_differing_turn(tokenizer):
    tokenizer.chat_template = DROPS_REASONING
    result = check_template(tokenizer)
    assert not result.append_only
    assert result.first_diff_turn == 1 and result.first_diff_part == "action"  # the turn that reasoned
    assert result.kind == "template_rewrite" and result.explained_by == "drop_earlier_reasoning"
    assert result.train_on == "as_sampled" and "turn 1" in result.describe()


def test_cli_tokens_check(tmp_path, tokenizer):
    runner = CliRunner()
    ok = runner.invoke(app, ["tokens", "check", str(tiny_model_dir())])
    assert ok.exit_code == 0 and "append-only" in ok.output
    tokenizer.chat_template = DROPS_REASONING
    tokenizer.save_pretrained(tmp_path)
    bad = runner.invoke(app, ["tokens", "check", str(tmp_path), "--json"])
    assert bad.exit_code == 1 and '"first_diff_turn": 1' in bad.output and "drop_earlier_reasoning" in bad.output
