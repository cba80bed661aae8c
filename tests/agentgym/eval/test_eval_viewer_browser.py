"""In real headless Chromium: the viewer lists an eval run, shows its table, compares two evals,
and shows K model branches of one episode in its tree with rewards and the first differing turn."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentgym import TrajectoryStore
from agentgym.cli import app

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("AGENTGYM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts" / "viewer"
COUNTER = "tests.helpers.counter_env:Counter-v0"
runner = CliRunner()


def invoke(*args: str) -> None:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def eval_store(tmp_path_factory):
    """Two eval runs (scripted policies, labelled) and a random episode branched 3 times by the tiny model."""
    from agentgym.policy.models import tiny_model_dir

    store = str(tmp_path_factory.mktemp("evalview") / "e.db")
    invoke("eval", COUNTER, "--policy", "scripted:tests.helpers.counter_env:scripted_garbage_then_solve", "--tasks",
           "3", "-k", "2", "--store", store, "--run", "before", "--max-turns", "3")
    invoke("eval", COUNTER, "--policy", "scripted:tests.helpers.counter_env:scripted_up_to_target", "--tasks", "3",
           "-k", "2", "--store", store, "--run", "after", "--max-turns", "3")
    invoke("rollout", "Maze-v0", "--policy", "random", "-n", "1", "--store", store, "--max-turns", "5",
           "--run", "debug")
    [parent] = TrajectoryStore(store).episodes(run_id="debug")
    invoke("replay", parent.id, "--store", store, "--from-turn", "1", "--policy", f"hf:{tiny_model_dir()}", "-n",
           "3", "--max-new-tokens", "4")
    return store, parent.id


@pytest.fixture(scope="module")
def page(eval_store):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the browser extra)")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/apt.sh (apt-get install chromium)")
    from agentgym.viewer.server import BackgroundViewer

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with BackgroundViewer(TrajectoryStore(eval_store[0])) as viewer, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        context = browser.new_context(viewport={"width": 1400, "height": 900}, base_url=viewer.url)
        tab = context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        yield tab
        browser.close()
        assert not errors, f"JavaScript errors on the page: {errors}"


def test_eval_run_and_comparison_in_the_browser(page):
    page.goto("/")
    evals = page.locator("table.evals")
    assert evals.locator("a", has_text="before").count() == 1 and evals.locator("a", has_text="after").count() == 1
    page.locator("table.evals a", has_text="after").click()
    page.wait_for_url("**/evals/after")
    row = page.locator("table.eval-summary tbody tr").first
    assert "Counter-v0" in row.inner_text() and row.locator("td.pass1").inner_text() == "1.000"
    page.screenshot(path=str(ARTIFACTS / "eval-run.png"), full_page=True)
    page.goto("/")
    page.select_option("form.compare select[name=a]", "before")
    page.select_option("form.compare select[name=b]", "after")
    page.locator("form.compare button").click()
    page.wait_for_url("**/evals/compare?**")
    summary = page.locator("table.compare-summary tbody tr").first.inner_text()
    assert "Counter-v0" in summary and page.locator("table.compare-summary td.delta").inner_text().startswith("+")
    gained = page.locator("table.flips tr.gained")
    assert gained.count() == 1 and "target-3" in gained.inner_text()
    page.screenshot(path=str(ARTIFACTS / "eval-compare.png"), full_page=True)


def test_model_branches_of_one_episode_in_the_tree(page, eval_store):
    _, parent = eval_store
    page.goto(f"/episodes/{parent}/tree")
    branches = page.locator("li.node li.node")
    assert branches.count() == 3
    for i in range(3):
        card = branches.nth(i).locator(".node-head").inner_text()
        assert "branch @ turn 1" in card and ("differs from parent @ turn" in card or "same actions" in card)
        assert "hf:" in card  # the policy spec of the branch
    page.screenshot(path=str(ARTIFACTS / "model-branches.png"), full_page=True)
