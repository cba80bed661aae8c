"""Browser-v0 task sites: the contract, every scripted solver to full reward, a random policy scoring low."""

from __future__ import annotations

import asyncio
import random

import pytest
from agentgym.envs.browser.env import BrowserEnv

import agentgym
from agentgym.testing import AgentEnvContract

SITES = ("shop", "forms", "mail")


class TestBrowserSitesContract(AgentEnvContract):
    env_id = "Browser-v0"
    env_kwargs = {"sites": list(SITES)}


async def solve(env: BrowserEnv, task_id: str) -> tuple[str, float, bool]:
    await env.areset(seed=0, options={"task_id": task_id})
    for _ in range(env.max_turns):
        _, reward, terminated, truncated, info = await env.astep(env.solver_action())
        if terminated or truncated:
            return task_id, float(reward), bool(info.get("success"))
    return task_id, 0.0, False


async def solve_all(task_ids: list[str], workers: int) -> list[tuple[str, float, bool]]:
    envs = [BrowserEnv(sites=SITES) for _ in range(workers)]
    queue = list(task_ids)
    results: list[tuple[str, float, bool]] = []

    async def worker(env: BrowserEnv) -> None:
        while queue:
            results.append(await solve(env, queue.pop()))

    try:
        await asyncio.gather(*(worker(env) for env in envs))
    finally:
        for env in envs:
            env.close()
    return results


def check_solvers(task_ids: list[str]) -> None:
    results = asyncio.run(solve_all(task_ids, workers=3))  # three episodes in flight: batched, not serial
    failed = [(t, r) for t, r, ok in results if r != 1.0 or not ok]
    assert len(results) == len(task_ids) and not failed, failed[:10]


def test_solvers_score_full_reward_on_a_sample_of_every_site_and_level():
    """One task of each site and level, each from another place in its list (make test-exhaustive solves all)."""
    task_ids = BrowserEnv(sites=SITES).task_ids()
    assert len(task_ids) >= 200
    by_kind: dict[tuple[str, ...], list[str]] = {}
    for task_id in task_ids:
        by_kind.setdefault(tuple(task_id.split("/")[:2]), []).append(task_id)
    assert set(by_kind) == {(s, d) for s in SITES for d in ("easy", "medium", "hard")}
    check_solvers([tasks[(7 * i) % len(tasks)] for i, tasks in enumerate(by_kind.values())])


@pytest.mark.exhaustive
def test_every_solver_scores_full_reward_on_every_task():
    check_solvers(BrowserEnv(sites=SITES).task_ids())


def test_a_random_policy_scores_low():
    env = agentgym.make("Browser-v0", sites=list(SITES), max_turns=12)
    rng, rewards = random.Random(0), []
    for episode, task_id in enumerate(env.unwrapped.task_ids()[::36]):
        env.reset(seed=episode, options={"task_id": task_id})
        reward, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(rng.choice(env.unwrapped.valid_actions()))
            done = terminated or truncated
        rewards.append(float(reward))
    env.close()
    assert sum(rewards) / len(rewards) < 0.3, rewards


def test_wrong_item_earns_partial_credit_from_the_shops_state():
    from agentgym.envs.browser.sites.base import Request
    from agentgym.envs.browser.sites.shop import CATALOGUE, SIZES, ShopSite

    task = next(t for t in ShopSite.tasks() if t.id == "shop/medium/000")
    site = ShopSite(task)
    goal = task.goal
    product = next(p for p in CATALOGUE if (p.category, p.color, p.material) ==
                   (goal["category"], goal["color"], goal["material"]))
    wrong_size = next(s for s in SIZES[product.category] if s != goal["size"])
    site.handle(Request("POST", "/cart/add", form={"product": str(product.id), "size": wrong_size, "quantity": "1"}))
    assert not site.outcome(None).done
    site.handle(Request("POST", "/checkout", form={"name": "A", "city": "B", "shipping": "Standard"}))
    outcome = site.outcome(None)
    assert outcome.done and not outcome.success and outcome.reward == 0.8  # 4 of 5 requirements met
