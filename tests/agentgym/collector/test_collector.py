"""The collector: groups, exact token accounting, KV reuse through it, faults, turn control, the store."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from collector_envs import CountingEnv, FaultyEnv, say_inc

from agentgym.collector import Collector, DynamicTurns, Task
from agentgym.context_tokens import ChatFormat
from agentgym.policy.base import GenerationRequest, SamplingParams
from agentgym.policy.scripted import ScriptedBackend
from agentgym.store import TrajectoryStore
from agentgym.trajectory import EpisodeStatus, Failure


def solver(messages, env):
    """Scripted policy (labelled): the maze's built-in solver."""
    return env.unwrapped.solver_action()


async def test_groups_share_ids_and_tasks_and_reach_the_store(sqlite_url):
    store = TrajectoryStore(sqlite_url)
    collector = Collector("Maze-v0", solver, store, progress=False, run_id="r1")
    result = await collector.collect([Task("easy-1", seed=0), Task("easy-2", seed=1)], group_size=3)
    assert [len(g) for g in result.groups] == [3, 3]
    for group in result.groups:
        assert len({e.group_id for e in group}) == 1 and len({e.task_id for e in group}) == 1
        assert all(e.status == EpisodeStatus.COMPLETE and e.total_reward == 1.0 for e in group)
    assert {e.group_id for e in result.episodes} == {g[0].group_id for g in result.groups}
    assert store.count() == 6
    stored = store.get(result.episodes[0].id)
    assert stored.run_id == "r1" and stored.turns == result.episodes[0].turns



def record_requests(backend) -> list[GenerationRequest]:
    """Wrap `backend.generate` so that every request it gets is appended to the returned list."""
    seen: list[GenerationRequest] = []
    original = backend.generate

    async def generate(requests):
        seen.extend(requests)
        return await original(requests)

    backend.generate = generate
    return seen

async def test_recorded_ids_decode_to_exactly_the_conversation_the_model_saw(tokenizer):
    backend = ScriptedBackend(solver, tokenizer=tokenizer)
    seen = record_requests(backend)
    collector = Collector("Maze-v0", backend, progress=False, check_template=True)
    [episode] = (await collector.collect([Task("easy-4", seed=3)])).episodes
    assert episode.status == EpisodeStatus.COMPLETE and episode.num_turns >= 2
    ids = [i for t in episode.turns for i in (*t.prompt_ids, *t.action_ids)]
    # every request's context is exactly the recorded ids up to that turn
    mine = [r for r in seen if r.episode_id == episode.id]
    for turn, request in zip(episode.turns, mine, strict=True):
        upto = [i for t in episode.turns[:turn.index] for i in (*t.prompt_ids, *t.action_ids)] + turn.prompt_ids
        assert request.prompt_ids == upto
    # and they decode to the chat template's rendering of the conversation
    env = collector._factory()
    fmt = ChatFormat(tokenizer, env.unwrapped.tools())
    text = fmt.render(episode.to_messages(env.unwrapped.system_prompt), add_generation_prompt=False)
    assert text.startswith(fmt.decode(ids)) and text[len(fmt.decode(ids)):] == "\n"
    assert episode.metadata["template_check"]["append_only"] is True
    assert episode.metadata["train_on"] == "as_sampled"
    for turn in episode.turns:
        assert len(turn.action_logprobs) == len(turn.action_ids) == len(turn.token_versions) == len(turn.loss_mask)


async def test_hf_policy_records_exact_ids_and_prefills_each_token_once(tiny_dir):
    from agentgym.policy.hf import HFBackend

    backend = HFBackend.from_pretrained(tiny_dir)
    seen = record_requests(backend)
    collector = Collector("Maze-v0", backend, progress=False, max_turns=4,
                          sampling=SamplingParams(max_new_tokens=6, seed=1))
    result = await collector.collect([Task("easy-1", seed=0)], group_size=3)
    assert backend.cached_episodes == 0  # released at the end of every episode
    for episode in result.episodes:
        requests = [r for r in seen if r.episode_id == episode.id]
        context: list[int] = []
        for turn, request in zip(episode.turns, requests, strict=True):
            context += turn.prompt_ids
            assert request.prompt_ids == context  # the model saw exactly the recorded ids
            context += turn.action_ids
            assert turn.token_versions == [0] * len(turn.action_ids)
    # KV reuse: each context token was encoded once (the last sampled token of a turn with the next prompt)
    total = sum(len(t.prompt_ids) + len(t.action_ids) for e in result.episodes for t in e.turns)
    assert backend.stats.encoded_tokens == total - len(result.episodes)


@pytest.mark.parametrize("mode, reason", [
    ("raise", "env.step raised ConnectionError: env server gone"),
    ("garbage", "env.step returned garbage: reward must be a finite number"),
    ("short", "env.step returned garbage: expected (observation, reward, terminated, truncated, info)"),
    ("raise_reset", "env.reset raised RuntimeError: sandbox died"),
    ("hang", "env.step did not answer within 0.5 s (our timeout)"),
])
async def test_a_broken_env_fails_only_its_own_episode_as_infra(mode, reason):
    collector = Collector(lambda: FaultyEnv(goal=4), say_inc, progress=False, turn_timeout_s=0.5)
    try:
        result = await collector.collect([Task(mode, seed=0), Task("ok", seed=0)], group_size=2)
    finally:
        FaultyEnv.release.set()
    broken, fine = result.groups if result.groups[0][0].task_id == mode else result.groups[::-1]
    for episode in broken:
        assert episode.status == EpisodeStatus.ERROR and episode.failure == Failure.INFRA
        assert episode.error.startswith(reason)
    assert all(e.status == EpisodeStatus.COMPLETE and e.total_reward == 1.0 for e in fine)
    FaultyEnv.release.clear()


async def test_policy_failures_and_timeouts_are_infra_and_isolated():
    async def flaky(messages, env):
        """Scripted policy (labelled): crashes on task 'crash', hangs on task 'hang'."""
        if env.unwrapped.task == "crash" and len(messages) > 3:
            raise RuntimeError("inference server crashed")
        if env.unwrapped.task == "hang":
            await asyncio.sleep(5)
        return "inc"

    collector = Collector(lambda: CountingEnv(goal=3), flaky, progress=False, generate_timeout_s=0.3)
    result = await collector.collect([Task("crash", seed=0), Task("hang", seed=0), Task("ok", seed=0)])
    by_task = {e.task_id: e for e in result.episodes}
    assert by_task["crash"].error == "policy raised RuntimeError: inference server crashed"
    assert by_task["hang"].error == "policy.generate did not answer within 0.3 s (our timeout)"
    for task in ("crash", "hang"):
        assert by_task[task].status == EpisodeStatus.ERROR and by_task[task].failure == Failure.INFRA
    assert by_task["ok"].status == EpisodeStatus.COMPLETE


async def test_turn_limit_is_a_model_truncation_and_malformed_actions_go_on():
    collector = Collector(lambda: CountingEnv(goal=99), lambda m: "nope", progress=False, max_turns=3)
    [episode] = (await collector.collect([Task("t", seed=0)])).episodes
    assert episode.status == EpisodeStatus.TRUNCATED and episode.failure == Failure.MODEL
    assert episode.error == "turn limit of 3 reached" and episode.num_turns == 3
    assert not any(t.valid for t in episode.turns) and episode.turns[-1].truncated


async def test_episode_timeout_is_infra():
    async def slow(messages):
        await asyncio.sleep(0.2)
        return "inc"

    collector = Collector(lambda: CountingEnv(goal=50), slow, progress=False, episode_timeout_s=0.5)
    [episode] = (await collector.collect([Task("t", seed=0)])).episodes
    assert episode.status == EpisodeStatus.ERROR and episode.failure == Failure.INFRA
    assert "episode did not finish within 0.5 s" in episode.error and 1 <= episode.num_turns <= 3


async def test_dynamic_turns_extend_while_making_progress_up_to_the_cap():
    control = DynamicTurns(initial_turns=2, extension=2, cap=5)
    progressing = Collector(lambda: CountingEnv(goal=50), say_inc, progress=False, turn_control=control)
    [episode] = (await progressing.collect([Task("t", seed=0)])).episodes
    assert episode.num_turns == 5 and episode.status == EpisodeStatus.TRUNCATED
    assert episode.error == "turn limit of 5 reached" and episode.metadata["turn_budget"] == 5
    stuck = Collector(lambda: CountingEnv(goal=50), lambda m: "nope", progress=False, turn_control=control)
    [episode] = (await stuck.collect([Task("t", seed=0)])).episodes
    assert episode.num_turns == 2  # no progress, no extension


async def test_context_overflow_truncates_with_the_reason(tokenizer):
    backend = ScriptedBackend(say_inc, tokenizer=tokenizer)
    collector = Collector(lambda: CountingEnv(goal=50), backend, progress=False, max_context=60)
    [episode] = (await collector.collect([Task("t", seed=0)])).episodes
    assert episode.status == EpisodeStatus.TRUNCATED and episode.failure == Failure.MODEL
    assert episode.error.startswith("context length:") and "60-token context" in episode.error
    assert sum(len(t.prompt_ids) + len(t.action_ids) for t in episode.turns) < 60


async def test_blocking_env_steps_of_concurrent_episodes_run_in_parallel():
    import time

    state = {"now": 0, "peak": 0}
    lock = threading.Lock()

    class SlowEnv(CountingEnv):
        def step(self, action):
            with lock:
                state["now"] += 1
                state["peak"] = max(state["peak"], state["now"])
            time.sleep(0.02)
            with lock:
                state["now"] -= 1
            return super().step(action)

    collector = Collector(lambda: SlowEnv(goal=3), say_inc, progress=False, concurrency=16)
    result = await collector.collect([Task(str(i), seed=0) for i in range(32)])
    assert len(result.episodes) == 32 and all(e.total_reward == 1.0 for e in result.episodes)
    assert 1 < state["peak"] <= 16  # blocking steps overlapped, within the concurrency limit


async def test_each_episode_is_stored_as_it_ends_and_in_flight_ones_are_ended_after_a_stop(sqlite_url):
    """A stopped collector loses no finished episode of an unfinished group, and leaves its in-flight ones
    stored as in flight, which `end_in_flight` (a trainer's resume or stop) ends as infra failures."""
    gate, made = threading.Event(), []

    class GateEnv(CountingEnv):  # the second env of the group blocks in its second step until `gate` opens
        def step(self, action: str):
            if self is made[1] and self.value >= 1:
                gate.wait(30)
            return super().step(action)

    def factory():
        made.append(GateEnv(goal=2))
        return made[-1]

    store = TrajectoryStore(sqlite_url)
    collector = Collector(factory, say_inc, store, progress=False, run_id="r1")
    job = asyncio.create_task(collector.collect([Task("count", seed=0)], group_size=2))
    for _ in range(500):
        await asyncio.sleep(0.02)
        if store.count(run_id="r1", status="complete") == 1 and store.count(run_id="r1", status="partial") == 1:
            break
    [running] = store.episodes(run_id="r1", status="partial")
    assert running.metadata["in_flight"] and running.metadata["reset_observation"] == "value 0"
    job.cancel()  # the trainer stops while the group is unfinished
    await asyncio.gather(job, return_exceptions=True)
    gate.set()
    assert store.end_in_flight("r1", "in flight when the trainer stopped") == 1
    ended = store.get(running.id)
    assert (ended.status, ended.failure, ended.error) == (EpisodeStatus.ERROR, Failure.INFRA,
                                                          "in flight when the trainer stopped")
    assert "in_flight" not in ended.metadata and store.count(run_id="r1") == 2
    assert store.end_in_flight("r1", "again") == 0
    await collector.aclose()


async def test_an_env_that_comes_after_its_construction_timed_out_is_closed():
    """Making an env (a worker process starting) outlived env_start_timeout_s: the episode is an infra failure, and
    the env, when it finally comes, is closed rather than left running with nobody to close it."""
    made: list[CountingEnv] = []
    closed = threading.Event()

    class LateEnv(CountingEnv):
        def close(self):
            closed.set()

    def slow_factory():
        time.sleep(1.0)
        made.append(LateEnv())
        return made[-1]

    collector = Collector(slow_factory, say_inc, progress=False, env_start_timeout_s=0.2)
    [episode] = (await collector.collect([Task("count", seed=0)])).episodes
    assert episode.failure == Failure.INFRA and "env construction did not answer" in episode.error
    assert await asyncio.to_thread(closed.wait, 10) and len(made) == 1
    await collector.aclose()


async def test_groups_come_back_in_task_order_whatever_order_they_end_in():
    """The first task takes 8 turns, the others 1-2: they end first, but the result lists the tasks in order (a
    warm start's demonstrations, and a batch's order, must not depend on which episode finished first)."""

    class GoalFromTask(CountingEnv):
        def reset(self, *, seed=None, options=None):
            observation, info = super().reset(seed=0, options=options)
            self.goal = int(self.task.removeprefix("goal-"))
            return observation, info

    tasks = [Task(f"goal-{g}", seed=i) for i, g in enumerate((8, 1, 2, 1))]
    collector = Collector(GoalFromTask, say_inc, progress=False)
    result = await collector.collect(tasks, group_size=2)
    assert [g[0].task_id for g in result.groups] == ["goal-8", "goal-1", "goal-2", "goal-1"]
    assert [e.num_turns for e in result.episodes] == [8, 8, 1, 1, 2, 2, 1, 1]
