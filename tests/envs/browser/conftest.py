"""Browser-v0 tests run real headless Chromium (Debian's /usr/bin/chromium) through Playwright."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from playground import PlaygroundSite  # noqa: E402


def pytest_collection_modifyitems(items):
    for item in items:
        if "envs/browser" in str(item.fspath):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session", autouse=True)
def _needs_browser():
    pytest.importorskip("playwright.async_api", reason="pip install 'agentgym[browser]'")
    if not Path("/usr/bin/chromium").exists():
        pytest.fail("/usr/bin/chromium is missing: run scripts/apt.sh (apt-get install chromium)")


@pytest.fixture
def playground(monkeypatch):
    """Browser-v0 on the test-only playground site."""
    from agentgym.envs.browser import sites
    from agentgym.envs.browser.env import BrowserEnv

    monkeypatch.setitem(sites.SITES, "playground", PlaygroundSite)
    env = BrowserEnv(sites=("playground",), step_timeout_s=8, action_timeout_s=1)
    yield env
    env.close()
