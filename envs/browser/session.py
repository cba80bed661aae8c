"""One episode's browser: a fresh context whose only reachable origins are the task's, and its page.

All methods are coroutines for the driver thread (`envs.browser.driver`).
Requests for an allowed origin are answered by that origin's handler in
this process (a `Site`, or MiniWoB's static files); every other request,
`file://` and `data:` included, is aborted and counted in `blocked`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentgym.envs.browser.actions import BrowserAction
from agentgym.envs.browser.driver import BrowserDriver, PooledBrowser
from agentgym.envs.browser.observation import Node, PageView
from agentgym.envs.browser.sites.base import Request, Response

SNAPSHOT_JS = (Path(__file__).with_name("snapshot.js")).read_text()
MARKS_JS = """(bids) => {
  const layer = document.createElement('div');
  layer.id = '__agentgym_marks';
  layer.style.cssText = 'position:absolute;left:0;top:0;pointer-events:none;z-index:2147483647';
  for (const bid of bids) {
    const el = document.querySelector(`[bid="${bid}"]`);
    if (!el) continue;
    const r = el.getBoundingClientRect();
    const box = document.createElement('div');
    box.style.cssText = `position:absolute;left:${r.left + scrollX}px;top:${r.top + scrollY}px;width:${r.width}px;` +
      `height:${r.height}px;outline:2px solid #e11d48;font:bold 10px monospace;color:#fff`;
    const tag = document.createElement('span');
    tag.textContent = bid;
    tag.style.cssText = 'position:absolute;left:0;top:-12px;background:#e11d48;padding:0 2px';
    box.appendChild(tag);
    layer.appendChild(box);
  }
  document.body.appendChild(layer);
}"""
MAX_BLOCKED_KEPT = 50
NAVIGATION_RETRIES = 5
Handler = Callable[[Request], Response]

#: where to click an element whose centre another element covers: a point of the page (viewport pixels) where it
#: shows on top, with 3 px of it all round; null when its centre shows (Playwright's own click) or when it shows
#: nowhere (off screen, or covered all over). A partly covered button is clicked where it shows, as a person would
VISIBLE_POINT = """el => {
  const r = el.getBoundingClientRect(), ours = (x, y) => {
    const hit = document.elementFromPoint(x, y);
    return hit && (hit === el || el.contains(hit));
  };
  for (const fy of [0.5, 0.25, 0.75, 0.1, 0.9]) for (const fx of [0.5, 0.25, 0.75, 0.1, 0.9]) {
    const x = r.left + r.width * fx, y = r.top + r.height * fy;
    if ([[0, 0], [-3, 0], [3, 0], [0, -3], [0, 3]].every(([dx, dy]) => ours(x + dx, y + dy)))
      return fx === 0.5 && fy === 0.5 ? null : {x, y};
  }
  return null;
}"""


class ActionFailed(Exception):
    """The action could not be carried out on this page (an error observation, not a crash)."""


async def _dismiss(dialog: Any) -> None:
    """alert/confirm/prompt would block the page: dismiss them."""
    await dialog.dismiss()


async def _close_popup(page: Any) -> None:
    """A second tab (target=_blank, window.open) is closed: an episode has exactly one page."""
    if len(page.context.pages) > 1:
        await page.close()


def _navigated(exc: BaseException) -> bool:
    text = str(exc)
    return "Execution context was destroyed" in text or "Cannot find context with specified id" in text


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


@dataclass
class SessionStats:
    requests: int = 0
    blocked: int = 0
    blocked_urls: list[str] = field(default_factory=list)


class BrowserSession:
    """A context and page for one episode (create with `open`, end with `close`)."""

    def __init__(self, driver: BrowserDriver, handlers: dict[str, Handler], *, viewport: tuple[int, int] = (800, 600),
                 action_timeout_s: float = 3.0, max_nodes: int = 3000):
        self.driver, self.handlers = driver, {origin_of(o): h for o, h in handlers.items()}
        self.viewport, self.action_timeout_ms, self.max_nodes = viewport, int(action_timeout_s * 1000), max_nodes
        self.stats = SessionStats()
        self.context: Any = None
        self.page: Any = None
        self.pooled: PooledBrowser | None = None
        self.crashed = False
        self._navigating = False  #: a main-frame navigation was answered and its page has not loaded yet

    @property
    def browser_dead(self) -> bool:
        return bool(self.pooled and self.pooled.dead)

    async def open(self, url: str) -> None:
        width, height = self.viewport
        self.context, self.pooled = await self.driver.new_context(
            viewport={"width": width, "height": height}, java_script_enabled=True, service_workers="block",
            accept_downloads=False, locale="en-US", timezone_id="UTC")
        self.context.set_default_timeout(self.action_timeout_ms)
        self.context.set_default_navigation_timeout(max(self.action_timeout_ms, 10_000))
        await self.context.route("**/*", self._route)
        self.page = await self.context.new_page()
        self.page.on("crash", self._on_crash)
        self.page.on("load", self._on_load)
        self.page.on("dialog", _dismiss)
        self.context.on("page", _close_popup)
        await self.page.goto(url, wait_until="load")

    def _on_crash(self, _: Any) -> None:
        self.crashed = True

    def _on_load(self, _: Any) -> None:
        self._navigating = False

    def allowed(self, url: str) -> bool:
        return origin_of(url) in self.handlers

    def _block(self, url: str) -> None:
        self.stats.blocked += 1
        if len(self.stats.blocked_urls) < MAX_BLOCKED_KEPT:
            self.stats.blocked_urls.append(url[:200])

    async def _route(self, route: Any) -> None:
        request = route.request
        handler = self.handlers.get(origin_of(request.url))
        if handler is None:
            self._block(request.url)
            await route.abort("blockedbyclient")
            return
        self.stats.requests += 1
        response = handler(Request.parse(request.method, request.url, request.post_data))
        hops, path = 0, None
        while response.redirect and hops < 5:
            path, hops = response.redirect, hops + 1
            response = handler(Request.parse("GET", origin_of(request.url) + path, None))
        body = response.body
        if request.is_navigation_request() and self.page is not None and request.frame == self.page.main_frame:
            self._navigating = True
        if path is not None and isinstance(body, str):  # show the redirect's URL, as a real server would
            body += f"<script>history.replaceState(null, '', {json.dumps(path)})</script>"
        await route.fulfill(status=response.status, content_type=response.content_type, body=body)

    # ---- observation -----------------------------------------------------
    async def evaluate(self, script: str, arg: Any = None) -> Any:
        """`page.evaluate`, retried when a navigation the last action started replaces the page meanwhile."""
        from playwright.async_api import Error as PlaywrightError

        for attempt in range(NAVIGATION_RETRIES):
            try:
                return await self.page.evaluate(script, arg)
            except PlaywrightError as exc:
                if not _navigated(exc) or attempt == NAVIGATION_RETRIES - 1 or self.crashed or self.browser_dead:
                    raise
                await self.page.wait_for_load_state("load")
        raise AssertionError("unreachable")

    async def view(self) -> PageView:
        result = await self.evaluate(SNAPSHOT_JS, {"maxNodes": self.max_nodes})
        title = await self.evaluate("() => document.title")
        nodes = tuple(Node.from_dict(n) for n in result["nodes"])
        return PageView(url=self.page.url, title=title, nodes=nodes, truncated=result["truncated"])

    async def screenshot(self, *, marks: list[str] | None = None) -> bytes:
        """A PNG of the viewport; with `marks`, boxes and bid labels drawn over those elements (set-of-marks)."""
        if marks is None:
            return await self.page.screenshot(type="png")
        await self.evaluate(MARKS_JS, marks)
        try:
            return await self.page.screenshot(type="png")
        finally:
            await self.evaluate("() => document.getElementById('__agentgym_marks')?.remove()")

    # ---- actions ---------------------------------------------------------
    async def act(self, action: BrowserAction) -> None:
        """Carry out `action`; `ActionFailed` says why it could not be done."""
        if action.name == "scroll":
            await self.evaluate("([x, y]) => window.scrollBy(x, y)", [action.dx, action.dy])
        elif action.name == "goto":
            await self._goto(action.text or "")
        elif action.name == "back":
            await self._back()
        elif action.name != "answer":
            await self._element_action(action)
        await self._settle()

    async def _settle(self) -> None:
        """Wait for a navigation the action started (answered but not loaded yet) and for the page's load."""
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        timeout = max(self.action_timeout_ms, 10_000)
        try:
            if self._navigating:
                await self.page.wait_for_event("load", timeout=timeout)
            await self.page.wait_for_load_state("load", timeout=timeout)
        except PlaywrightTimeout:  # a slow page is observed as it is; a hung one hits the step timeout
            pass

    async def _back(self) -> None:
        if await self.page.go_back(wait_until="load") is None:
            raise ActionFailed("there is no previous page to go back to")
        if not self.allowed(self.page.url):  # before the task's first page: stay on the site
            await self.page.go_forward(wait_until="load")
            raise ActionFailed("there is no previous page of the task site to go back to")

    async def _goto(self, url: str) -> None:
        if not self.allowed(url):
            self._block(url)
            allowed = ", ".join(sorted(self.handlers))
            raise ActionFailed(f"goto({url[:100]!r}) is outside the task site; allowed: {allowed}")
        await self.page.goto(url, wait_until="load")

    async def _element_action(self, action: BrowserAction) -> None:
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        element = self.page.locator(f'[bid="{action.bid}"]')
        if await element.count() == 0:
            raise ActionFailed(f"no element [{action.bid}] on this page; use a bid from the current observation")
        element = element.first
        if not await element.is_visible():
            raise ActionFailed(f"element [{action.bid}] is hidden; act on a visible element or scroll")
        try:
            await self._do(element, action)
        except PlaywrightTimeout:
            raise ActionFailed(f"could not {action.name} [{action.bid}] within {self.action_timeout_ms / 1000:g} s "
                               "(disabled, covered by another element, or not editable)") from None
        except PlaywrightError as exc:
            if self.crashed or self.browser_dead:
                raise
            first = str(exc).splitlines()[0].removeprefix("Locator.").strip()
            raise ActionFailed(f"{action.name} [{action.bid}] failed: {first[:200]}") from None

    async def _do(self, element: Any, action: BrowserAction) -> None:
        if action.name == "click":
            point = await element.evaluate(VISIBLE_POINT)
            if point is None or not await element.is_enabled():
                await element.click()  # Playwright's checks; a covered or disabled element times out, named
            else:  # its centre lies under another element: the mouse goes where it shows
                await self.page.mouse.click(point["x"], point["y"])
        elif action.name == "fill":
            await element.fill(action.text or "")
        elif action.name == "press":
            await element.press(action.text or "")
        elif action.name == "select":
            options = await element.evaluate(
                "el => el.tagName === 'SELECT' ? Array.from(el.options).map(o => o.textContent.trim()) : null")
            if options is None:
                raise ActionFailed(f"element [{action.bid}] is not a drop-down; select() needs a combobox")
            if action.text not in options:
                raise ActionFailed(f"[{action.bid}] has no option {action.text!r}; options: {options[:20]}")
            await element.select_option(label=action.text)

    async def close(self) -> None:
        if self.pooled is not None:
            pooled, self.pooled = self.pooled, None
            await self.driver.close_context(self.context, pooled)
