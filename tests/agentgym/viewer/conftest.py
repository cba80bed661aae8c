"""A real trajectory store for the viewer tests: two envs, groups, tokens, screenshots, a branch tree, metrics.

Episodes are rolled out for real (Maze-v0 at two difficulties, and ScreenCounter-v0,
a small env registered here that renders a PNG screenshot every step). Policies
are the simple text policies (random and the env's solver); the token ids are
the tiny tokenizer's encoding of the action text, and the log-probs, advantages
and loss masks are made up, deterministically, for display: they are labelled
fixture data, not a model's.
"""

from __future__ import annotations

import base64
import math
import random
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import agentgym
from agentgym import Episode, TrajectoryStore, make
from agentgym.branching import BranchPlan, branch_episode
from agentgym.policy.simple import resolve_policy
from agentgym.single_episode import run_episode
from tests.helpers.counter_env import CounterEnv


def png_bytes(width: int, height: int, fill: int, colour: tuple[int, int, int]) -> bytes:
    """A PNG image: the left `fill` columns in `colour`, the rest light grey (no imaging library)."""
    rows = b"".join(
        b"\x00" + b"".join(bytes(colour) if x < fill else b"\xe5\xe7\xeb" for x in range(width))
        for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


class ScreenCounterEnv(CounterEnv):
    """Counter-v0 with a screenshot per step: a progress bar as base64 PNG, and as a file when `shot_dir` is set."""

    def __init__(self, max_turns: int = 12, shot_dir: str | None = None):
        super().__init__(max_turns=max_turns)
        self.shot_dir = shot_dir

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        image = png_bytes(240, 36, max(0, self.value) * 48, (37, 99, 235))
        info["screenshot"] = base64.b64encode(image).decode()
        if self.shot_dir:
            path = Path(self.shot_dir) / f"frame-{self.target}-{self.turn}-{self.value}.png"
            path.write_bytes(image)
            info["frame_file"] = str(path)
        return obs, reward, terminated, truncated, info


agentgym.register("ScreenCounter-v0", ScreenCounterEnv, max_turns=12,
                  description="viewer test env: Counter-v0 with PNG screenshots")


@dataclass
class ViewerStore:
    """The store and the ids the tests look up."""

    url: str
    store: TrajectoryStore
    maze: list[Episode] = field(default_factory=list)
    counter: list[Episode] = field(default_factory=list)
    tree_root: str = ""
    branches: list[str] = field(default_factory=list)
    orphan: str = ""  #: an episode whose env is not registered
    model_dir: str = ""


def tool_call_policy(seed: int):
    """Random moves written as Maze tool calls (so actions have a few tokens each)."""
    pick = resolve_policy("random", seed=seed)

    def act(messages, env):
        move = pick(messages, env)
        return f'<tool_call>{{"name": "move", "arguments": {{"direction": "{move}"}}}}</tool_call>'

    return act


def add_tokens(episodes: list[Episode], tokenizer, seed: int) -> None:
    """Token ids of each action (the tiny tokenizer's), and labelled fixture log-probs, masks, advantages."""
    rng = random.Random(seed)
    mean = sum(e.total_reward for e in episodes) / len(episodes)
    for ep in episodes:
        for turn in ep.turns:
            ids = tokenizer.encode(turn.action_text).ids + [tokenizer.token_to_id("<|im_end|>")]
            turn.action_ids = ids
            turn.action_logprobs = [-rng.random() ** 2 * 4 for _ in ids]
            turn.token_versions = [ep.policy_version or 0] * len(ids)
            turn.loss_mask = [0 if i == len(ids) - 1 and turn.index % 2 else 1 for i in range(len(ids))]
            turn.advantage = round(ep.total_reward - mean + rng.uniform(-0.2, 0.2), 4)


def build_viewer_store(directory: Path) -> ViewerStore:
    from tokenizers import Tokenizer

    from agentgym.policy.models import tiny_model_dir

    model_dir = str(tiny_model_dir())
    tokenizer = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    url = f"sqlite:///{directory / 'viewer.db'}"
    store = TrajectoryStore(url)
    out = ViewerStore(url=url, store=store, model_dir=model_dir)

    store.log_run("maze-run", {"env_id": "Maze-v0", "env_kwargs": {"difficulty": "mixed"}, "model_dir": model_dir})
    env = make("Maze-v0", difficulty="mixed")
    for g, task in enumerate(("easy-3", "easy-7", "medium-2")):
        group = []
        for k in range(3):
            policy = resolve_policy("solver") if k == 2 else tool_call_policy(seed=10 * g + k)
            ep = run_episode(env, policy, env_id="Maze-v0", task_id=task, seed=k, max_turns=10, run_id="maze-run",
                             group_id=f"maze-run:{task}")
            ep.policy_version = g
            group.append(ep)
        add_tokens(group, tokenizer, seed=g)
        out.maze.extend(group)
    env.close()
    store.put_many(out.maze)
    for step in range(12):
        store.log_metrics("maze-run", step, {
            "reward_mean": round(1 - math.exp(-step / 4), 4), "success_rate": min(1.0, step / 10),
            "staleness_mean": 0.5 + (step % 3) / 2, "throughput_tokens_per_s": 900 + 25 * step})

    shots = directory / "shots"
    shots.mkdir()
    store.log_run("counter-run", {"env_id": "ScreenCounter-v0", "env_kwargs": {"shot_dir": str(shots)}})
    env = make("ScreenCounter-v0", shot_dir=str(shots))
    for i, task in enumerate(("target-2", "target-3", "target-2", "target-4")):
        policy = resolve_policy("solver") if i % 2 == 0 else resolve_policy("random", seed=i)
        ep = run_episode(env, policy, env_id="ScreenCounter-v0", task_id=task, seed=i, max_turns=6,
                         run_id="counter-run", group_id=f"counter-run:{task}")
        out.counter.append(ep)
    env.close()
    store.put_many(out.counter)

    root = next(e for e in out.maze if e.num_turns >= 6 and e.total_reward == 0)
    child = branch_episode(store, BranchPlan(root.id, from_turn=2, policy="solver"))
    grandchild = branch_episode(store, BranchPlan(child.id, from_turn=4, policy="random", seed=1))
    out.tree_root, out.branches = root.id, [child.id, grandchild.id]

    orphan = Episode(run_id="old-run", env_id="Retired-v3", task_id="t-1", seed=0, total_reward=0.5,
                     turns=[agentgym.Turn(index=0, observation="hello", action_text="bye", reward=0.5,
                                          terminated=True)])
    store.put(orphan)
    out.orphan = orphan.id
    return out


@pytest.fixture(scope="module")
def viewer_store(tmp_path_factory) -> ViewerStore:
    data = build_viewer_store(tmp_path_factory.mktemp("viewer"))
    yield data
    data.store.close()


@pytest.fixture(scope="module")
def viewer(viewer_store):
    """The viewer app on a free loopback port, in a background thread of this process."""
    from agentgym.viewer.server import BackgroundViewer

    with BackgroundViewer(viewer_store.store) as running:
        yield running
