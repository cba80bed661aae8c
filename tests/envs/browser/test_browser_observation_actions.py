"""Browser-v0 observations and actions on a real page: bids, values, states, errors, tool calls."""

from __future__ import annotations

import json

import pytest
from agentgym.envs.browser.actions import parse_action

from agentgym.errors import MalformedActionError


def bid(obs: str, role: str, name: str) -> str:
    for line in obs.splitlines():
        if f'] {role} "{name}"' in line:
            return line.split("]")[0].strip().lstrip("[")
    raise AssertionError(f"no {role} {name!r} in\n{obs}")


def test_tree_shows_bids_values_states_and_prunes_hidden(playground):
    obs, info = playground.reset(seed=0)
    assert obs.startswith("Task: Answer 42.\nURL: http://play.test/\nTitle: Playground")
    assert '] textbox "Query" value="start"' in obs
    assert '] combobox "Size" value="Large"' in obs and '  option "Large" selected' in obs
    assert '] checkbox "Gift wrap" checked' in obs
    assert '] button "Locked" disabled' in obs
    assert "Secret" not in obs  # hidden: pruned
    playground.prune = False
    obs, *_ = playground.step("scroll(0, 0)")
    assert '] button "Secret" hidden' in obs and "generic" in obs
    playground.prune = True
    obs, *_ = playground.step(f"click({bid(obs, 'textbox', 'Query')})")
    assert '] textbox "Query" value="start" focused' in obs


def test_fill_select_press_and_bids_stay_stable(playground):
    obs, _ = playground.reset(seed=0)
    query, size = bid(obs, "textbox", "Query"), bid(obs, "combobox", "Size")
    obs, *_ = playground.step(f'fill({query}, "hello world")')
    obs, *_ = playground.step(f'select({size}, "Small")')
    assert f'[{query}] textbox "Query" value="hello world"' in obs and f'[{size}] combobox "Size" value="Small"' in obs
    obs, _, _, _, info = playground.step(f'press({query}, "Enter")')
    assert info["url"].startswith("http://play.test/echo?q=hello+world") and "11 characters" in obs


@pytest.mark.parametrize("action, message", [
    ("click(9999)", "no element [9999] on this page"),
    ("click(SECRET)", "is hidden"),
    ("click(LOCKED)", "could not click"),
    ('select(QUERY, "Large")', "is not a drop-down"),
    ('select(SIZE, "Huge")', "has no option 'Huge'"),
    ("back()", "no previous page"),
])
def test_impossible_actions_are_error_observations(playground, action, message):
    obs, _ = playground.reset(seed=0)
    playground.prune = False
    obs, *_ = playground.step("scroll(0, 0)")
    for key, role, name in (("SECRET", "button", "Secret"), ("LOCKED", "button", "Locked"),
                            ("QUERY", "textbox", "Query"), ("SIZE", "combobox", "Size")):
        action = action.replace(key, bid(obs, role, name))
    obs, reward, terminated, truncated, info = playground.step(action)
    assert info["error_kind"] == "action_failed" and message in info["last_action_error"]
    assert f"Last action error: {info['last_action_error']}" in obs
    assert (reward, terminated, truncated) == (0.0, False, False)


@pytest.mark.parametrize("reply, kind", [
    ("I am not sure", "malformed_action"),
    ("dance(3)", "unknown_tool"),
    ("click()", "invalid_arguments"),
    ('click("abc")', "invalid_arguments"),
    ("fill(3, __import__('os'))", "malformed_action"),
    ('press(3, "Enter; rm -rf /")', "invalid_arguments"),
])
def test_malformed_replies_are_error_observations(playground, reply, kind):
    playground.reset(seed=0)
    obs, reward, terminated, truncated, info = playground.step(reply)
    assert info["error_kind"] == kind and obs.startswith("Task: Answer 42.") and "Error:" in obs
    assert (terminated, truncated) == (False, False)


def test_text_and_tool_call_forms_parse_to_the_same_action():
    text = parse_action('I will search now.\nfill(12, "blue shirt")')
    tool = parse_action('<tool_call>{"name": "fill", "arguments": {"bid": "12", "text": "blue shirt"}}</tool_call>')
    openai = parse_action(json.dumps({"tool_calls": [{"type": "function", "function": {
        "name": "fill", "arguments": json.dumps({"bid": 12, "text": "blue shirt"})}}]}))
    assert text == tool == openai and str(text) == 'fill(12, "blue shirt")'
    assert parse_action(str(text)) == text
    with pytest.raises(MalformedActionError):
        parse_action('<tool_call>{"name": "click", "arguments": {"id": 3}}</tool_call>')


def test_answer_ends_the_episode_with_the_sites_verdict(playground):
    playground.reset(seed=0)
    obs, reward, terminated, truncated, info = playground.step('answer("42")')
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    with pytest.raises(RuntimeError, match="episode is over"):
        playground.step("scroll(0, 1)")


def test_screenshots_are_files_referenced_from_info(playground, tmp_path):
    playground.screenshots, playground.screenshot_dir = "both", tmp_path
    _, info = playground.reset(seed=0)
    _, _, _, _, info = playground.step("scroll(0, 200)")
    for key in ("screenshot", "screenshot_marks"):
        data = open(info[key], "rb").read()
        assert data.startswith(b"\x89PNG") and len(data) > 1000
    assert info["screenshot"] != info["screenshot_marks"]


@pytest.mark.parametrize("kwargs, message", [
    ({"suite": "web"}, "unknown Browser-v0 suite"), ({"sites": ["bank"]}, "unknown Browser-v0 site"),
    ({"difficulty": "insane"}, "unknown difficulty"), ({"task": "shop/x"}, "unknown Browser-v0 task"),
    ({"screenshots": "jpg"}, "screenshots='jpg'"), ({"max_turns": 0}, "must be positive"),
    ({"suite": "miniwob", "task": "nope"}, "unknown MiniWoB"),
])
def test_bad_configs_are_refused_when_the_env_is_made(kwargs, message):
    from agentgym.envs.browser.env import BrowserEnv

    from agentgym.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        BrowserEnv(**kwargs)


def test_task_poses_only_that_task():
    from agentgym.envs.browser.env import BrowserEnv

    env = BrowserEnv(task="mail/hard/003")
    assert env.task_ids() == ["mail/hard/003"]
    obs, info = env.reset(seed=0)
    assert info["task_id"] == "mail/hard/003" and info["difficulty"] == "hard"
    env.close()
