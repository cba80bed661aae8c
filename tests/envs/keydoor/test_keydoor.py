"""KeyDoor-v0: layouts, solver, the late punishment of an early mistake, dead ends, recurring states."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from agentgym.envs.keydoor.generate import DIFFICULTIES, generate
from agentgym.trainer.train import train

import agentgym
from agentgym.checker import check_env_contract
from agentgym.config import load_train_config
from agentgym.credit import compute_advantages
from agentgym.policy.simple import random_policy, solver_policy
from agentgym.single_episode import run_episode
from agentgym.store import TrajectoryStore
from agentgym.testing import AgentEnvContract

ROOT = Path(__file__).resolve().parents[3]


class TestKeyDoorContract(AgentEnvContract):
    env_id = "KeyDoor-v0"


class TestKeyDoorHardGridContract(AgentEnvContract):
    env_id = "KeyDoor-v0"
    env_kwargs = {"difficulty": "hard", "view": "grid"}


@pytest.mark.parametrize("difficulty", sorted(DIFFICULTIES))
def test_solver_solves_every_sampled_task_within_its_range_and_limit(difficulty):
    env = agentgym.make("KeyDoor-v0", difficulty=difficulty)
    level = DIFFICULTIES[difficulty]
    assert env.unwrapped.max_turns == level.max_turns >= 15
    for n in range(0, 1000, 41):
        ep = run_episode(env, solver_policy, task_id=f"{difficulty}-{n}", max_turns=level.max_turns)
        assert ep.status == "complete" and ep.total_reward == 1.0
        assert level.shortest[0] <= ep.num_turns <= level.shortest[1]
        assert any(t.state_fingerprint.endswith("+key") for t in ep.turns)  # it fetched the key on the way


def goal_greedy(messages, env):
    """Head straight for the goal, ignoring the key: the early mistake of this env."""
    layout, ((r, c), _) = env.unwrapped._world, env.unwrapped._state
    gr, gc = layout.goal
    options = (["down"] if gr > r else ["up"] if gr < r else []) + (["right"] if gc > c else ["left"])
    return options[0] if options else "right"


def test_skipping_the_key_is_punished_only_at_the_end():
    env = agentgym.make("KeyDoor-v0")
    for n in range(20):
        ep = run_episode(env, goal_greedy, task_id=f"easy-{n}", max_turns=env.unwrapped.max_turns)
        assert ep.total_reward == 0.0 and ep.status == "truncated" and ep.num_turns == 24
        assert all(t.reward == 0.0 for t in ep.turns)  # no signal until the turn limit
    env.reset(options={"task_id": "easy-0"})
    layout = env.unwrapped._world
    assert not layout.passable(layout.door, has_key=False) and layout.passable(layout.door, has_key=True)


def test_harder_levels_have_dead_end_pockets_and_many_distinct_layouts():
    pockets = 0
    for n in range(40):
        layout = generate(f"hard-{n}")
        open_cells = [(r, c) for r, row in enumerate(layout.grid) for c, ch in enumerate(row) if ch == "."]
        degree = {cell: sum((cell[0] + dr, cell[1] + dc) in set(open_cells) for dr, dc in
                            ((0, 1), (1, 0), (0, -1), (-1, 0))) for cell in open_cells}
        pockets += sum(d == 1 for d in degree.values())
    assert pockets >= 20
    layouts = [generate(f"medium-{n}") for n in range(60)]
    assert len({(lay.grid, lay.start, lay.key, lay.goal) for lay in layouts}) == 60
    assert len({lay.grid for lay in layouts}) > 20
    assert generate("medium-5") == generate("medium-5")
    with pytest.raises(ValueError, match="difficulty"):
        generate("nightmare-3")


def test_states_recur_across_the_episodes_of_one_task():
    env = agentgym.make("KeyDoor-v0")
    episodes = [run_episode(env, random_policy(seed), task_id="easy-3", seed=seed, max_turns=24) for seed in range(4)]
    per_episode = [{t.state_fingerprint for t in ep.turns} for ep in episodes]
    counts = collections.Counter(fp for fps in per_episode for fp in fps)
    assert sum(n > 1 for n in counts.values()) >= 3


def test_observation_names_key_door_goal_and_open_moves():
    env = agentgym.make("KeyDoor-v0")
    obs, info = env.reset(options={"task_id": "easy-3"})
    assert obs.startswith("Start. Key: ") and "Door: " in obs and "Goal: " in obs and "Open: " in obs
    assert info["optimal_turns"] == generate("easy-3").distances()[(generate("easy-3").start, False)]
    obs, *_ = env.step("jump")
    assert obs.startswith("Error:")


def test_envs_check_passes():
    report = check_env_contract("KeyDoor-v0", lambda: agentgym.make("KeyDoor-v0", difficulty="medium"))
    assert report.passed, [(r.name, r.detail) for r in report.failures()]


def test_bad_kwargs_are_rejected():
    with pytest.raises(ValueError, match="difficulty"):
        agentgym.make("KeyDoor-v0", difficulty="insane")
    with pytest.raises(ValueError, match="view"):
        agentgym.make("KeyDoor-v0", view="3d")


def test_the_recipe_warm_starts_and_trains_with_the_envs_turn_limit(tmp_path):
    cfg = load_train_config(ROOT / "configs" / "keydoor.yaml", {
        "output_dir": str(tmp_path), "updates": 1, "groups_per_batch": 2, "group_size": 4, "sft_steps": 4,
        "sft_episodes": 2, "eval_tasks": 0, "eval_every": 0, "checkpoint_every": 0, "torch_threads": 1,
        "tensorboard": False, "plot": False, "drop_zero_variance": False, "concurrency": 8})
    result = train(cfg)
    assert result.updates == 1
    episodes = TrajectoryStore(cfg.store_url).episodes(run_id=cfg.name)
    assert episodes and max(e.num_turns for e in episodes) <= 30  # the medium level's own limit
    assert any(e.num_turns == 30 for e in episodes)  # the tiny model runs into it


@pytest.mark.parametrize("difficulty", ["easy", "hard"])
def test_optimal_moves_are_exactly_the_moves_that_shorten_the_way_to_the_goal(difficulty):
    """`optimal_moves()` is the oracle of bench/credit_quality.py: any choice of them solves the task in
    `optimal_turns` moves, and every other move leaves the distance where it was or raises it."""
    env = agentgym.make("KeyDoor-v0", difficulty=difficulty)
    inner = env.unwrapped
    for n in range(0, 200, 37):
        _, info = env.reset(options={"task_id": f"{difficulty}-{n}"})
        for turn in range(info["optimal_turns"]):
            moves = inner.optimal_moves()
            assert moves and inner.solver_action() == moves[0]
            here = inner._dist[inner._state]
            for other in set(inner.valid_actions()) - set(moves):
                assert inner._dist.get(inner._move(inner._state, other), here + 1) >= here
            _, reward, terminated, _, _ = env.step(moves[turn % len(moves)])
        assert terminated and reward == 1.0 and inner.optimal_moves() == []


def test_a_move_that_changes_nothing_is_flagged_as_blocked():
    env = agentgym.make("KeyDoor-v0")
    for n in range(50):  # a task whose start cell has a wall beside it
        obs, _ = env.reset(options={"task_id": f"easy-{n}"})
        open_moves = obs.split("Open: ")[1].rstrip(".").split(", ")
        walls = [m for m in ("up", "down", "left", "right") if m not in open_moves]
        if walls:
            break
    wall = walls[0]
    before = env.unwrapped._state
    obs, reward, terminated, truncated, info = env.step(wall)
    assert obs.startswith(f"Wall {wall}.") and env.unwrapped._state == before
    assert info["error_kind"] == "blocked_move" and wall in info["error"] and not terminated and reward == 0.0
    _, _, _, _, info = env.step(open_moves[0])
    assert "error_kind" not in info and env.unwrapped._state != before
    # heading for the goal without the key ends pressing against the locked door or a wall, every turn flagged
    after = []
    for n in range(20):
        ep = run_episode(env, goal_greedy, task_id=f"easy-{n}", max_turns=env.unwrapped.max_turns)
        assert all(t.info["error_kind"] == "blocked_move" for t in ep.turns if not t.valid)
        after += [nxt.observation for t, nxt in zip(ep.turns, ep.turns[1:], strict=False) if not t.valid]
    assert after and all(o.startswith(("Wall ", "The door ")) for o in after)
    assert any(o.startswith("The door ") and " is locked." in o for o in after)
    off = agentgym.make("KeyDoor-v0", blocked_invalid=False)
    ep = run_episode(off, goal_greedy, task_id="easy-0", max_turns=off.unwrapped.max_turns)
    assert all(t.valid for t in ep.turns)


def test_gigpo_pushes_down_blocked_moves_where_grpo_has_no_signal():
    """A group whose rollouts all fail: GRPO gives every turn 0; GiGPO's step part ranks the moves that
    did nothing below the moves taken from the same cell, in the same failed episodes."""
    env = agentgym.make("KeyDoor-v0")
    episodes = [run_episode(env, random_policy(seed), task_id="easy-0", max_turns=env.unwrapped.max_turns,
                            group_id="g") for seed in range(8)]
    assert all(ep.total_reward == 0.0 for ep in episodes)
    grpo = [a for ep in compute_advantages("grpo", episodes) for a in ep]
    assert all(a == 0.0 for a in grpo)
    turns = [t for ep in episodes for t in ep.turns]
    gigpo = [a for ep in compute_advantages("gigpo", episodes) for a in ep]
    blocked = [a for t, a in zip(turns, gigpo, strict=True) if t.info.get("error_kind") == "blocked_move"]
    moved = [a for t, a in zip(turns, gigpo, strict=True) if t.valid]
    assert blocked and moved and max(blocked) < 0.0 < sum(moved) / len(moved)
