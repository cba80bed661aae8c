"""Run the viewer: in the foreground (`agentgym view`) or in a background thread (tests, benchmarks)."""

from __future__ import annotations

import threading
import time
from typing import Any

from agentgym.errors import require
from agentgym.launch import free_port
from agentgym.store import TrajectoryStore
from agentgym.viewer.app import create_app


def serve(store: TrajectoryStore, *, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve the viewer until interrupted."""
    uvicorn = require("uvicorn", extra="serve", what="the trajectory viewer")
    uvicorn.run(create_app(store), host=host, port=port, log_level="warning")


class BackgroundViewer:
    """The viewer on a free loopback port in a daemon thread; `url` is ready once `start` returns.

        with BackgroundViewer(store) as viewer:
            urllib.request.urlopen(viewer.url + "/episodes")
    """

    def __init__(self, store: TrajectoryStore, *, host: str = "127.0.0.1", port: int | None = None):
        uvicorn = require("uvicorn", extra="serve", what="the trajectory viewer")
        self.host, self.port = host, port or free_port(host)
        config = uvicorn.Config(create_app(store), host=self.host, port=self.port, log_level="warning",
                                lifespan="off")
        self._server: Any = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="agentgym-viewer", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> BackgroundViewer:
        """Start serving; returns once uvicorn reports that it listens (its `started` flag)."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the viewer thread exited before listening on {self.url}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the viewer did not start listening on {self.url} within {timeout:.0f}s")
            self._thread.join(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> BackgroundViewer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
