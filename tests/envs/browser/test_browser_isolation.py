"""Browser-v0 isolation and hostile actions: blocked traffic, huge inputs, floods, hangs and crashes."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from test_browser_observation_actions import bid

from agentgym.errors import EnvInfraError


def test_requests_outside_the_site_are_blocked_and_counted(playground):
    obs, info = playground.reset(seed=0)
    assert info["blocked_requests"] >= 2  # the tracking pixel and the fetch to another host
    assert any("tracker.example.com" in u for u in info["blocked_urls"])
    assert any("exfil.example.net" in u for u in info["blocked_urls"])
    before = info["blocked_requests"]
    for url in ("file:///etc/passwd", "http://example.com/", "https://play.test.evil.com/", "data:text/html,hi",
                "chrome://settings", "javascript:alert(1)"):
        obs, _, _, _, info = playground.step(f'goto("{url}")')
        assert "outside the task site" in info["last_action_error"], url
        assert info["url"] == "http://play.test/"
    assert info["blocked_requests"] == before + 6


def test_script_text_in_fill_is_only_text(playground):
    obs, _ = playground.reset(seed=0)
    query = bid(obs, "textbox", "Query")
    payload = "<script>document.title='owned'</script><img src=x onerror=\"location='http://evil.test'\">"
    obs, _, _, _, info = playground.step(f"fill({query}, {payload!r})")
    assert info["title"] == "Playground" and "value=" in obs
    obs, _, _, _, info = playground.step(f'press({query}, "Enter")')
    assert info["title"] == "Echo" and f"{len(payload)} characters" in obs
    assert info["url"].startswith("http://play.test/echo?") and info["blocked_requests"] == 2


def test_huge_inputs_are_refused_with_a_clear_error(playground):
    obs, _ = playground.reset(seed=0)
    query = bid(obs, "textbox", "Query")
    obs, _, terminated, _, info = playground.step(f'fill({query}, "{"A" * 10_000_000}")')
    assert info["error_kind"] == "malformed_action" and "over the 100000 limit" in obs and not terminated
    obs, _, _, _, info = playground.step(f'fill({query}, "{"A" * 20_000}")')
    assert info["error_kind"] == "invalid_arguments" and "over the 10000 limit" in obs


def test_thousands_of_clicks_stay_contained(playground):
    playground.max_turns = 5000
    obs, _ = playground.reset(seed=0)
    box = bid(obs, "checkbox", "Gift wrap")
    flood = "\n".join([f"click({box})"] * 5000)  # one reply of thousands of clicks is one action (the last)
    obs, _, _, _, info = playground.step(flood)
    assert info["action"] == f"click({box})" and "error_kind" not in info
    for _ in range(199):  # and a long run of single clicks leaves the page working
        obs, _, terminated, truncated, info = playground.step(f"click({box})")
        assert not (terminated or truncated) and "error_kind" not in info
    line = next(x for x in obs.splitlines() if '] checkbox "Gift wrap"' in x)
    assert "checked" in line.split()  # an even number of clicks
    playground.max_turns = 3
    playground.reset(seed=0)
    results = [playground.step(f"click({box})") for _ in range(3)]
    assert results[-1][3] and results[-1][4]["truncation_reason"] == "turn limit 3"


def test_alerts_and_popups_do_not_block_the_page(playground):
    obs, _ = playground.reset(seed=0)
    obs, _, _, _, info = playground.step(f"click({bid(obs, 'button', 'Popups')})")
    assert "error_kind" not in info and info["title"] == "Playground"
    assert any("popup.test" in u for u in info["blocked_urls"]) or info["blocked_requests"] >= 2


def test_a_page_the_model_hangs_ends_as_the_models_failure(playground):
    obs, _ = playground.reset(seed=0)
    obs, reward, terminated, truncated, info = playground.step(f"click({bid(obs, 'button', 'Freeze')})")
    assert truncated and not terminated and info["failure"] == "model" and info["error_kind"] == "action_timeout"
    obs, info = playground.reset(seed=0)  # a fresh context: the next episode is unaffected
    assert "Playground" in obs


def test_a_crashed_page_is_an_infrastructure_failure_of_that_episode(playground):
    playground.reset(seed=0)

    async def crash(page):
        cdp = await page.context.new_cdp_session(page)
        try:
            await asyncio.wait_for(cdp.send("Page.crash"), 2)
        except Exception:
            pass

    playground.driver.call(crash(playground._session.page), timeout_s=30)
    with pytest.raises(EnvInfraError, match="page crashed"):
        playground.step("scroll(0, 10)")
    obs, _ = playground.reset(seed=0)
    assert "Playground" in obs


def test_a_killed_browser_is_an_infrastructure_failure_and_the_pool_replaces_it(playground):
    playground.reset(seed=0)
    pid = playground._session.pooled.pid
    assert pid in playground.driver.browser_pids()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(EnvInfraError, match="browser"):
        for _ in range(20):  # the disconnect is noticed within a step or two
            playground.step("scroll(0, 10)")
    obs, _ = playground.reset(seed=0)
    assert "Playground" in obs and playground._session.pooled.pid != pid


def test_each_episode_gets_fresh_cookies_and_storage(playground):
    playground.reset(seed=0)
    playground.driver.call(playground._session.page.evaluate(
        "() => { document.cookie = 'seen=1'; localStorage.setItem('k', 'v'); }"), timeout_s=10)
    playground.reset(seed=0)
    left = playground.driver.call(playground._session.page.evaluate(
        "() => [document.cookie, localStorage.getItem('k')]"), timeout_s=10)
    assert left == ["", None]


def test_browsers_are_recycled_every_n_episodes():
    from agentgym.envs.browser.env import BrowserEnv

    env = BrowserEnv(sites=("shop",), episodes_per_browser=2)
    stats = env.driver.stats
    launched, closed = stats.launched, stats.closed
    pids = []
    for seed in range(5):
        env.reset(seed=seed)
        pids.append(env._session.pooled.pid)
    env.close()
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]  # a fresh browser every 2 episodes
    assert stats.launched - launched == 3 and stats.closed - closed == 2  # retired browsers are closed
    live = env.driver.browser_pids()
    assert pids[0] not in live and pids[2] not in live and pids[4] in live  # the third serves the next episode
