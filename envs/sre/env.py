"""SRE-v0: a small running system with injected faults; diagnose and repair it with tools.

Each episode leases a root container of the `sre` image (nginx -> a Python
stdlib app -> Redis and SQLite, a periodic worker, a tiny supervisor; see
docker/sre/ and docs/envs/sre.md), starts the task's system with its faults
injected, and shows the failing health checks. The model calls tools in any
format `agentgym.toolcalls` reads, up to `max_calls_per_turn` per turn:
observers (`status`, `logs`, `ps`, `cat`, `ls`, `curl`, `metrics`, `query`)
and mutating actions (`restart`, `edit_config`, `run` as root) behind the
task's `Policy`, plus `diagnose(kind, component)` and `submit()`.

Reward at the end (submit or the turn limit): ``(1 - diagnosis_weight)`` if
the system's own health checks all pass (re-checked up to twice, a second
apart, so a service restarted in the last turn can settle), plus ``diagnosis_weight`` times the
share of injected faults named correctly by `diagnose`, minus
``penalty`` for each refused (forbidden, over budget or destructive) call.
Every mutating call, executed or refused, is in the turn's
``info["mutations"]``. The state fingerprint is the health of each check plus
the set of executed mutations, never log text or times.

A container that dies under an observer, a restart or the env's own calls is
an infrastructure failure (`EnvInfraError`: the episode ends as truncated with
``failure="infra"``). One that dies under the model's own `run` command was
destroyed by the model: the episode terminates with health 0.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

from agentgym.envs.sre import tools
from agentgym.envs.sre.faults import COMPONENTS, KINDS, injection
from agentgym.envs.sre.herrings import HERRINGS
from agentgym.envs.sre.policy import MUTATORS, OBSERVERS
from agentgym.envs.sre.system import LIMITS, Health, System, SystemDied, image_tag, shared_pool
from agentgym.envs.sre.tasks import DIFFICULTIES, SreTask, shipped_tasks
from agentgym.envs.task_state import EpisodeState, TaskListEnv, next_turn

from agentgym.errors import ConfigError, EnvInfraError, MalformedActionError
from agentgym.toolcalls import ToolCall, error_observation, parse_tool_calls

FINAL_CHECK_RETRIES = 2
FINAL_CHECK_WAIT_S = 1.0
#: readings of the started system's health at reset until two in a row agree (a check that timed out on a loaded
#: machine, or a heartbeat not yet written, would make the same seed's reset report another health)
RESET_CHECK_READINGS, RESET_CHECK_WAIT_S = 4, 0.2
_SURROGATE = re.compile("[\ud800-\udfff]")
SYSTEM_PROMPT = (
    "You are the on-call site reliability engineer for a small web shop. Investigate with the observer tools, "
    "repair the system with the fewest changes (restart, edit_config, run), optionally name the root cause "
    "with diagnose(kind, component), then call submit(). Call tools as "
    '<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>; each result comes back in a '
    "<tool_response> block. Destructive commands and calls the task's policy forbids are refused and penalised."
)
ARCHITECTURE = (
    "System: nginx on 127.0.0.1:8080 proxies to shop-api (Python, 127.0.0.1:8000, code in /srv/app/current) "
    "backed by Redis (127.0.0.1:6379) and SQLite (/srv/data/app.db); a worker rolls orders up into Redis every "
    "second (heartbeat /srv/run/worker.heartbeat). A supervisor runs them all (`svc status`, `svc restart NAME`); "
    "releases are managed by /opt/sre/bin/deploy. Configs are in /srv/etc, logs in /srv/log."
)


@dataclass(frozen=True)
class SreEpisodeState(EpisodeState):
    """What changes during an episode (the system itself lives in the container)."""

    used: tuple[tuple[str, int], ...] = ()
    executed: tuple[str, ...] = ()
    """Canonical JSON of every executed call (the solver's progress reads it)."""
    mutations: tuple[str, ...] = ()
    """Canonical JSON of every executed mutating call (the fingerprint's 'what changed')."""
    diagnoses: tuple[tuple[str, str], ...] = ()
    refused: int = 0
    health: tuple[tuple[str, bool], ...] = ()
    destroyed: str = ""


@dataclass
class TurnLog:
    """What one turn did, for its info."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    mutations: list[dict[str, Any]] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)
    submitted: bool = False


def _canonical(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"name": name, "arguments": arguments}, sort_keys=True, ensure_ascii=False)


def _response(name: str, text: str) -> str:
    return "<tool_response>\n" + json.dumps({"name": name, "content": text}, ensure_ascii=False) + "\n</tool_response>"


class SreEnv(TaskListEnv):
    """Diagnose and repair a broken system in its own container; see the module docstring."""

    #: instances share nothing unguarded: the collector may step them in threads of one process
    thread_safe = True

    system_prompt = SYSTEM_PROMPT
    deterministic = False  # a live system: process ids, timings and logs differ between runs

    def __init__(self, difficulties: tuple[str, ...] | list[str] = DIFFICULTIES, max_turns: int = 20,
                 max_calls_per_turn: int = 4, max_output_chars: int = 3000, max_action_chars: int = 20_000,
                 diagnosis_weight: float = 0.2, penalty: float = 0.1, max_systems: int = 64,
                 run_timeout_s: float = 20.0, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        unknown = sorted(set(difficulties) - set(DIFFICULTIES))
        if unknown or not difficulties:
            raise ConfigError(f"unknown SRE-v0 difficulties {unknown or list(difficulties)}; choose from "
                              f"{list(DIFFICULTIES)}")
        if min(max_turns, max_calls_per_turn, max_output_chars, max_action_chars, max_systems) < 1:
            raise ConfigError("max_turns, max_calls_per_turn, max_output_chars, max_action_chars and max_systems "
                              "must be >= 1")
        if not 0 < run_timeout_s <= 300:
            raise ConfigError(f"run_timeout_s={run_timeout_s} must be in (0, 300] seconds")
        if not 0.0 <= diagnosis_weight <= 1.0 or penalty < 0:
            raise ConfigError(f"diagnosis_weight={diagnosis_weight} must be in [0, 1] and penalty={penalty} >= 0")
        self.tasks = [t for t in shipped_tasks() if t.difficulty in difficulties]
        self._index_tasks(self.tasks)
        self.max_turns, self.max_calls_per_turn = max_turns, max_calls_per_turn
        self.max_output_chars, self.max_action_chars = max_output_chars, max_action_chars
        self.diagnosis_weight, self.penalty, self.max_systems = diagnosis_weight, penalty, max_systems
        self.run_timeout_s = run_timeout_s
        self._system: System | None = None
        self._state = SreEpisodeState()

    # ---- tasks -----------------------------------------------------------
    @property
    def task(self) -> SreTask:
        return super().task

    def tools(self) -> list[dict[str, Any]]:
        return list(tools.SCHEMAS)

    # ---- gymnasium API ---------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task = self._by_id[self.choose_task(options, self._task_ids)]
        self._release()
        pool = shared_pool(image_tag(), LIMITS, self.max_systems)
        inject = injection(task.faults)
        herring = HERRINGS.get(task.herring, "")
        self._system = System.start(pool, pre="\n".join(x for x in (task.setup, inject.pre) if x),
                                    post="\n".join(x for x in (herring, inject.post) if x))
        health = self._stable_health()
        observation = self._briefing(task, health)
        self._state = SreEpisodeState(task_id=task.id, observation=observation, health=tuple(health.vector.items()))
        return observation, {"task_id": task.id, "difficulty": task.difficulty, "health": health.vector,
                             "faults": [f.label for f in task.faults], "herring": task.herring}

    def step(self, action: str):
        self._state, info = next_turn(self._state)
        try:
            calls = self._parse(action, info)
        except MalformedActionError as exc:
            info.update(error_kind=exc.kind, error=str(exc))
            return self._finish_turn(error_observation(exc), info, TurnLog())
        log = TurnLog()
        for call in calls:
            self._one_call(call, log, info)
            if log.submitted or self._state.destroyed:
                break
        return self._finish_turn("\n".join(log.blocks), info, log)

    # ---- one call --------------------------------------------------------
    def _parse(self, action: str, info: dict[str, Any]) -> list[ToolCall]:
        if len(action) > self.max_action_chars:
            raise MalformedActionError(f"the reply is {len(action):,} characters; the limit is "
                                       f"{self.max_action_chars:,}", kind="action_too_long",
                                       hint="send short tool calls")
        action, replaced = _SURROGATE.subn("\ufffd", action)
        if replaced:
            info["replaced_surrogates"] = replaced
        calls = parse_tool_calls(action)
        if not calls:
            raise MalformedActionError("no tool call found", hint='call a tool as <tool_call>{"name": "status", '
                                       '"arguments": {}}</tool_call>; finish with submit')
        if len(calls) > self.max_calls_per_turn:
            raise MalformedActionError(f"{len(calls)} tool calls in one reply; the limit is "
                                       f"{self.max_calls_per_turn}", hint="send fewer calls per turn")
        for call in calls:
            tools.validate(call.name, call.arguments)
        return calls

    def _one_call(self, call: ToolCall, log: TurnLog, info: dict[str, Any]) -> None:
        name, arguments = call.name, json.loads(json.dumps(call.arguments, ensure_ascii=False).replace("\\u0000", ""))
        record: dict[str, Any] = {"name": name, "arguments": arguments}
        used = dict(self._state.used)
        refusal = self.task.policy.check(name, arguments, used)
        if refusal is not None:
            record.update(status="refused", reason=refusal)
            self._state = replace(self._state, refused=self._state.refused + 1)
            log.mutations.append(record)
            log.calls.append(record)
            log.blocks.append(_response(name, f"REFUSED: {refusal}. (-{self.penalty:g} reward)"))
            return
        if name == "submit":
            log.submitted = True
            record["status"] = "executed"
            log.calls.append(record)
            return
        text = self._diagnose(arguments) if name == "diagnose" else self._execute(name, arguments, record)
        if name in MUTATORS:
            used[name] = used.get(name, 0) + 1
            log.mutations.append(record)
            self._state = replace(self._state, used=tuple(sorted(used.items())),
                                  mutations=self._state.mutations + (_canonical(name, arguments),))
        if record.get("status") != "error":
            self._state = replace(self._state, executed=self._state.executed + (_canonical(name, arguments),))
        log.calls.append(record)
        log.blocks.append(_response(name, self._cap(text)))

    def _execute(self, name: str, arguments: dict[str, Any], record: dict[str, Any]) -> str:
        try:
            output = tools.execute(self._system_or_fail(), name, arguments, self.run_timeout_s)
        except MalformedActionError as exc:
            record.update(status="error", error=str(exc))
            return f"Error: {exc}" + (f" Hint: {exc.hint}" if exc.hint else "")
        except SystemDied as exc:
            if name != "run":
                raise EnvInfraError(f"the SRE-v0 system container died during {name}: {exc}",
                                    kind="container_died") from exc
            record.update(status="executed", destroyed=True)
            self._state = replace(self._state, destroyed=f"the system container died during your command: {exc}")
            return "The system stopped answering: your command took the whole system down."
        record.update(status="executed", exit_code=output.exit_code, output=output.text[:300])
        return output.text

    def _diagnose(self, arguments: dict[str, Any]) -> str:
        if len(self._state.diagnoses) >= len(self.task.faults):
            return (f"You already gave {len(self._state.diagnoses)} diagnosis(es), one per fault; "
                    "this one is not counted.")
        answer = (str(arguments["kind"]), str(arguments["component"]))
        self._state = replace(self._state, diagnoses=self._state.diagnoses + (answer,))
        return f"Recorded diagnosis: {answer[0]} in {answer[1]}."

    # ---- turn end and reward --------------------------------------------
    def _finish_turn(self, observation: str, info: dict[str, Any], log: TurnLog):
        info["tool_calls"], info["mutations"] = log.calls, log.mutations
        info["refused_total"] = self._state.refused
        if any(m.get("status") == "executed" for m in log.mutations) and not self._state.destroyed:
            self._state = replace(self._state, health=tuple(self._health().vector.items()))
        terminated = log.submitted or bool(self._state.destroyed)
        truncated = not terminated and self._state.turn >= self.max_turns
        reward = 0.0
        if terminated or truncated:
            reward = self._score(info)
            if truncated:
                info["truncation_reason"] = f"turn limit of {self.max_turns} reached without submit"
        info["health"] = dict(self._state.health)
        self._state = replace(self._state, done=terminated or truncated, observation=observation)
        return observation, reward, terminated, truncated, info

    def _score(self, info: dict[str, Any]) -> float:
        task = self.task
        if self._state.destroyed:
            health = Health(False, {"system": {"ok": False, "detail": self._state.destroyed}})
        else:
            health = self._settled_health()
            self._state = replace(self._state, health=tuple(health.vector.items()))
        truth = {(f.kind, f.component) for f in task.faults}
        named = set(self._state.diagnoses)
        diagnosis = len(truth & named) / max(len(truth), len(self._state.diagnoses)) if named else 0.0
        penalty = self.penalty * self._state.refused
        reward = max(-1.0, (1 - self.diagnosis_weight) * float(health.healthy) + self.diagnosis_weight * diagnosis
                     - penalty)
        info.update(success=health.healthy, health_checks=health.checks, faults=[f.label for f in task.faults],
                    diagnoses=[list(d) for d in self._state.diagnoses],
                    reward_terms={"health": float(health.healthy), "diagnosis": diagnosis, "penalty": -penalty})
        if self._state.destroyed:
            info["error_kind"] = "system_destroyed"
        return reward

    # ---- helpers ---------------------------------------------------------
    def _settled_health(self) -> Health:
        """The final health, re-checked a few times a second apart so a just-restarted system can settle."""
        health = self._health()
        for _ in range(FINAL_CHECK_RETRIES):
            if health.healthy:
                break
            time.sleep(FINAL_CHECK_WAIT_S)
            health = self._health()
        return health

    def _stable_health(self) -> Health:
        """The health two readings in a row agree on (at most `RESET_CHECK_READINGS`; else the last)."""
        health = self._health()
        for _ in range(RESET_CHECK_READINGS - 1):
            time.sleep(RESET_CHECK_WAIT_S)
            again = self._health()
            if again.vector == health.vector:
                break
            health = again
        return health

    def _health(self) -> Health:
        try:
            return self._system_or_fail().health()
        except SystemDied as exc:
            raise EnvInfraError(f"the SRE-v0 system container died: {exc}", kind="container_died") from exc

    def _system_or_fail(self) -> System:
        if self._system is None:
            raise EnvInfraError("the SRE-v0 system is not running (the env was closed)", kind="container_died")
        return self._system

    def _briefing(self, task: SreTask, health: Health) -> str:
        failing = "; ".join(health.failing()) or "none right now (users still report errors)"
        kinds = ", ".join(KINDS)
        return (f"INCIDENT [{task.difficulty}]: the shop's health checks are failing.\nFailing checks: {failing}\n"
                f"{ARCHITECTURE}\n{task.policy.describe()}\n"
                f"Observers: {', '.join(OBSERVERS)}. Actions: {', '.join(MUTATORS)}. Answers: diagnose, submit.\n"
                f"diagnose kinds: {kinds}; components: {', '.join(COMPONENTS)}.")

    def _cap(self, text: str) -> str:
        if len(text) <= self.max_output_chars:
            return text
        return text[: self.max_output_chars] + f"\n[output cut: {len(text):,} characters in all]"

    def _release(self) -> None:
        if self._system is not None:
            self._system.release()
            self._system = None

    # ---- agentgym extras -------------------------------------------------
    def state_fingerprint(self) -> str:
        """Health of each check plus the set of executed mutations (never log text or times)."""
        state = {"task": self._state.task_id, "health": sorted(self._state.health),
                 "changes": sorted(set(self._state.mutations)), "done": self._state.done}
        return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def has_solver(self) -> bool:
        return True

    def solver_action(self) -> str:
        """The next call of the task's scripted repair that has not run yet."""
        plan, position = self.task.solution(), 0
        for done in self._state.executed:
            if position < len(plan) and done == _canonical(plan[position]["name"], plan[position]["arguments"]):
                position += 1
        step = plan[min(position, len(plan) - 1)]
        return "<tool_call>" + json.dumps(step, ensure_ascii=False) + "</tool_call>"

    def valid_actions(self) -> list[str]:
        """A finite menu of well-formed calls for the `random` policy (observers, actions, answers)."""
        return [f"<tool_call>{json.dumps(c)}</tool_call>" for c in RANDOM_MENU]

    def close(self) -> None:
        self._release()
        super().close()


def _menu() -> list[dict[str, Any]]:
    c = lambda name, **a: {"name": name, "arguments": a}  # noqa: E731
    menu = [c("status"), c("ps"), c("metrics"), c("curl", path="/health"), c("curl", path="/health", port=8000),
            c("query", sql="EXPLAIN QUERY PLAN SELECT count(*) FROM orders WHERE customer_id = 1"),
            c("ls", path="/srv/data"), c("ls", path="/srv/etc"), c("cat", path="/srv/etc/app.conf"),
            c("run", command="df -h /srv"), c("run", command="rm -rf /srv"),
            c("edit_config", path="/srv/etc/app.conf", find="log_level = info", replace="log_level = info"),
            c("diagnose", kind="crashed_process", component="app"), c("submit")]
    menu += [c("logs", service=s) for s in tools.LOGS]
    menu += [c("restart", service=s) for s in ("app", "worker", "redis", "nginx")]
    return menu


RANDOM_MENU = _menu()
