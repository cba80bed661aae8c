"""The viewer's queries on SQLite and PostgreSQL, and the pure helpers behind its pages."""

from __future__ import annotations

import base64

import pytest

from agentgym import Episode, TrajectoryStore, Turn
from agentgym.store import EpisodeFilter
from agentgym.viewer import charts, queries
from agentgym.viewer.diff import first_divergence
from agentgym.viewer.groups import find_anchors
from agentgym.viewer.media import classify, find_images


@pytest.fixture
def store(store_url) -> TrajectoryStore:
    db = TrajectoryStore(store_url)
    episodes = [Episode(id=f"ep{n:03d}", run_id=f"run-{n % 2}", env_id=("A-v0", "B-v0")[n % 3 == 0],
                        task_id=f"t{n % 4}", group_id=f"g{n % 5}", total_reward=float(n % 3 == 0),
                        created_at=1000.0 + n // 4, policy_version=n % 3) for n in range(37)]
    db.put_many(episodes)
    yield db
    db.close()


@pytest.mark.parametrize("sort", ["total_reward", "created_at", "task_id"])
@pytest.mark.parametrize("descending", [True, False])
def test_pages_cover_every_episode_once_in_order_with_ties(store, sort, descending):
    flt = EpisodeFilter()
    pages = [queries.episodes_page(store, flt, sort=sort, descending=descending, page=p, page_size=5)
             for p in range(1, 9)]
    assert pages[0].total == 37 and pages[0].pages == 8
    rows = [r for page in pages for r in page.rows]
    assert sorted(r["id"] for r in rows) == [f"ep{n:03d}" for n in range(37)]
    keys = [r[sort] for r in rows]
    assert keys == sorted(keys, reverse=descending)
    assert queries.episodes_page(store, flt, sort=sort, descending=descending, page=9, page_size=5).rows == []


def test_aggregates_children_and_trees(store):
    runs = {a.key: a for a in queries.runs_overview(store)}
    assert runs["run-0"].episodes == 19 and runs["run-1"].episodes == 18
    tasks, total = queries.tasks_page(store, EpisodeFilter(env_id="A-v0"), 1, 10)
    assert total == 4 and sum(t.episodes for t in tasks) == store.count(env_id="A-v0")
    groups, total = queries.groups_page(store, EpisodeFilter(), 1, 2)
    assert total == 5 and len(groups) == 2
    root = store.get("ep000")
    child = Episode(id="child", parent_id="ep000", branch_turn=0, created_at=2000.0)
    grandchild = Episode(id="grandchild", parent_id="child", branch_turn=0, created_at=2001.0)
    store.put_many([child, grandchild])
    assert [r["id"] for r in queries.children(store, root.id)] == ["child"]
    top, rows = queries.tree_rows(store, "grandchild")
    assert top == "ep000" and {r["id"] for r in rows} == {"ep000", "child", "grandchild"}
    store.delete("ep000")
    assert queries.tree_rows(store, "grandchild")[0] == "child"


def test_anchor_states_are_fingerprints_shared_by_two_episodes():
    turns = {"a": [{"state_fingerprint": "s0"}, {"state_fingerprint": "s1"}, {"state_fingerprint": "s1"}],
             "b": [{"state_fingerprint": "s0"}, {"state_fingerprint": "s2"}],
             "c": [{"state_fingerprint": "s1"}, {"state_fingerprint": ""}]}
    anchors = find_anchors(turns)
    assert list(anchors) == ["s0", "s1"]
    assert (anchors["s1"].episodes, anchors["s1"].visits, anchors["s1"].label) == (2, 3, "A2")


def test_images_are_found_inline_by_file_and_by_url():
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(40)).decode()
    info = {"screenshot": png, "shots": ["/tmp/a.png", "file:///tmp/b%20c.jpg"], "page": "https://x.test/s.webp",
            "text": "clicked the button", "error_kind": None}
    found = {ref.key: ref for ref in find_images(info)}
    assert found["screenshot"].kind == "inline" and found["screenshot"].src.startswith("data:image/png;base64,")
    assert (found["shots.0"].kind, found["shots.0"].src) == ("file", "/tmp/a.png")
    assert found["shots.1"].src == "/tmp/b c.jpg"
    assert found["page"].kind == "remote"
    assert "text" not in found
    assert classify("k", "data:image/gif;base64,R0lGOD").kind == "inline"


def test_metrics_become_one_chart_per_numeric_series_preferred_first():
    rows = [{"step": s, "time": 0.0, "loss": 1 / (s + 1), "reward_mean": s / 10, "note": "x"} for s in range(5)]
    series = charts.series_from_metrics(rows)
    assert [s.name for s in series] == ["reward_mean", "loss"]
    svg = charts.line_chart(series[0])
    assert svg.startswith("<svg") and "<polyline" in svg and svg.count("<circle") == 5


def test_first_divergence_names_turn_and_field():
    a = Episode(turns=[Turn(index=0, observation="o", action_text="x"), Turn(index=1, observation="p", reward=1)])
    b = Episode(turns=[Turn(index=0, observation="o", action_text="x"), Turn(index=1, observation="p")])
    assert (first_divergence(a, b).turn, first_divergence(a, b).field) == (1, "reward")
    assert first_divergence(a, Episode(turns=a.turns[:1])).field == "length"
    assert first_divergence(a, a) is None
