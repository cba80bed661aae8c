"""The viewer driven end to end in real headless Chromium (Debian's) through Playwright.

Screenshots of every step land in artifacts/viewer/ (git-ignored) for people to look at.
Needs /usr/bin/chromium (scripts/apt.sh installs it) and the playwright package.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("AGENTGYM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts" / "viewer"


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the browser extra)")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/apt.sh (apt-get install chromium)")
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(viewer, browser):  # the viewer (and its store) first: building it runs asyncio, which Playwright's sync API forbids
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 900}, base_url=viewer.url)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_browse_filter_open_episode_and_token_view(page, viewer_store):
    page.goto("/")
    assert page.locator("h1").inner_text() == "Runs"
    assert page.get_by_role("link", name="ScreenCounter-v0").count() == 1
    assert page.get_by_role("link", name="Maze-v0").count() == 1
    shot(page, "01-runs")

    page.get_by_role("link", name="Episodes", exact=True).first.click()
    page.select_option("select[name=env]", "Maze-v0")
    page.select_option("select[name=status]", "complete")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"env=Maze-v0.*status=complete|status=complete.*env=Maze-v0"))
    rows = page.locator("table.episodes tbody tr")
    complete = [e for e in viewer_store.store.episodes(env_id="Maze-v0", status="complete", limit=1000)]
    assert rows.count() == len(complete) > 0
    assert all(text == "Maze-v0" for text in page.locator("table.episodes tbody tr td:nth-child(2)").all_inner_texts())
    shot(page, "02-episodes-filtered")

    page.locator("th a", has_text="reward").click()
    rewards = [float(t) for t in page.locator("table.episodes tbody td.num .reward").all_inner_texts()]
    assert rewards == sorted(rewards, reverse=True)

    episode = viewer_store.maze[0]
    page.goto(f"/episodes/{episode.id}")
    assert page.locator("article.turn").first.locator(".msg.obs pre").inner_text() == episode.turns[0].observation
    shot(page, "03-episode")

    page.locator("#tokens-tab").click()
    page.wait_for_url(re.compile(r"view=tokens"))
    strip = page.locator("#tokens-1 .token-strip .tok")
    assert strip.count() == len(episode.turns[1].action_ids)
    assert "".join(strip.all_inner_texts()) == episode.turns[1].action_text + "<|im_end|>"
    assert "logprob" in strip.first.get_attribute("title")
    shot(page, "04-tokens-logprob")
    page.get_by_role("link", name="advantage", exact=True).click()
    page.wait_for_url(re.compile(r"colour=advantage"))
    shot(page, "05-tokens-advantage")
    page.get_by_role("link", name="loss", exact=True).click()
    masked = page.locator(".tok.masked")
    assert masked.count() == sum(t.loss_mask.count(0) for t in episode.turns)
    shot(page, "06-tokens-loss")


def test_screenshots_group_tree_and_run_pages(page, viewer_store):
    counter = viewer_store.counter[0]
    page.goto(f"/episodes/{counter.id}")
    images = page.locator(".shots img")
    assert images.count() == 2 * counter.num_turns
    widths = [img.evaluate("el => el.naturalWidth") for img in images.all()]
    assert all(w == 240 for w in widths), widths  # every screenshot decoded and loaded
    shot(page, "07-screenshots")

    episode = viewer_store.maze[0]
    page.goto(f"/episodes/{episode.id}")
    page.locator("dl.kv a", has_text="maze-run:").click()
    page.wait_for_url(re.compile(r"/group/"))
    members = viewer_store.store.count(group_id=episode.group_id)  # its rollouts and the branches made from them
    assert page.locator("table.sbs thead th.ep-col").count() == members >= 3
    assert page.locator("td.cell.anchor").count() > 0
    assert page.locator("table.anchors tbody tr").count() > 0
    shot(page, "08-group")

    page.goto(f"/episodes/{viewer_store.tree_root}")
    page.locator(".branch-note a", has_text="tree").first.click()
    page.wait_for_url(re.compile(r"/tree$"))
    assert page.locator("li.node").count() == 3
    assert page.locator("li.node li.node li.node").count() == 1  # root > child > grandchild
    shot(page, "09-tree")

    page.goto("/runs/maze-run")
    assert page.locator("svg.chart").count() >= 4
    assert page.locator("svg.chart polyline").count() >= 4
    shot(page, "10-run-curves")


def test_start_a_replay_from_a_turn(page, viewer_store):
    parent = next(e for e in viewer_store.maze if e.total_reward == 0 and e.num_turns >= 5 and e.id != viewer_store.tree_root)
    page.goto(f"/episodes/{parent.id}")
    page.locator("#turn-3 .branch-link").click()
    page.wait_for_url(re.compile(r"branch_turn=3"))
    assert page.locator("select[name=from_turn]").input_value() == "3"
    page.select_option("select[name=policy]", "solver")
    shot(page, "11-replay-form")
    page.get_by_role("button", name="Replay and branch").click()
    page.wait_for_url(re.compile(r"/episodes/[0-9a-f]{32}$"))
    child_id = page.url.rsplit("/", 1)[-1]
    assert child_id != parent.id
    assert "Branched from" in page.locator(".branch-note").first.inner_text()
    assert page.locator("article.turn .badge", has_text="copied from parent").count() == 3
    shot(page, "12-replay-child")
    child = viewer_store.store.get(child_id)
    assert (child.parent_id, child.branch_turn, child.total_reward) == (parent.id, 3, 1.0)
    page.goto(f"/episodes/{parent.id}")
    assert page.locator(f'.branch-note a[href="/episodes/{child_id}"]').count() == 1


def test_bad_input_pages_in_the_browser(page, viewer_store):
    response = page.goto("/episodes/does-not-exist")
    assert response.status == 404
    assert "no episode with id 'does-not-exist'" in page.locator(".message").inner_text()
    shot(page, "13-missing-episode")
    response = page.goto("/episodes?min_reward=lots")
    assert response.status == 400
    shot(page, "14-bad-filter")
    page.goto(f"/episodes/{viewer_store.orphan}")
    assert "Env not registered" in page.locator(".notice.warn").inner_text()
    shot(page, "15-unregistered-env")
