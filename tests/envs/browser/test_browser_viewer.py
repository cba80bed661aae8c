"""A Browser-v0 episode in the trajectory viewer: its screenshots, turn by turn, in real Chromium."""

from __future__ import annotations

from pathlib import Path

from agentgym.envs.browser.driver import CHROMIUM, CHROMIUM_ARGS

from agentgym.registration import make
from agentgym.single_episode import run_episode
from agentgym.store import TrajectoryStore

ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts" / "browser"


def test_viewer_shows_a_browser_episodes_screenshots_turn_by_turn(tmp_path):
    from playwright.sync_api import sync_playwright

    from agentgym.policy.simple import resolve_policy
    from agentgym.viewer.server import BackgroundViewer

    store = TrajectoryStore(f"sqlite:///{tmp_path / 'browser.db'}")
    env = make("Browser-v0", sites=["shop"], screenshots="png", screenshot_dir=str(tmp_path / "shots"))
    episode = run_episode(env, resolve_policy("solver"), env_id="Browser-v0", task_id="shop/easy/000", seed=0,
                          max_turns=20, run_id="browser-run")
    env.close()
    assert episode.total_reward == 1.0 and all(Path(t.info["screenshot"]).is_file() for t in episode.turns)
    store.put(episode)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with BackgroundViewer(store) as viewer, sync_playwright() as pw:
        args = [a for a in CHROMIUM_ARGS if not a.startswith("--host-resolver-rules")]  # the viewer is on loopback
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{viewer.url}/episodes/{episode.id}")
        images = page.locator("article.turn .shots img")
        assert images.count() == episode.num_turns  # one screenshot per turn, in turn order
        for i in range(episode.num_turns):
            images.nth(i).scroll_into_view_if_needed()
            assert images.nth(i).evaluate("el => el.complete && el.naturalWidth") == 800  # decoded, viewport wide
        sources = [images.nth(i).get_attribute("src") for i in range(episode.num_turns)]
        assert sources == [f"/episodes/{episode.id}/media/{i}/screenshot" for i in range(episode.num_turns)]
        urls = [t.info["url"] for t in episode.turns]
        assert urls[-1].startswith("http://shop.test/order/")
        page.screenshot(path=str(ARTIFACTS / "viewer-browser-episode.png"), full_page=True)
        browser.close()
    store.close()
