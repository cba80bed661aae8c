"""Code-v0: write, run, test and submit code in a sandbox of its own.

A task is a statement and a workspace (``/work`` in a Docker sandbox from a
warm pool). Each turn the model calls tools (see `envs.code.actions`):
``write_file(path, content)``, ``run(command)`` (shell, per-call timeout,
output capped with a visible marker), ``run_tests()`` (the visible tests) and
``submit()``; or it sends a ```python block, which writes the main file and
runs the visible tests. Observations are what a developer sees in a terminal.

Reward on submit: the fraction of hidden tests that pass, run in a separate,
clean grading sandbox that receives only the submitted files (the hidden tests
never enter the agent's sandbox). ``info["tests"]`` has each hidden test's
status (passed, wrong_answer, crash, timeout, syntax), error and output.

Task sets: ``builtin`` (240 generated function-level tasks at three
difficulty levels), ``humaneval`` and ``mbpp`` (JSONL files at ``path``) and
``repo`` (a folder of SWE-style repository tasks at ``path``); see
`envs.code.loaders`.

Failures: a model that breaks its sandbox (a command that takes it down) ends
only its own episode, truncated, with ``info["sandbox_failure"]`` saying why;
the pool replaces the sandbox. A sandbox that cannot be had or a grader that
breaks before the tests run is infrastructure: `EnvInfraError`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

from agentgym.envs.code import pools
from agentgym.envs.code.actions import TOOLS, CodeAction, parse_code_action
from agentgym.envs.code.generate import builtin_tasks
from agentgym.envs.code.loaders import load_humaneval, load_mbpp, load_repo_tasks
from agentgym.envs.code.observe import STATUS_WORDS, clip, render_exec, render_report
from agentgym.envs.code.tasks import DIFFICULTIES, VISIBLE_TEST_FILE, CodeTask, TestReport
from agentgym.envs.code.testing import Suite, run_command, run_suites
from agentgym.envs.code.workspace import collect_files, visible_test_file
from agentgym.envs.task_state import EpisodeState, TaskListEnv, next_turn
from agentgym.sandboxes import Limits, Sandbox, SandboxError

from agentgym import sandboxes
from agentgym.core import fingerprint_text
from agentgym.errors import ConfigError, EnvInfraError, MalformedActionError
from agentgym.toolcalls import error_observation

MiB = 1024 * 1024

SYSTEM_PROMPT = (
    "You are a programmer working in a Linux sandbox with Python 3 and no network. Your workspace is /work. "
    "Each turn, call one or more tools as <tool_call>{\"name\": \"<tool>\", \"arguments\": {...}}</tool_call>:\n"
    "- write_file(path, content): create or overwrite a file;\n"
    "- run(command): run a shell command and see its output and exit code;\n"
    "- run_tests(): run the visible tests;\n"
    "- submit(): submit your work; hidden tests decide the score, so make it correct in general.\n"
    "Without tool calls, a ```python code block replaces the main solution file and runs the visible tests."
)


@dataclass(frozen=True)
class CodeEpisodeState(EpisodeState):
    """What changes during an episode besides the sandbox's files (those are in the sandbox snapshot)."""

    files: tuple[tuple[str, str], ...] = ()
    """(path, sha256) of every file written with write_file, sorted."""
    tested: bool = False
    """Whether the visible tests ran since the last write (the solver's plan reads it)."""


@dataclass(frozen=True)
class CodeSnapshot:
    """A restore token: the episode state and the sandbox's files."""

    state: CodeEpisodeState
    files: sandboxes.Snapshot | None
    """None for an ended episode (its sandbox is back in the pool)."""


class _SandboxBroke(Exception):
    """The model's own action took its sandbox down."""


def _load_tasks(task_set: str, path: str | None) -> list[CodeTask]:
    if task_set == "builtin":
        return list(builtin_tasks())
    loaders = {"humaneval": load_humaneval, "mbpp": load_mbpp, "repo": load_repo_tasks}
    if task_set not in loaders:
        raise ConfigError(f"task_set must be one of builtin, {', '.join(loaders)}; got {task_set!r}")
    if not path:
        raise ConfigError(f"task_set={task_set!r} needs path=<{'folder' if task_set == 'repo' else 'JSONL file'}>")
    return loaders[task_set](path)


class CodeEnv(TaskListEnv):
    """Write, run, test and submit code; see the module docstring."""

    #: instances share nothing unguarded: the collector may step them in threads of one process
    thread_safe = True

    deterministic = False  # commands can read clocks, random numbers and process ids
    action_format = "tool_calls"
    system_prompt = SYSTEM_PROMPT

    def __init__(self, task_set: str = "builtin", path: str | None = None, difficulty: str | None = None,
                 max_turns: int = 12, run_timeout_s: float = 10.0, test_timeout_s: float = 5.0,
                 max_obs_chars: int = 4000, max_action_chars: int = 200_000, pool_size: int = 16,
                 grader_pool_size: int = 4, acquire_timeout_s: float = 300.0, image: str = sandboxes.BASE_IMAGE,
                 backend: str | None = None, memory_mb: int = 256, disk_mb: int = 64, cpus: float = 1.0,
                 pids: int = 128, solver_runs_tests: bool = True, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        if difficulty is not None and difficulty not in DIFFICULTIES:
            raise ConfigError(f"difficulty must be one of {DIFFICULTIES} or None, got {difficulty!r}")
        if min(max_turns, max_obs_chars, max_action_chars, pool_size, grader_pool_size) < 1:
            raise ConfigError("max_turns, max_obs_chars, max_action_chars, pool_size and grader_pool_size must be "
                              "at least 1")
        if min(run_timeout_s, test_timeout_s, acquire_timeout_s) <= 0:
            raise ConfigError("run_timeout_s, test_timeout_s and acquire_timeout_s must be positive")
        tasks = [t for t in _load_tasks(task_set, path) if difficulty in (None, t.difficulty)]
        if not tasks:
            raise ConfigError(f"task set {task_set!r} has no task of difficulty {difficulty!r}")
        self.tasks = tasks
        self._index_tasks(tasks)
        try:
            limits = Limits(cpus=cpus, memory_bytes=memory_mb * MiB, pids=pids, disk_bytes=disk_mb * MiB,
                            exec_timeout_s=max(run_timeout_s, test_timeout_s), lifetime_s=3600.0,
                            output_bytes=256 * 1024)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        try:
            backend = backend or sandboxes.default_backend("docker")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if backend == "inline":  # each session's workspace is a slot of the env's own container, not /work
            self.system_prompt = SYSTEM_PROMPT.replace("Your workspace is /work.",
                                                       "Your workspace is the current directory.")
        self._workspace_key = pools.PoolKey(image, limits, backend, "workspace")
        self._grader_key = pools.PoolKey(image, limits, backend, "grader")
        self.task_set, self.max_turns = task_set, max_turns
        self.run_timeout_s, self.test_timeout_s = run_timeout_s, test_timeout_s
        self.max_obs_chars, self.max_action_chars = max_obs_chars, max_action_chars
        self.pool_size, self.grader_pool_size = pool_size, grader_pool_size
        self.acquire_timeout_s, self.solver_runs_tests = acquire_timeout_s, solver_runs_tests
        self._sandbox: Sandbox | None = None
        self._state = CodeEpisodeState()

    # ---- tasks -----------------------------------------------------------
    def tools(self) -> list[dict[str, Any]]:
        return list(TOOLS.values())

    @property
    def task(self) -> CodeTask:
        """The task of the current episode."""
        return super().task

    # ---- gymnasium API ---------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task = self._by_id[self.choose_task(options, self._task_ids)]
        self._release_sandbox()
        self._sandbox = pools.acquire(self._workspace_key, self.pool_size, self.acquire_timeout_s)
        files = dict(task.files)
        if task.visible and not task.is_repo:
            files[VISIBLE_TEST_FILE] = visible_test_file(task)
        try:
            self._sandbox.write_files(files)
        except (SandboxError, OSError) as exc:
            self._release_sandbox()
            raise EnvInfraError(f"could not set up the workspace of task {task.id}: {exc}",
                                kind="sandbox_unavailable") from exc
        observation = self._opening(task, files)
        self._state = CodeEpisodeState(task_id=task.id, observation=observation)
        return observation, {"task_id": task.id, "difficulty": task.difficulty, "task_set": task.source}

    def step(self, action: str):
        self._state, info = next_turn(self._state)
        try:
            actions = self._parse(action)
        except MalformedActionError as exc:
            info.update(error_kind=exc.kind, error=str(exc))
            return self._continue(error_observation(exc), info)
        info["tools"] = [a.kind for a in actions]
        info["action_source"] = actions[0].source
        parts: list[str] = []
        try:
            for act in actions:
                if act.kind == "submit":
                    return self._submit(parts, info)
                parts.append(self._do(act, info))
        except _SandboxBroke as exc:
            return self._broken(parts, str(exc), info)
        return self._continue("\n\n".join(parts), info)

    def _parse(self, action: str) -> list[CodeAction]:
        if len(action) > self.max_action_chars:
            raise MalformedActionError(f"the reply is {len(action):,} characters long; the limit is "
                                       f"{self.max_action_chars:,}", kind="action_too_long",
                                       hint="write large files in several smaller steps")
        return parse_code_action(action, self.task.main_file)

    # ---- tools -----------------------------------------------------------
    def _do(self, act: CodeAction, info: dict[str, Any]) -> str:
        if act.kind == "write_file":
            return self._write(str(act.arguments["path"]), str(act.arguments["content"]), info)
        if act.kind == "run":
            return self._run(str(act.arguments["command"]), act.arguments.get("timeout"), info)
        return self._run_tests(info)

    def _write(self, path: str, content: str, info: dict[str, Any]) -> str:
        if not path.strip() or "\x00" in path:
            info.update(error_kind="invalid_arguments", error=f"bad path {path!r}")
            return error_observation(f"write_file needs a file path without NUL characters, got {path!r}")
        data = content.encode("utf-8")
        try:
            self._live().write_files({path: data})
        except OSError as exc:
            info.update(error_kind="tool_error", error=str(exc))
            return error_observation(f"cannot write {path}: {exc.strerror or exc}")
        except sandboxes.AgentError as exc:
            info.update(error_kind="tool_error", error=str(exc))
            return error_observation(f"cannot write {path}: {str(exc).split(': ', 1)[-1]}")
        except sandboxes.SandboxClosed as exc:
            raise _SandboxBroke(str(exc)) from exc
        files = dict(self._state.files)
        files[path] = hashlib.sha256(data).hexdigest()
        self._state = replace(self._state, files=tuple(sorted(files.items())), tested=False)
        return f"Wrote {path} ({len(data):,} bytes)."

    def _run(self, command: str, timeout: Any, info: dict[str, Any]) -> str:
        if not command.strip() or "\x00" in command:
            info.update(error_kind="invalid_arguments", error="empty command or NUL character")
            return error_observation("run needs a non-empty shell command without NUL characters")
        limit = self.run_timeout_s if not isinstance(timeout, int | float) or timeout <= 0 else \
            min(float(timeout), self.run_timeout_s)
        note = ""
        result = self._live().exec(command, timeout=limit)
        if _out_of_processes(result):  # e.g. a fork bomb an earlier command left running: clear it, try again
            self._kill_leftovers()
            note = "[the sandbox had no free process slots; every process left in it was killed first]\n"
            result = self._live().exec(command, timeout=limit)
        if result.sandbox_died:
            raise _SandboxBroke(result.error or "the sandbox died")
        info.setdefault("runs", []).append({"command": command[:500], "exit_code": result.exit_code,
                                            "timed_out": result.timed_out, "truncated": result.truncated})
        text = note + render_exec(command, result, self.max_obs_chars)
        if result.timed_out:
            self._kill_leftovers()
            text += "\n[every process left in the sandbox was killed]"
        return text

    def _kill_leftovers(self) -> None:
        """Kill every process of the sandbox (a timed-out fork bomb keeps forking past the kill of its group)."""
        sandbox = self._live()
        try:
            sandbox.restore(sandbox.snapshot())  # restore kills all other processes first; the files stay
        except SandboxError as exc:
            raise _SandboxBroke(f"the sandbox could not be cleaned up after a runaway command: {exc}") from exc

    def _run_tests(self, info: dict[str, Any]) -> str:
        task, sandbox = self.task, self._live()
        if task.is_repo:
            report, result = run_command(sandbox, "visible", task.visible_command or "true",
                                         timeout_s=self.test_timeout_s * 6, output_chars=self.max_obs_chars)
            text = render_exec(task.visible_command or "true", result, self.max_obs_chars)
        elif not task.visible:
            return "This task has no visible tests; test your code with run(command)."
        else:
            suites = [Suite("visible", task.visible, directory=sandbox.workdir, setup=task.setup)]
            reports, result = run_suites(sandbox, suites, timeout_s=self.test_timeout_s,
                                         output_chars=self.max_obs_chars)
            if _out_of_processes(result):  # a runaway left by an earlier command: clear it, try again
                self._kill_leftovers()
                reports, result = run_suites(sandbox, suites, timeout_s=self.test_timeout_s,
                                             output_chars=self.max_obs_chars)
            report = reports["visible"]
            text = render_report(report, "visible tests", self.max_obs_chars)
        if result.sandbox_died:
            raise _SandboxBroke(result.error or "the sandbox died during the visible tests")
        if result.timed_out or any(o.status == "timeout" for o in report.outcomes):
            self._kill_leftovers()
        info["visible_tests"] = {"passed": report.passed, "total": len(report.outcomes)}
        self._state = replace(self._state, tested=True)
        return text

    # ---- submit ----------------------------------------------------------
    def _submit(self, parts: list[str], info: dict[str, Any]):
        try:
            files = collect_files(self._live())
        except sandboxes.SandboxClosed as exc:
            return self._broken(parts, str(exc), info)
        report = self._grade(files)
        reward = report.fraction
        info.update(tests=[o.as_info() for o in report.outcomes], hidden_passed=report.passed,
                    hidden_total=len(report.outcomes), success=report.passed == len(report.outcomes),
                    test_error_kind=report.error_kind, submitted_files=sorted(files))
        if report.runner_error:
            info["grader_error"] = report.runner_error
        kinds: dict[str, int] = {}
        for o in report.outcomes:
            if not o.passed:
                kinds[STATUS_WORDS[o.status]] = kinds.get(STATUS_WORDS[o.status], 0) + 1
        detail = "".join(f", {n} {k}" for k, n in kinds.items())
        parts.append(f"Submitted. {report.passed}/{len(report.outcomes)} hidden tests passed{detail}.")
        observation = "\n\n".join(parts)
        self._state = replace(self._state, done=True, observation=observation)
        self._release_sandbox()  # the episode is over: the pool resets it for the next one now
        return observation, reward, True, False, info

    def _grade(self, files: dict[str, bytes]) -> TestReport:
        """Run the hidden tests on `files` in a clean grading sandbox."""
        task = self.task
        grader = pools.acquire(self._grader_key, self.grader_pool_size, self.acquire_timeout_s)
        try:
            try:
                grader.write_files({**files, **task.hidden_files})
            except (SandboxError, OSError) as exc:
                raise EnvInfraError(f"the grading sandbox failed before the tests ran: {exc}",
                                    kind="grader_unavailable") from exc
            if task.is_repo:
                report, _ = run_command(grader, "hidden", task.hidden_command or "true",
                                        timeout_s=self.test_timeout_s * 12, output_chars=self.max_obs_chars)
                return report
            reports, _ = run_suites(grader, [Suite("hidden", task.hidden, directory=grader.workdir, setup=task.setup)],
                                    timeout_s=self.test_timeout_s, output_chars=self.max_obs_chars)
            return reports["hidden"]
        finally:
            pools.release(self._grader_key, grader)

    # ---- endings ---------------------------------------------------------
    def _continue(self, observation: str, info: dict[str, Any]):
        truncated = self._state.turn >= self.max_turns
        if truncated:
            info["truncation_reason"] = f"turn limit of {self.max_turns} reached without a submission"
        self._state = replace(self._state, done=truncated, observation=observation)
        if truncated:
            self._release_sandbox()
        return observation, 0.0, False, truncated, info

    def _broken(self, parts: list[str], reason: str, info: dict[str, Any]):
        """The model's command took its sandbox down: end this episode only; the pool replaces the sandbox."""
        info.update(sandbox_failure=reason, failure="model",
                    truncation_reason=f"the model's action broke its sandbox: {reason}")
        parts.append(f"[the sandbox stopped responding and the episode ends: {clip(reason, 300)}]")
        observation = "\n\n".join(parts)
        self._state = replace(self._state, done=True, observation=observation)
        self._release_sandbox()
        return observation, 0.0, False, True, info

    # ---- helpers ---------------------------------------------------------
    def _live(self) -> Sandbox:
        if self._sandbox is None:
            raise RuntimeError("call reset() first: this episode has no sandbox")
        return self._sandbox

    def _release_sandbox(self) -> None:
        if self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            pools.release(self._workspace_key, sandbox)

    def _opening(self, task: CodeTask, files: dict[str, str]) -> str:
        listing = "\n".join(f"  {p}" for p in sorted(files))
        where = "/work" if self._workspace_key.backend != "inline" else "your workspace (the current directory)"
        parts = [f"Task {task.id} ({task.difficulty}):\n\n{task.statement}", f"Files in {where}:\n{listing}"]
        if task.is_repo:
            parts.append(f"Visible tests: run_tests() runs `{task.visible_command}`.")
        elif task.visible:
            parts.append(f"Visible tests: run_tests() runs the {len(task.visible)} tests in {VISIBLE_TEST_FILE}.")
        return "\n\n".join(parts)

    # ---- agentgym extras -------------------------------------------------
    def state_fingerprint(self) -> str:
        """The task, the files written so far and what the last action showed."""
        return fingerprint_text(json.dumps([self._state.task_id, self._state.files]) + self._state.observation)

    def snapshot(self) -> CodeSnapshot:
        if not self._state.task_id:
            raise RuntimeError("call reset() before snapshot()")
        if self._sandbox is None:  # the episode ended and gave its sandbox back
            return CodeSnapshot(self._state, None)
        try:
            return CodeSnapshot(self._state, self._sandbox.snapshot())
        except SandboxError as exc:
            raise EnvInfraError(f"could not snapshot the sandbox: {exc}", kind="sandbox_unavailable") from exc

    def restore(self, token: CodeSnapshot) -> str:
        if not isinstance(token, CodeSnapshot) or token.state.task_id not in self._by_id:
            raise ValueError(f"not a snapshot of this env: {token!r}")
        if token.files is None:
            self._release_sandbox()
        elif self._sandbox is None or not self._sandbox.alive:
            self._release_sandbox()
            self._sandbox = pools.acquire(self._workspace_key, self.pool_size, self.acquire_timeout_s)
        try:
            if token.files is not None and self._sandbox is not None:
                self._sandbox.restore(token.files)
        except SandboxError as exc:
            raise EnvInfraError(f"could not restore the sandbox snapshot: {exc}", kind="sandbox_unavailable") from exc
        self._state = token.state
        self._last_observation = token.state.observation
        return token.state.observation

    def solver_action(self) -> str:
        """Write the reference files, run the visible tests (with `solver_runs_tests`), then submit."""
        task, state = self.task, self._state
        written = dict(state.files)
        todo = {p: c for p, c in task.reference.items()
                if written.get(p) != hashlib.sha256(c.encode("utf-8")).hexdigest()}
        if todo:
            return "".join(_tool_call("write_file", {"path": p, "content": c}) for p, c in todo.items())
        if self.solver_runs_tests and not state.tested:
            return _tool_call("run_tests", {})
        return _tool_call("submit", {})

    def valid_actions(self) -> list[str]:
        """Well-formed but uninformed actions, for the `random` policy: stubs, looks around, tests, submit."""
        task = self.task
        stub = f"def {task.entry_point}(*args, **kwargs):\n    return None\n" if task.entry_point else "pass\n"
        return [
            _tool_call("run_tests", {}),
            _tool_call("run", {"command": "ls"}),
            _tool_call("run", {"command": f"python3 {task.main_file}"}),
            _tool_call("write_file", {"path": task.main_file, "content": stub}),
            f"```python\n{stub}```",
            _tool_call("submit", {}),
        ]

    def close(self) -> None:
        self._release_sandbox()
        super().close()


def _out_of_processes(result: Any) -> bool:
    """The command could not even start because the sandbox's process limit is used up."""
    return result.exit_code == 126 and "Resource temporarily unavailable" in (result.error or result.stderr)


def _tool_call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
