"""The collector: many concurrent multi-turn episodes against one policy, recorded token by token.

    collector = Collector("Maze-v0", HFBackend.from_pretrained(tiny_model_dir()), TrajectoryStore("runs.db"))
    result = await collector.collect([Task("easy-3", seed=0)], group_size=8, max_turns=20, concurrency=64)

- `collect` runs every group to the end (G rollouts per task sharing a group id).
- `collect_round` is one round of partial rollouts (APRIL): it over-provisions,
  stops once `target_groups` groups have finished, aborts in-flight generation,
  keeps every unfinished episode (tokens, log-probs, per-token versions, live
  env) in `buffer`, and resumes those first next round. Nothing is thrown away.
- `branch(episode, turn, k)` forks an episode at a turn into k continuations
  (TRACE), restoring the env from a snapshot or by replaying the action prefix.

Each episode is isolated: an env that raises, hangs or returns garbage, or a
policy call that fails, ends *that* episode as `error` with a typed failure
(see `agentgym.collector.faults`) and the others go on. An env whose class
does not declare ``thread_safe = True`` runs in a worker process of its own
(`env_runtime="auto"`, see `agentgym.runtime`), reused across episodes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from agentgym import cost
from agentgym.collector import replay as replaying
from agentgym.collector.config import CollectorConfig, CollectResult, Task
from agentgym.collector.env_slots import BUSY, EnvSlots
from agentgym.collector.faults import (
    EpisodeFault,
    bounded,
    call_env,
    check_reset,
    check_step,
    describe,
    runs_inline,
)
from agentgym.collector.progress import CollectProgress, Counters
from agentgym.collector.run import EpisodeRun
from agentgym.collector.window import render_window
from agentgym.context_tokens import TRAIN_ON, ChatFormat
from agentgym.core import AgentEnv
from agentgym.errors import ConfigError
from agentgym.policy.base import Backend, BackendError, Completion, GenerationRequest
from agentgym.policy.scripted import ScriptedBackend
from agentgym.runtime.remote import RemoteEnv, is_env_url
from agentgym.trajectory import Episode, EpisodeStatus, Failure, TurnDifference, new_id

log = logging.getLogger("agentgym.collector")
_EXHAUSTED = object()
MEMBERS_KEPT = 65536  #: groups whose member count is kept, so a late retry joins with the next member index
_PROXY_GRACE_S = 10.0  #: backstop beyond a proxy env's own call limit (a remote env waits 5 s past it)


@dataclass
class Group:
    """The rollouts of one task, compared with each other; trained only once all are finished."""

    id: str
    task: Task
    runs: list[EpisodeRun]

    @property
    def done(self) -> bool:
        return all(r.finished for r in self.runs)


class Collector:
    """Drives episodes of one env against one policy; see the module docstring.

    `env` is a registered env id (made with `env_kwargs`) or a zero-argument
    factory. `policy` is a `Backend`, or a text function (wrapped in a
    `ScriptedBackend`). `store` (optional) receives every episode once its
    env has reset (status ``partial``, ``metadata["in_flight"]``), again as
    soon as it ends (each episode on its own, so a crash loses no finished
    episode of an unfinished group), and partial ones at the end of each
    round. Keyword arguments override fields of `config`.
    """

    def __init__(self, env: str | Callable[[], Any], policy: Backend | Callable[..., Any], store: Any = None, *,
                 config: CollectorConfig | None = None, tokenizer: Any = ..., env_kwargs: dict[str, Any] | None = None,
                 **overrides: Any):
        self.config = dataclasses.replace(config or CollectorConfig(), **overrides)
        self.env_id, self._factory, self._env_turns = _env_factory(env, env_kwargs or {}, self.config)
        self.policy = policy if isinstance(policy, Backend) else ScriptedBackend(policy)
        self.tokenizer = self.policy.tokenizer if tokenizer is ... else tokenizer
        self.store = store
        self.buffer: deque[Group] = deque()
        self.round = 0
        #: groups started by this collector, in order: an episode's sampling key is its task, seed, group ordinal and
        #: member index (`EpisodeRun.request`), the same in every run of one seed whatever order episodes end in
        self.groups_made = 0
        self._group_members: OrderedDict[str, tuple[int, int]] = OrderedDict()  #: group id -> (ordinal, members)
        self.counters = Counters()
        self._stop_ids = frozenset(getattr(self.policy, "stop_ids", ()) or (
            [self.tokenizer.eos_token_id] if self.tokenizer is not None else []))
        self._snapshots: dict[str, dict[int, Any]] = {}
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=self.config.concurrency + 4,
                                                               thread_name_prefix="agentgym-env")
        self._envs = EnvSlots(self.env_id, self._factory, self._executor, self.config.env_start_timeout_s,
                              lambda: self.counters.turns, close_threads=self.config.concurrency)
        self._stopping = False
        self._template_warned = False
        self._bar = CollectProgress(self.counters, 0, "", enabled=False)

    # ---- public API --------------------------------------------------------------
    async def collect(self, tasks: Iterable[Task | str | None], *, group_size: int = 1, max_turns: int | None = None,
                      concurrency: int | None = None, group_id: str | None = None) -> CollectResult:
        """Roll out `group_size` episodes of every task to the end (into `group_id`: one task only, e.g. a retry
        or extra rollouts completing an existing group)."""
        self._override(max_turns, concurrency)
        tasks = list(tasks)
        if group_id is not None and len(tasks) != 1:
            raise ConfigError(f"group_id joins the rollouts of one task to an existing group; got {len(tasks)} tasks")
        groups = [self._new_group(_as_task(t), group_size, group_id) for t in tasks]
        return await self._run(groups, target=None)

    async def collect_round(self, tasks: Iterator[Task | str | None], *, target_groups: int, group_size: int = 1,
                            over_provision: float = 2.0) -> CollectResult:
        """One partial-rollout round: resume buffered groups, top up from `tasks`, stop at `target_groups` done."""
        if target_groups < 1 or over_provision < 1:
            raise ConfigError(f"need target_groups >= 1 and over_provision >= 1, got {target_groups}, {over_provision}")
        if not isinstance(tasks, Iterator):
            raise ConfigError(f"tasks must be an iterator (e.g. iter(task_list)), got {type(tasks).__name__}, so that "
                              "each round continues where the last one stopped")
        self.round += 1
        groups = [self.buffer.popleft() for _ in range(len(self.buffer))]
        for group in groups:
            self._resume(group)
        want = min(math.ceil(target_groups * over_provision), self.config.max_buffered_groups)
        while len(groups) < want and (task := next(tasks, _EXHAUSTED)) is not _EXHAUSTED:
            groups.append(self._new_group(_as_task(task), group_size))
        return await self._run(groups, target=target_groups)

    async def branch(self, episode: Episode, turn: int, k: int) -> list[Episode]:
        """Fork `episode` at `turn` into `k` continuations; each shares turns ``0..turn-1`` exactly.

        The env state before turn `turn` comes from a snapshot recorded during
        the parent's rollout (`record_snapshots=True`) or from replaying the
        parent's actions from the same seed and task. Children keep the
        parent's group id and record `parent_id` and `branch_turn`.
        """
        if not 0 <= turn < len(episode.turns):
            raise ConfigError(f"branch turn must be in [0, {len(episode.turns)}) for episode {episode.id} "
                              f"with {len(episode.turns)} turns, got {turn}")
        if k < 1:
            raise ConfigError(f"k must be >= 1 continuation, got {k}")
        children = []
        for member in range(k):
            env = await self._acquire_env()
            snapshot = self._snapshots.get(episode.id, {}).get(turn)
            observation = await replaying.restore(env, episode, turn, snapshot, self._env_call)
            parent = self._attach(EpisodeRun(episode, stop_ids=self._stop_ids), env)
            child = parent.fork(turn, Episode(
                run_id=episode.run_id, env_id=episode.env_id, task_id=episode.task_id, seed=episode.seed,
                group_id=episode.group_id, parent_id=episode.id, branch_turn=turn, policy_version=self.policy.version,
                metadata={"source": "branch", "start_round": self.round,
                          "sample_key": f"{episode.metadata.get('sample_key') or episode.id}|branch {turn}|{member}",
                          "branch_depth": int(episode.metadata.get("branch_depth", 0)) + 1}))
            child.env, child.observation = env, observation
            child.budget = max(self.config.turns(self._env_turns).initial(), turn + 1)
            children.append(child)
        group = Group(episode.group_id, Task(episode.task_id, episode.seed), children)
        result = await self._run([group], target=None)
        return result.episodes

    async def replay(self, episode: Episode) -> TurnDifference | None:
        """Re-execute `episode`'s recorded actions on a fresh env; the first turn that differs, or None.

        The same engine as `branch` (`agentgym.collector.replay`), run over every turn.
        """
        env = await self._acquire_env()
        try:
            await replaying.replay_turns(env, episode, episode.num_turns, self._env_call)
        except replaying.BranchError as exc:
            return exc.difference or TurnDifference(0, "error", "a replay", str(exc))
        finally:
            await self._envs.close(env)
        return None

    def forget(self, episode_id: str) -> None:
        """Drop the snapshots kept for `episode_id`."""
        self._snapshots.pop(episode_id, None)

    async def aclose(self) -> None:
        """Close idle envs and the worker threads (buffered partial episodes keep their envs)."""
        await self._envs.aclose()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # ---- rounds ------------------------------------------------------------------------
    def _override(self, max_turns: int | None, concurrency: int | None) -> None:
        changes = {k: v for k, v in (("max_turns", max_turns), ("concurrency", concurrency)) if v is not None}
        if changes:
            self.config = dataclasses.replace(self.config, **changes)

    def _new_group(self, task: Task, size: int, group_id: str | None = None) -> Group:
        if size < 1:
            raise ConfigError(f"group_size must be >= 1, got {size}")
        ordinal, first = self._members_of(group_id, size)
        group_id = group_id or new_id()
        self._group_members[group_id] = (ordinal, first + size)
        self._group_members.move_to_end(group_id)
        while len(self._group_members) > MEMBERS_KEPT:
            self._group_members.popitem(last=False)
        runs = [EpisodeRun(Episode(run_id=self.config.run_id, env_id=self.env_id, task_id=task.task_id or "",
                                   seed=task.seed, group_id=group_id, policy_version=self.policy.version,
                                   metadata={"source": "online", "start_round": self.round, "rounds": [self.round],
                                             "sample_key": f"{task.task_id}|{task.seed}|{ordinal}|{member}"}),
                           stop_ids=self._stop_ids)
                for member in range(first, first + size)]
        return Group(group_id, task, runs)

    def _members_of(self, group_id: str | None, size: int) -> tuple[int, int]:
        """(group ordinal, first member index) of `size` new episodes: a new group takes the next ordinal, episodes
        joining a group this collector started (a retry, TRACE's extra roots) the next member indexes."""
        if group_id is not None and group_id in self._group_members:
            return self._group_members[group_id]
        ordinal, self.groups_made = self.groups_made, self.groups_made + 1
        return ordinal, 0

    def _resume(self, group: Group) -> None:
        for run in group.runs:
            if not run.finished:
                run.episode.metadata.setdefault("rounds", []).append(self.round)
                if self.config.mask_stale_tokens:
                    run.mask_earlier_tokens()

    async def _run(self, groups: list[Group], target: int | None) -> CollectResult:
        started, before = time.perf_counter(), dataclasses.replace(self.counters)
        self._stopping = False
        slots = asyncio.Semaphore(self.config.concurrency)
        finished: dict[int, list[Episode]] = {}  # by the group's place in `groups`: results in task order
        total = sum(len(g.runs) for g in groups)

        async def run_group(place: int, group: Group) -> None:
            await asyncio.gather(*(self._drive(run, slots) for run in group.runs if not run.finished))
            if group.done:  # each episode was stored as it ended (`_drive`)
                finished[place] = [r.episode for r in group.runs]
                if target is not None and len(finished) >= target and not self._stopping:
                    self._stopping = True
                    self.policy.abort(None)

        with CollectProgress(self.counters, total, f"{self.env_id} / {self.policy.name}",
                             self.config.progress) as bar:
            self._bar = bar
            await asyncio.gather(*(run_group(place, g) for place, g in enumerate(groups)))
        unfinished = [g for g in groups if not g.done]
        for group in unfinished:
            for run in group.runs:
                if not run.finished:
                    run.pause()
            self.buffer.append(group)
        await self._save([r.episode for g in unfinished for r in g.runs if not r.finished])  # finished: saved
        return CollectResult(groups=[finished[place] for place in sorted(finished)],
                             partial=sum(not r.finished for g in unfinished for r in g.runs),
                             round=self.round, seconds=time.perf_counter() - started,
                             turns=self.counters.turns - before.turns, tokens=self.counters.tokens - before.tokens)

    async def _save(self, episodes: list[Episode]) -> None:
        if self.store is not None and episodes:
            await asyncio.to_thread(self.store.put_many, episodes)

    # ---- one episode ------------------------------------------------------------------
    async def _drive(self, run: EpisodeRun, slots: asyncio.Semaphore) -> None:
        """Run one episode until it ends or the round stops; faults end only this episode."""
        async with slots:
            if self._stopping:
                return
            try:
                async with asyncio.timeout(self.config.episode_timeout_s):
                    await self._episode(run)
            except TimeoutError:
                run.end(EpisodeStatus.ERROR, f"episode did not finish within {self.config.episode_timeout_s:g} s "
                        "(our timeout)", Failure.INFRA)
            except EpisodeFault as fault:
                if fault.infra_kind is not None and run.episode.turns:  # the env's backend broke on this turn
                    run.episode.turns[-1].info.update(infra_error=fault.reason, infra_kind=fault.infra_kind)
                run.end(fault.status, fault.reason, fault.failure)
            except Exception as exc:  # a bug in a hook or the collector: still only this episode
                log.exception("episode %s failed unexpectedly", run.id)
                run.end(EpisodeStatus.ERROR, f"collector error: {describe(exc)}", Failure.INFRA)
            if run.finished:
                self._finish(run)
                await self._save([run.episode])

    async def _episode(self, run: EpisodeRun) -> None:
        """The episode loop: observe, generate, step, until the episode ends or the round stops."""
        if not run.started:
            await self._start(run)
        while not run.finished and not self._stopping:
            # -- open the next turn (unless an aborted generation is being continued)
            if run.open_turn is None and not await self._open_turn(run):
                return
            # -- generate
            request = run.request(self._sampling(run), run.fmt.tools if run.fmt else None)
            began = time.perf_counter()
            completion = await self._generate(request)
            turn = run.act(completion, time.perf_counter() - began)
            self.counters.tokens += len(completion.token_ids)
            if run.open_turn is not None:
                return  # aborted: the round is stopping; resumed next round
            # -- step the env
            began = time.perf_counter()
            result = await self._env_call("env.step", run.env, "step", turn.action_text)
            observation, reward, terminated, truncated, info = check_step(result)
            run.answer(observation, reward, terminated, truncated, info, time.perf_counter() - began)
            self.counters.turns += 1

    async def _start(self, run: EpisodeRun) -> None:
        began = time.perf_counter()
        ep = run.episode
        options = {"task_id": ep.task_id} if ep.task_id else None
        busy_since = None
        while True:  # an env whose server answers 'busy' at the first reset: nothing began, so wait for a session
            run.env_starts += not self._envs.idle
            env = await self._acquire_env()
            self._attach(run, env)
            run.usage_start = cost.env_usage(env)
            try:
                observation, info = check_reset(await self._env_call("env.reset", env, "reset", seed=ep.seed,
                                                                     options=options))
                break
            except EpisodeFault as fault:
                if fault.infra_kind != BUSY:
                    raise
                run.env = None
                self._envs.drop(env)
                busy_since = await self._envs.wait_after_busy(busy_since, fault.reason)
        run.setup_s += time.perf_counter() - began
        ep.task_id = str(info.get("task_id", ep.task_id))
        run.begin(observation, self.config.turns(self._env_turns).initial())
        if self.store is not None:  # in the store from its start: a crash leaves it `partial`, to be ended on resume
            await self._save([dataclasses.replace(ep, status=EpisodeStatus.PARTIAL, turns=[], metadata={
                **ep.metadata, "in_flight": True, "reset_observation": observation})])

    def _attach(self, run: EpisodeRun, env: Any) -> EpisodeRun:
        inner = getattr(env, "unwrapped", env)
        run.env = env
        run.system_prompt = getattr(inner, "system_prompt", "") or ""
        if self.tokenizer is not None:
            tools = inner.tools() if isinstance(inner, AgentEnv) else None
            run.fmt = ChatFormat(self.tokenizer, tools)
        return run

    async def _open_turn(self, run: EpisodeRun) -> bool:
        """Check the turn budget and the context length, then open a turn; False when the episode ended."""
        if len(run.episode.turns) >= run.budget and not self._extend(run):
            run.end(EpisodeStatus.TRUNCATED, f"turn limit of {run.budget} reached", Failure.MODEL)
            return False
        budget = self.config.episode_token_budget
        if budget is not None and run.episode.num_action_tokens >= budget:
            run.end(EpisodeStatus.TRUNCATED, f"episode token budget: {run.episode.num_action_tokens} of {budget} "
                    "sampled tokens used", Failure.MODEL)
            return False
        prompt = self._windowed(run, run.prompt_delta())
        limit = self.config.max_context or self.policy.max_context
        if prompt is not None and limit is not None and len(run.context) + len(prompt) >= limit:
            run.end(EpisodeStatus.TRUNCATED, f"context length: {len(run.context) + len(prompt)} tokens would leave "
                    f"no room to answer within the {limit}-token context", Failure.MODEL)
            return False
        if self.config.record_snapshots and _inner(run.env).supports_snapshot:
            token = await self._env_call("env.snapshot", run.env, "snapshot")
            self._snapshots.setdefault(run.id, {})[len(run.episode.turns)] = token
        run.observe(prompt, _fingerprint(run.env))
        return True

    def _windowed(self, run: EpisodeRun, prompt: list[int] | None) -> list[int] | None:
        """`prompt`, or the whole windowed prompt when the context window says the history must be cut."""
        window = self.config.context_window
        if prompt is None or window is None or not window.active or not run.episode.turns:
            return prompt
        if not window.needed(run.context_turns, len(run.context) + len(prompt)):
            return prompt
        assert run.fmt is not None
        cut = render_window(run.fmt, run.system_prompt, run.episode.turns, run.observation, window,
                            len(run.context) + len(prompt))
        self.counters.windowed += 1
        return run.rewindow(cut)

    def _extend(self, run: EpisodeRun) -> bool:
        if run.episode.turns:
            run.episode.turns[-1].info["next_state_fingerprint"] = _fingerprint(run.env)
        extra = self.config.turns(self._env_turns).extend(run.episode, run.budget)
        run.budget += extra
        if extra:
            run.episode.metadata["turn_budget"] = run.budget
        return extra > 0

    def _sampling(self, run: EpisodeRun) -> Any:
        sampling = self.config.sampling
        budget = self.config.episode_token_budget
        if budget is not None:
            left = max(1, budget - run.episode.num_action_tokens)
            sampling = sampling.replace(max_new_tokens=min(sampling.max_new_tokens, left))
        limit = self.config.max_context or self.policy.max_context
        if run.fmt is not None and limit is not None:
            sampling = sampling.replace(max_new_tokens=max(1, min(sampling.max_new_tokens, limit - len(run.context))))
        return sampling

    async def _generate(self, request: GenerationRequest) -> Completion:
        try:
            [completion] = await bounded("policy.generate", self.policy.generate([request]),
                                         self.config.generate_timeout_s)
        except EpisodeFault:
            self.policy.abort([request.episode_id])
            raise
        except BackendError as exc:
            raise EpisodeFault(f"policy failed: {exc}") from exc
        except Exception as exc:
            raise EpisodeFault(f"policy raised {describe(exc)}") from exc
        return completion

    async def _env_call(self, what: str, env: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        native = None
        if method in ("step", "reset") and runs_inline(env, "a" + method):
            native = lambda: getattr(env, "a" + method)(*args, **kwargs)  # noqa: E731
        timeout = self.config.turn_timeout_s
        if timeout is not None and getattr(env, "call_timeout_s", None) is not None:
            timeout += _PROXY_GRACE_S  # the proxy enforces the limit itself (and kills a hung worker)
        return await call_env(what, env, lambda: getattr(env, method)(*args, **kwargs), native,
                              self._executor, timeout)

    def _finish(self, run: EpisodeRun) -> None:
        """Book-keeping when an episode ends: release caches, recycle or drop the env, check tokens."""
        ep = run.episode
        self.policy.release(run.id)
        ep.metadata["finish_round"] = self.round
        usage_end = cost.env_usage(run.env) if run.usage_start is not None else None
        ep.metadata["cost"] = cost.measure(ep, ended=time.time(), setup_s=run.setup_s, env_starts=run.env_starts,
                                           usage_start=run.usage_start, usage_end=usage_end).to_dict()
        if run.fmt is not None:
            ep.metadata["train_on"] = TRAIN_ON
            if self.config.check_template:
                self._record_template_check(run)
        env, run.env = run.env, None
        if env is not None:
            if ep.status == EpisodeStatus.ERROR or ep.failure == Failure.INFRA:
                self._envs.drop(env)
            else:
                self._envs.keep(env)
        self.counters.episodes += 1
        self.counters.errors += ep.status == EpisodeStatus.ERROR
        self._bar.advance()

    def _record_template_check(self, run: EpisodeRun) -> None:
        check = run.check_template()
        run.episode.metadata["template_check"] = check
        if check and not check["append_only"] and not self._template_warned:
            self._template_warned = True
            log.warning("chat template is not append-only (first differing turn %s, %s%s); training on the ids as "
                        "sampled", check["first_diff_turn"], check["kind"],
                        f", explained by {check['explained_by']}" if check["explained_by"] else "")

    async def _acquire_env(self) -> Any:
        env = await self._envs.acquire()
        if self._env_turns is None:
            self._env_turns = getattr(_inner(env), "max_turns", None)
        return env


def _env_factory(env: str | Callable[[], Any], kwargs: dict[str, Any],
                 config: CollectorConfig) -> tuple[str, Callable[[], Any], int | None]:
    """(stored env id, zero-argument env factory, the registered turn limit) for `env` under `config.env_runtime`."""
    if isinstance(env, str) and is_env_url(env):
        return env, functools.partial(RemoteEnv, env, call_timeout_s=config.turn_timeout_s,
                                      open_timeout_s=config.env_start_timeout_s), None
    if isinstance(env, str):
        from agentgym.registration import make, registry
        from agentgym.runtime.placement import isolated_factory

        spec = registry[env]
        env_id = env if ":" in env else spec.id  # "module:Name-v0" is stored as given, so replay imports it again
        factory = isolated_factory(spec, kwargs, config.env_runtime, config.turn_timeout_s, config.env_start_timeout_s)
        return env_id, factory or (lambda: make(spec.id, **kwargs)), spec.max_turns
    if callable(env):
        env_id = getattr(env, "env_id", getattr(env, "__name__", type(env).__name__))
        if config.env_runtime == "process":
            from agentgym.runtime.placement import process_factory

            return env_id, process_factory(env, env_id, config.turn_timeout_s, config.env_start_timeout_s), None
        return env_id, env, None
    raise ConfigError(f"env must be a registered env id or a zero-argument factory, got {type(env).__name__}")


def _as_task(task: Task | str | None) -> Task:
    return task if isinstance(task, Task) else Task(task_id=task)


def _inner(env: Any) -> Any:
    return getattr(env, "unwrapped", env)


def _fingerprint(env: Any) -> str:
    inner = _inner(env)
    return inner.state_fingerprint() if isinstance(inner, AgentEnv) else ""
