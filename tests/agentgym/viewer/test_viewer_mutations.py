"""The episode page lists each turn's changes to the system (`info["mutations"]`, as SRE-v0 records them)."""

from __future__ import annotations

import urllib.request

from agentgym import Episode, TrajectoryStore
from agentgym.trajectory import Turn
from agentgym.viewer.server import BackgroundViewer


def test_episode_page_shows_executed_and_refused_mutations_per_turn(tmp_path) -> None:
    store = TrajectoryStore(str(tmp_path / "m.db"))
    turns = [
        Turn(index=0, observation="incident", action_text="status", info={"mutations": []}),
        Turn(index=1, observation="ok", action_text="restart", info={"mutations": [
            {"name": "restart", "arguments": {"service": "app"}, "status": "executed", "output": "app RUNNING"},
            {"name": "run", "arguments": {"command": "rm -rf /srv"}, "status": "refused",
             "reason": "refused as destructive"}]}),
    ]
    episode = Episode(env_id="SRE-v0", task_id="easy/t", turns=turns)
    store.put(episode)
    with BackgroundViewer(store) as viewer:
        page = urllib.request.urlopen(f"{viewer.url}/episodes/{episode.id}").read().decode()
    assert page.count('class="mutations"') == 1  # turn 0 changed nothing
    assert "restart(app) · executed" in page and "run(rm -rf /srv) · refused" in page
    assert 'title="refused as destructive"' in page
