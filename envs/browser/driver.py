"""One thread that owns Playwright and Chromium; every browser call of the process goes through it.

Playwright's sync API is bound to the thread that started it, and the
collector steps envs from a pool of worker threads. So the process has one
`BrowserDriver`: a daemon thread running an asyncio loop with Playwright's
async API. Envs hand it coroutines (`call` blocks a sync caller, `acall`
awaits from any event loop), which makes every env built on it safe to use
from any thread, and lets many episodes' page work overlap.

The driver pools browsers: each episode gets a fresh context (its own
cookies and storage) in a browser that has served fewer than
`episodes_per_browser` episodes; a browser that reached the limit is closed
once its last context closes, and a dead one is replaced.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agentgym.errors import ConfigError, require

T = TypeVar("T")

CHROMIUM = os.environ.get("AGENTGYM_CHROMIUM", "/usr/bin/chromium")
#: headless Chromium that talks to nobody: no GPU, no sandbox (we are the sandbox's user), no background
#: traffic, and every host name resolves to nothing (requests to task sites never reach the network).
CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-default-apps",
                 "--disable-extensions", "--disable-dev-shm-usage", "--mute-audio",
                 "--host-resolver-rules=MAP * ~NOTFOUND")


@dataclass
class PooledBrowser:
    """One Chromium process and how many episodes it has served."""

    browser: Any
    served: int = 0
    open_contexts: int = 0
    retired: bool = False
    dead: bool = False
    generation: int = 0
    pid: int | None = None


@dataclass
class PoolStats:
    """Counters of the pool, for reports and tests."""

    launched: int = 0
    closed: int = 0
    contexts: int = 0
    crashed: int = 0


class BrowserDriver:
    """The Playwright thread and its browser pool (one per process: use `shared_driver`)."""

    def __init__(self, *, executable: str = CHROMIUM, episodes_per_browser: int = 32, start_timeout_s: float = 60.0):
        require("playwright.async_api", extra="browser", what="Browser-v0")
        if not Path(executable).exists():
            raise ConfigError(f"Chromium not found at {executable}: install Debian's chromium package "
                              "(scripts/apt.sh) or set AGENTGYM_CHROMIUM to its path")
        if episodes_per_browser < 1:
            raise ConfigError(f"episodes_per_browser must be >= 1, got {episodes_per_browser}")
        self.executable, self.episodes_per_browser = executable, episodes_per_browser
        self.stats = PoolStats()
        self._browsers: list[PooledBrowser] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agentgym-browser", daemon=True)
        self._thread.start()
        self._lock: asyncio.Lock | None = None
        self._playwright = self.call(self._start(), timeout_s=start_timeout_s)

    async def _start(self) -> Any:
        from playwright.async_api import async_playwright

        self._lock = asyncio.Lock()
        return await async_playwright().start()

    # ---- running coroutines on the driver thread -------------------------
    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if not self._thread.is_alive():
            coro.close()
            raise RuntimeError("the browser driver thread has stopped")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call(self, coro: Coroutine[Any, Any, T], *, timeout_s: float | None = None) -> T:
        """Run `coro` on the driver thread and wait for it (from any thread but the driver's)."""
        future = self.submit(coro)
        try:
            return future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"browser call did not finish within {timeout_s:g} s") from None

    async def acall(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` on the driver thread from another event loop."""
        return await asyncio.wrap_future(self.submit(coro))

    # ---- the pool (driver thread only) -----------------------------------
    async def new_context(self, **options: Any) -> tuple[Any, PooledBrowser]:
        """A fresh context in a pooled browser; release it with `close_context`."""
        assert self._lock is not None
        async with self._lock:
            pooled = next((b for b in self._browsers if not (b.retired or b.dead)
                           and b.served < self.episodes_per_browser), None)
            if pooled is None:
                pooled = await self._launch()
            pooled.served += 1
            pooled.open_contexts += 1
            if pooled.served >= self.episodes_per_browser:
                pooled.retired = True
        self.stats.contexts += 1
        try:
            context = await pooled.browser.new_context(**options)
        except Exception:
            await self.close_context(None, pooled)
            raise
        return context, pooled

    async def _launch(self) -> PooledBrowser:
        before = chromium_main_pids()
        browser = await self._playwright.chromium.launch(
            executable_path=self.executable, args=list(CHROMIUM_ARGS), headless=True, timeout=60_000)
        new = chromium_main_pids() - before
        pooled = PooledBrowser(browser, generation=self.stats.launched, pid=new.pop() if len(new) == 1 else None)
        self.stats.launched += 1

        def disconnected(_: Any) -> None:
            if not pooled.retired or pooled.open_contexts:
                pooled.dead = True
        browser.on("disconnected", disconnected)
        self._browsers.append(pooled)
        return pooled

    async def close_context(self, context: Any, pooled: PooledBrowser) -> None:
        """Close an episode's context; close its browser when retired and idle, or forget it when dead."""
        if context is not None and not pooled.dead:
            try:
                await asyncio.wait_for(context.close(), 30)
            except Exception:  # a hung or crashed context: the browser will be recycled
                pooled.retired = True
        pooled.open_contexts -= 1
        if (pooled.retired or pooled.dead) and pooled.open_contexts <= 0 and pooled in self._browsers:
            self._browsers.remove(pooled)
            self.stats.crashed += pooled.dead
            self.stats.closed += 1
            if not pooled.dead:
                try:
                    await asyncio.wait_for(pooled.browser.close(), 30)
                except Exception:
                    pass

    def browser_pids(self) -> list[int]:
        """Process ids of the live pooled browsers' main processes (memory reports, crash tests)."""
        return [b.pid for b in self._browsers if b.pid and not b.dead]

    def close(self) -> None:
        """Close every browser and stop the thread (the process exit does this too)."""
        async def shutdown() -> None:
            for pooled in list(self._browsers):
                try:
                    await asyncio.wait_for(pooled.browser.close(), 30)
                except Exception:
                    pass
            self._browsers.clear()
            await self._playwright.stop()
        try:
            self.call(shutdown(), timeout_s=60)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)


def chromium_processes(root_pid: int | None = None) -> list[Any]:
    """This process's Chromium descendants (psutil processes), or those under `root_pid`."""
    import psutil

    try:
        root = psutil.Process(root_pid or os.getpid())
        kids = root.children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for proc in kids:
        try:
            if "chrom" in proc.name().lower():
                found.append(proc)
        except psutil.Error:
            continue
    return found


def chromium_main_pids() -> set[int]:
    """Pids of this process's Chromium browser processes (not their renderers and helpers)."""
    import psutil

    pids = set()
    for proc in chromium_processes():
        try:
            if not any(arg.startswith("--type=") for arg in proc.cmdline()):
                pids.add(proc.pid)
        except psutil.Error:
            continue
    return pids


def memory_mib() -> float:
    """Proportional set size (MiB) of this process's Chromium processes (shared pages split fairly)."""
    import psutil

    total = 0
    for proc in chromium_processes():
        try:
            total += proc.memory_full_info().pss
        except psutil.Error:
            continue
    return total / 2**20


_SHARED: dict[tuple[str, int], BrowserDriver] = {}
_SHARED_LOCK = threading.Lock()


def shared_driver(*, executable: str = CHROMIUM, episodes_per_browser: int = 32) -> BrowserDriver:
    """The process's driver for these settings, started on first use."""
    key = (executable, episodes_per_browser)
    with _SHARED_LOCK:
        driver = _SHARED.get(key)
        if driver is None or not driver._thread.is_alive():  # noqa: SLF001
            driver = _SHARED[key] = BrowserDriver(executable=executable, episodes_per_browser=episodes_per_browser)
        return driver
