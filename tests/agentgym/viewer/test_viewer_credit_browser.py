"""The viewer's group page on the store of a real (toy-scale) GiGPO training run, in headless Chromium.

No fixture data: a tiny model is warm-started and trained for two updates through the real loop;
the page must show the advantages, episode/step parts and step groups the trainer wrote back.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("AGENTGYM_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts" / "viewer"


@pytest.fixture(scope="module")
def trained_store(tmp_path_factory):
    from agentgym.trainer.train import train

    from agentgym.config import load_train_config
    from agentgym.store import TrajectoryStore

    out = tmp_path_factory.mktemp("gigpo-run")
    cfg = load_train_config(None, dict(
        name="gigpo-view", output_dir=str(out), env="Maze-v0", env_kwargs={"difficulty": "open"}, max_turns=8,
        chat_tools=False, torch_threads=1, groups_per_batch=4, group_size=4, concurrency=16, max_new_tokens=4,
        estimator="gigpo", updates=2, sft_steps=30, sft_episodes=8, train_tasks=20, checkpoint_every=0,
        tensorboard=False, plot=False))
    train(cfg)
    store = TrajectoryStore(cfg.store_url)
    yield store
    store.close()


def test_group_page_shows_gigpo_step_groups_from_a_real_run(trained_store):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the browser extra)")
    from agentgym.viewer.server import BackgroundViewer

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/apt.sh (apt-get install chromium)")
    episodes = trained_store.summaries(run_id="gigpo-view")
    credit = trained_store.credit([e["id"] for e in episodes])
    shared = [r for rs in credit.values() for r in rs if not r["dropped"] and (r["step_group_size"] or 0) > 1]
    assert shared, "two updates of GiGPO compared no turns taken from the same state"
    group_id = next(e["group_id"] for e in episodes if e["id"] == shared[0]["episode_id"])
    in_group = {e["id"] for e in episodes if e["group_id"] == group_id}
    expected = [r for r in credit.values() for r in r if r["episode_id"] in in_group and r["step_part"] is not None]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with BackgroundViewer(trained_store) as viewer, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{viewer.url}/group/{group_id}")
        assert page.get_by_role("heading", name="Step groups from training").count() == 1
        assert page.locator("tr.step-group").count() >= 1
        cells = page.locator("[data-step-group]")
        assert cells.count() == len(expected)  # every trained turn of the group shows its parts
        first = shared[0]
        text = page.locator(f"[data-turn='{first['episode_id']}:{first['index']}']").inner_text()
        assert f"E{first['episode_part']:+.2f} S{first['step_part']:+.2f} ·{first['step_group_size']}" in text
        assert page.get_by_text(f"A={first['advantage']:+.2f}").count() >= 1
        page.screenshot(path=str(ARTIFACTS / "group-gigpo-real-run.png"), full_page=True)
        browser.close()
