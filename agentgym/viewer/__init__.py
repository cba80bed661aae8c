"""The trajectory viewer: a local web app over the trajectory store (`agentgym view`).

    from agentgym.viewer import create_app, BackgroundViewer
    with BackgroundViewer(TrajectoryStore("runs/demo.db")) as viewer:
        print(viewer.url)

Needs the `serve` extra (fastapi, uvicorn) and jinja2. The submodules that
compute what pages show (queries, tokens, media, charts, groups, diff) import
neither.
"""

from __future__ import annotations

from typing import Any

from agentgym.importing import lazy_attributes


def create_app(store: Any) -> Any:
    """The FastAPI app over `store` (see `agentgym.viewer.app`)."""
    from agentgym.viewer.app import create_app as _create

    return _create(store)


__getattr__ = lazy_attributes(__name__, dict.fromkeys(("BackgroundViewer", "serve", "free_port"), f"{__name__}.server"))


__all__ = ["BackgroundViewer", "create_app", "free_port", "serve"]
