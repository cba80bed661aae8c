"""`agentgym replay EPISODE`: re-execute a stored episode and report the first turn that differs.

The collector re-runs the recorded actions on a fresh env (`Collector.replay`, the engine in
`agentgym.collector.replay` that branching uses too); "differs" is `agentgym.trajectory.turn_difference`.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from agentgym.registration import make
from agentgym.trajectory import Episode, TurnDifference


def replay(episode: Episode, *, env_kwargs: dict[str, Any] | None = None) -> TurnDifference | None:
    """Replay `episode`'s actions from its seed and task; None when every turn matches the record."""
    from agentgym.collector import Collector

    factory: Any = functools.partial(make, episode.env_id, **(env_kwargs or {}))
    factory.env_id = episode.env_id

    async def run() -> TurnDifference | None:
        collector = Collector(factory, _no_action, None, progress=False, concurrency=1)
        try:
            return await collector.replay(episode)
        finally:
            await collector.aclose()

    return asyncio.run(run())


def _no_action(messages: Any, env: Any) -> str:
    """The replay's policy: it steps recorded actions and generates nothing."""
    raise RuntimeError("a replay steps recorded actions; nothing may be generated")
