"""The viewer's pages over real HTTP: a uvicorn server in a background thread on a real SQLite store."""

from __future__ import annotations

import html as html_lib
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from agentgym.store import EpisodeFilter
from agentgym.viewer.groups import find_anchors
from agentgym.viewer.queries import turn_actions


@dataclass
class Reply:
    status: int
    body: str
    location: str | None = None
    content_type: str = ""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def fetch(viewer, path: str, form: dict[str, str] | None = None) -> Reply:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    try:
        with _opener.open(viewer.url + path, data=data, timeout=60) as resp:
            raw = resp.read()
            return Reply(resp.status, raw.decode("utf-8", "replace"), None, resp.headers.get("content-type", ""))
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.read().decode("utf-8", "replace"), exc.headers.get("location"),
                     exc.headers.get("content-type", ""))


def episode_links(html: str) -> list[str]:
    return re.findall(r'href="/episodes/([0-9a-f]{32})"', html)


def assert_clean_error(reply: Reply, status: int, *phrases: str) -> None:
    assert reply.status == status, reply.body[:500]
    assert "text/html" in reply.content_type
    assert "Traceback" not in reply.body and 'File "' not in reply.body
    for phrase in phrases:
        assert phrase in reply.body, (phrase, reply.body[:2000])


def test_index_lists_runs_and_both_envs(viewer, viewer_store):
    reply = fetch(viewer, "/")
    assert reply.status == 200
    for text in ("maze-run", "counter-run", "Maze-v0", "ScreenCounter-v0"):
        assert text in reply.body


def test_episode_list_filters_by_env_status_reward_and_version(viewer, viewer_store):
    counter_ids = {e.id for e in viewer_store.counter}
    listed = set(episode_links(fetch(viewer, "/episodes?env=ScreenCounter-v0&size=100").body))
    assert listed == counter_ids

    winners = {e.id for e in viewer_store.store.episodes(EpisodeFilter(min_reward=0.75), limit=1000)}
    assert winners
    assert set(episode_links(fetch(viewer, "/episodes?min_reward=0.75&size=100").body)) == winners

    truncated = {r["id"] for r in viewer_store.store.summaries(EpisodeFilter(status="truncated"), limit=1000)}
    assert set(episode_links(fetch(viewer, "/episodes?status=truncated&size=100").body)) == truncated

    version_two = {e.id for e in viewer_store.maze if e.policy_version == 2}
    assert set(episode_links(fetch(viewer, "/episodes?version=2&env=Maze-v0&size=100").body)) == version_two


def test_episode_list_sorts_and_paginates(viewer, viewer_store):
    total = viewer_store.store.count()
    reward = {r["id"]: r["total_reward"] for r in viewer_store.store.summaries(limit=total)}
    for order in ("asc", "desc"):
        pages = [episode_links(fetch(viewer, f"/episodes?sort=total_reward&order={order}&size=4&page={p}").body)
                 for p in range(1, -(-total // 4) + 1)]
        listed = [i for page in pages for i in page]
        assert sorted(listed) == sorted(reward)  # every episode exactly once, across pages read from both ends
        values = [reward[i] for i in listed]
        assert values == sorted(values, reverse=order == "desc")
    first = fetch(viewer, "/episodes?sort=total_reward&order=asc&size=4&page=1").body
    assert f"page 1 of {-(-total // 4)}" in first and 'rel="next"' in first


def test_tasks_and_groups_pages_drill_down(viewer, viewer_store):
    tasks = fetch(viewer, "/tasks?env=Maze-v0").body
    for task in ("easy-3", "easy-7", "medium-2"):
        assert task in tasks
    groups = fetch(viewer, "/groups?env=Maze-v0&task=easy-7").body
    assert "maze-run:easy-7" in groups and "maze-run:easy-3" not in groups


def test_episode_page_shows_turns_screenshots_and_files(viewer, viewer_store):
    episode = viewer_store.counter[0]
    reply = fetch(viewer, f"/episodes/{episode.id}")
    assert reply.status == 200
    for turn in episode.turns:
        assert turn.observation in reply.body
    assert reply.body.count('src="data:image/png;base64,iVBORw0KGgo') == episode.num_turns
    files = re.findall(r'src="(/episodes/[0-9a-f]+/media/\d+/frame_file)"', reply.body)
    assert len(files) == episode.num_turns
    image = urllib.request.urlopen(viewer.url + files[0], timeout=30)
    assert image.headers["content-type"] == "image/png"
    assert image.read().startswith(b"\x89PNG")


def test_token_view_decodes_tokens_and_colours_each_mode(viewer, viewer_store):
    episode = viewer_store.maze[0]
    turn = episode.turns[1]
    html = fetch(viewer, f"/episodes/{episode.id}?view=tokens").body
    assert f"decoded with the tokenizer in {viewer_store.model_dir}" in html
    assert len(re.findall(r'class="tok( masked)?"', html)) == episode.num_action_tokens
    strip = html.split(f'id="tokens-{turn.index}"')[1].split("</article>")[0]
    pieces = re.findall(r'<span class="tok[^"]*"[^>]*>(.*?)</span>', strip, flags=re.S)
    assert html_lib.unescape("".join(pieces)) == turn.action_text + "<|im_end|>"
    assert f"advantage <b>{turn.advantage:+.3f}</b>" in html
    assert f"logprob {turn.action_logprobs[0]:.3f}" in html
    loss = fetch(viewer, f"/episodes/{episode.id}?view=tokens&colour=loss").body
    masked = sum(t.loss_mask.count(0) for t in episode.turns)
    assert masked and loss.count('class="tok masked"') == masked
    advantage = fetch(viewer, f"/episodes/{episode.id}?view=tokens&colour=advantage").body
    assert "hsl(0, 80%" in advantage or "hsl(210, 80%" in advantage


def test_token_view_without_a_model_dir_shows_ids(viewer, viewer_store):
    html = fetch(viewer, f"/episodes/{viewer_store.orphan}?view=tokens").body
    assert "the run recorded no model_dir" in html


def test_group_page_marks_the_anchor_states_shared_between_episodes(viewer, viewer_store):
    group = "maze-run:easy-3"
    rows = viewer_store.store.summaries(EpisodeFilter(group_id=group), limit=100)
    anchors = find_anchors(turn_actions(viewer_store.store, [r["id"] for r in rows]))
    assert anchors, "the fixture group should revisit states across episodes"
    html = fetch(viewer, "/group/" + urllib.parse.quote(group)).body
    for row in rows:
        assert row["id"] in html
    marked = re.findall(r'data-anchor="(A\d+)"', html)
    assert set(marked) == {a.label for a in anchors.values()}
    assert len(marked) == sum(a.visits for a in anchors.values())


def test_tree_page_shows_the_branches_under_their_root(viewer, viewer_store):
    html = fetch(viewer, f"/episodes/{viewer_store.branches[-1]}/tree").body
    positions = [html.index(f'href="/episodes/{i}"') for i in [viewer_store.tree_root, *viewer_store.branches]]
    assert positions == sorted(positions)
    assert "branch @ turn 2" in html and "branch @ turn 4" in html


def test_run_page_draws_training_curves(viewer):
    html = fetch(viewer, "/runs/maze-run").body
    assert html.count("<svg") >= 4
    for metric in ("reward_mean", "success_rate", "staleness_mean", "throughput_tokens_per_s"):
        assert metric in html


def test_replay_form_stores_a_child_and_redirects_to_it(viewer, viewer_store):
    parent = viewer_store.counter[1]
    reply = fetch(viewer, f"/episodes/{parent.id}/replay", {"from_turn": "1", "policy": "solver", "seed": "0"})
    assert reply.status == 303
    child_id = reply.location.rsplit("/", 1)[-1]
    child = viewer_store.store.get(child_id)
    assert (child.parent_id, child.branch_turn) == (parent.id, 1)
    assert child.turns[0].to_dict() == parent.turns[0].to_dict()
    assert child.total_reward == 1.0
    page = fetch(viewer, f"/episodes/{parent.id}").body
    assert f'href="/episodes/{child_id}"' in page


def test_missing_ids_give_404_pages(viewer):
    assert_clean_error(fetch(viewer, "/episodes/0123456789abcdef"), 404, "no episode with id", "0123456789abcdef")
    assert_clean_error(fetch(viewer, "/episodes/0123456789abcdef/tree"), 404, "no episode with id")
    assert_clean_error(fetch(viewer, "/group/no-such-group"), 404, "no episodes in group")
    assert_clean_error(fetch(viewer, "/runs/no-such-run"), 404, "no run")
    assert_clean_error(fetch(viewer, "/no/such/page"), 404, "no page at this address")


def test_bad_parameters_give_400_pages_that_name_them(viewer, viewer_store):
    assert_clean_error(fetch(viewer, "/episodes?min_reward=high"), 400, "min_reward=", "is not a number")
    assert_clean_error(fetch(viewer, "/episodes?status=done"), 400, "status=", "complete, truncated")
    assert_clean_error(fetch(viewer, "/episodes?sort=id"), 400, "not a sortable column")
    assert_clean_error(fetch(viewer, "/episodes?min_reward=2&max_reward=1"), 400, "swap them")
    episode = viewer_store.maze[0]
    assert_clean_error(fetch(viewer, f"/episodes/{episode.id}?view=raw"), 400, "view=")
    assert_clean_error(fetch(viewer, f"/episodes/{episode.id}/replay", {"from_turn": "99", "policy": "solver"}),
                       400, "past the episode")
    assert_clean_error(fetch(viewer, f"/episodes/{episode.id}/replay", {"from_turn": "1", "policy": "telepathy"}),
                       400, "unknown policy")


def test_episode_of_an_unregistered_env_shows_and_refuses_replay_clearly(viewer, viewer_store):
    page = fetch(viewer, f"/episodes/{viewer_store.orphan}")
    assert page.status == 200
    assert "Env not registered" in page.body and "Retired-v3" in page.body and "hello" in page.body
    reply = fetch(viewer, f"/episodes/{viewer_store.orphan}/replay", {"from_turn": "0", "policy": "random"})
    assert_clean_error(reply, 400, "cannot replay episode", "Retired-v3")
