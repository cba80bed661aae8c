"""Tools-v0: answer a question by calling tools, then give the answer.

Tools are Python functions (schemas from type hints and docstrings) and the
tools of MCP servers launched over stdio. Each turn the model sends tool
calls in any format `agentgym.toolcalls` reads (Hermes/Qwen ``<tool_call>``
JSON, OpenAI ``tool_calls``, bare JSON), up to `max_calls_per_turn`, and sees
each result in a ``<tool_response>`` block. It ends the episode by calling
``answer(text)`` or by writing a line ``FINAL ANSWER: ...``; the reward is 1.0
when the answer matches the task's (after normalising case, spacing,
punctuation and number forms; see `envs.tools.tasks.normalise_answer`).

An unknown tool, arguments that break the schema, broken JSON, or a tool that
raises gives an error observation and the episode goes on. An MCP server that
crashes or hangs raises `ToolServerError` (an `EnvInfraError`): the collector
ends the episode as truncated by infrastructure (``failure="infra"``) with the
reason, and the next `reset` restarts the server. Envs with MCP
servers declare ``deterministic = False``: an outside process may answer
differently over time (mcp-server-time's replies carry today's date).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agentgym.envs.task_state import EpisodeState, TaskStateEnv, next_turn
from agentgym.envs.tools.builtin import BUILTIN_FUNCTIONS
from agentgym.envs.tools.mcp_client import McpServerSpec, ToolServerError
from agentgym.envs.tools.tasks import EXTRACTORS, NEEDS_SERVER, TASK_SETS, ToolTask, answer_matches
from agentgym.envs.tools.toolbox import Toolbox, ToolError

from agentgym.errors import ConfigError, MalformedActionError
from agentgym.toolcalls import ToolCall, error_observation, parse_tool_calls

ANSWER_TOOL = {"type": "function", "function": {
    "name": "answer", "description": "Give the final answer to the question; ends the episode.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string", "description": "The answer."}},
                   "required": ["text"], "additionalProperties": False}}}
_MARKER = re.compile(r"^[ \t]*final answer[ \t]*:[ \t]*(.+)$", re.IGNORECASE | re.MULTILINE)
_SURROGATE = re.compile("[\ud800-\udfff]")

SYSTEM_PROMPT = (
    "You answer questions by calling tools. Call a tool as "
    '<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>; you will see its result in a '
    "<tool_response> block. Look facts up with the tools rather than from memory. When you know the answer, call "
    '<tool_call>{"name": "answer", "arguments": {"text": "<answer>"}}</tool_call> or write a line '
    "'FINAL ANSWER: <answer>'. Give only the answer itself (a name, a number, a date or a time)."
)


@dataclass(frozen=True)
class ToolsEpisodeState(EpisodeState):
    """What changes during an episode, for snapshot/restore (tools themselves hold no episode state)."""

    results: tuple[str, ...] = ()  # successful tool results, in order (the solver's plan reads them)


class ToolsEnv(TaskStateEnv):
    """Multi-turn tool calling with verifiable answers; see the module docstring."""

    #: instances share nothing: the collector may step them in threads of one process
    thread_safe = True

    system_prompt = SYSTEM_PROMPT

    def __init__(self, task_sets: Sequence[str] = ("lookup", "arithmetic", "dates"),
                 functions: Sequence[Callable[..., Any] | str] | None = None,
                 mcp_servers: Sequence[dict[str, Any] | McpServerSpec] | None = None,
                 tasks_file: str | None = None, max_turns: int = 8, max_calls_per_turn: int = 4,
                 max_result_chars: int = 2000, max_action_chars: int = 100_000, call_timeout_s: float = 10.0,
                 render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        unknown = sorted(set(task_sets) - set(TASK_SETS))
        if unknown:
            raise ConfigError(f"unknown Tools-v0 task set(s) {unknown}; choose from {sorted(TASK_SETS)}")
        if min(max_turns, max_calls_per_turn, max_result_chars, max_action_chars) < 1:
            raise ConfigError("max_turns, max_calls_per_turn, max_result_chars and max_action_chars must be >= 1")
        specs = [McpServerSpec.parse(s) for s in (mcp_servers or ())]
        for name in task_sets:
            needed = NEEDS_SERVER.get(name)
            if needed and not any(s.command == needed["command"] for s in specs):
                specs.append(McpServerSpec.parse(needed))
        self.tasks = [t for name in task_sets for t in TASK_SETS[name]()]
        if tasks_file:
            self.tasks += load_tasks_file(tasks_file)
        if not self.tasks:
            raise ConfigError("Tools-v0 has no tasks: name at least one task set or give tasks_file")
        self._index_tasks(self.tasks)
        self.toolbox = Toolbox(BUILTIN_FUNCTIONS if functions is None else functions, specs,
                               call_timeout_s=call_timeout_s)
        self.deterministic = not specs  # an outside process may answer differently over time
        self.max_turns, self.max_calls_per_turn = max_turns, max_calls_per_turn
        self.max_result_chars, self.max_action_chars = max_result_chars, max_action_chars
        self._state = ToolsEpisodeState()

    # ---- tasks -----------------------------------------------------------
    def tools(self) -> list[dict[str, Any]]:
        return [*self.toolbox.schemas(), ANSWER_TOOL]

    @property
    def task(self) -> ToolTask:
        return super().task

    # ---- gymnasium API ---------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task_id = self.choose_task(options, self._task_ids)
        self.toolbox.ensure_started()
        task = self._by_id[task_id]
        names = ", ".join([*self.toolbox.names(), "answer"])
        observation = f"Question: {task.question}\nTools: {names}."
        self._state = ToolsEpisodeState(task_id=task_id, observation=observation)
        return observation, {"task_id": task_id, "category": task.category}

    def step(self, action: str):
        self._state, info = next_turn(self._state)
        try:
            calls, final = self._parse(action, info)
        except MalformedActionError as exc:
            info.update(error_kind=exc.kind, error=str(exc))
            return self._continue(error_observation(exc), info)
        if final is not None:
            return self._answer(final, info)
        return self._run_calls(calls, info)

    def _parse(self, action: str, info: dict[str, Any]) -> tuple[list[ToolCall], str | None]:
        if len(action) > self.max_action_chars:
            raise MalformedActionError(f"the reply is {len(action):,} characters long; the limit is "
                                       f"{self.max_action_chars:,}", kind="action_too_long",
                                       hint="send short tool calls")
        action, replaced = _SURROGATE.subn("\ufffd", action)
        calls, in_json = _clean_calls(parse_tool_calls(action))  # JSON "\\ud800" escapes decode to surrogates
        if replaced or in_json:
            info["replaced_surrogates"] = replaced + in_json
        if not calls:
            marker = _MARKER.search(action)
            if marker:
                return [], marker.group(1).strip()
            raise MalformedActionError("no tool call and no 'FINAL ANSWER:' line found",
                                       hint='call a tool as <tool_call>{"name": "<tool>", "arguments": {...}}'
                                            "</tool_call>, or answer with a line FINAL ANSWER: <answer>")
        if len(calls) > self.max_calls_per_turn:
            raise MalformedActionError(f"{len(calls)} tool calls in one reply; the limit is {self.max_calls_per_turn}",
                                       hint="send fewer calls per turn")
        answers = [c for c in calls if c.name == "answer"]
        if answers:
            if len(calls) > 1:
                raise MalformedActionError("answer must be the only call of its reply",
                                           hint="call the other tools first, read their results, then answer")
            text = answers[0].arguments.get("text")
            if not isinstance(text, str | int | float) or isinstance(text, bool):
                raise MalformedActionError("answer needs a \"text\" string argument", kind="invalid_arguments",
                                           hint='call {"name": "answer", "arguments": {"text": "..."}}')
            return [], str(text)
        for call in calls:
            self.toolbox.validate(call)
        return calls, None

    def _run_calls(self, calls: list[ToolCall], info: dict[str, Any]):
        blocks, results, executed = [], list(self._state.results), []
        for call in calls:
            record: dict[str, Any] = {"name": call.name, "arguments": call.arguments}
            try:
                text = self.toolbox.call(call)
            except ToolServerError:
                # infrastructure, not the model: the episode ends here (EnvInfraError); reset restarts the server
                self._state = replace(self._state, done=True)
                raise
            except (ToolError, MalformedActionError) as exc:
                info.setdefault("error_kind", getattr(exc, "kind", "tool_error"))
                info.setdefault("error", str(exc))
                record["error"] = str(exc)
                blocks.append(_response(call.name, error=str(exc)))
            else:
                results.append(text)
                shown = text if len(text) <= self.max_result_chars else \
                    text[: self.max_result_chars] + f"… [cut: {len(text):,} characters in all]"
                record["result"] = shown
                blocks.append(_response(call.name, content=shown))
            executed.append(record)
        info["tool_calls"] = executed
        self._state = replace(self._state, results=tuple(results))
        return self._continue("\n".join(blocks), info)

    def _answer(self, text: str, info: dict[str, Any]):
        task = self.task
        matched = answer_matches(text, task)
        info.update(answer=text, expected=task.answer, success=matched,
                    reward_terms={"answer_match": float(matched)})
        observation = "Correct." if matched else "Answer recorded; it does not match the expected answer."
        self._state = replace(self._state, done=True, observation=observation)
        return observation, float(matched), True, False, info

    def _continue(self, observation: str, info: dict[str, Any]):
        truncated = self._state.turn >= self.max_turns
        if truncated:
            info["truncation_reason"] = f"turn limit of {self.max_turns} reached without an answer"
        self._state = replace(self._state, done=truncated, observation=observation)
        return observation, 0.0, False, truncated, info

    # ---- agentgym extras -------------------------------------------------
    @property
    def has_solver(self) -> bool:
        return True

    def solver_action(self) -> str:
        """The next call of the task's scripted plan, then the answer read from the last result."""
        task, results = self.task, list(self._state.results)
        if not task.plan:
            raise RuntimeError(f"task {task.id} has no tool plan, so the built-in solver cannot play it")
        if len(results) < len(task.plan):
            step = task.plan[len(results)]
            return _call_text(step.tool, step.bind(results))
        return _call_text("answer", {"text": EXTRACTORS[task.extractor](results[-1])})

    def close(self) -> None:
        self.toolbox.close()
        super().close()


def _response(name: str, *, content: str | None = None, error: str | None = None) -> str:
    """A Hermes-style ``<tool_response>`` block; JSON results are embedded as JSON, not as an escaped string."""
    value: Any = content
    if content is not None and content[:1] in "{[":
        try:
            value = json.loads(content)
        except json.JSONDecodeError:
            value = content
    body = {"name": name, "content": value} if error is None else {"name": name, "error": error}
    return "<tool_response>\n" + json.dumps(body, ensure_ascii=False) + "\n</tool_response>"


def _clean(value: Any) -> tuple[Any, int]:
    """`value` with lone surrogates in every string replaced by U+FFFD, and how many were replaced."""
    if isinstance(value, str):
        return _SURROGATE.subn("\ufffd", value)
    if isinstance(value, list):
        pairs = [_clean(v) for v in value]
        return [v for v, _ in pairs], sum(n for _, n in pairs)
    if isinstance(value, dict):
        pairs = {_clean(k)[0]: _clean(v) for k, v in value.items()}
        return {k: v for k, (v, _) in pairs.items()}, sum(n for _, n in pairs.values())
    return value, 0


def _clean_calls(calls: list[ToolCall]) -> tuple[list[ToolCall], int]:
    cleaned, total = [], 0
    for call in calls:
        arguments, count = _clean(call.arguments)
        cleaned.append(replace(call, arguments=arguments) if count else call)
        total += count
    return cleaned, total


def _call_text(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "</tool_call>"


def load_tasks_file(path: str) -> list[ToolTask]:
    """User tasks from JSON Lines: ``{"question", "answer"}`` plus optional ``id``, ``aliases``, ``plan``
    (a list of ``{"tool", "arguments"}``; arguments may use ``{0}``... for earlier results)."""
    from agentgym.envs.tools.tasks import PlanStep

    tasks = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read tasks_file {path!r}: {exc}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            plan = tuple(PlanStep(str(s["tool"]), dict(s.get("arguments", {}))) for s in row.get("plan", ()))
            tasks.append(ToolTask(str(row.get("id") or f"file-{number}"), str(row["question"]), str(row["answer"]),
                                  plan, "file", aliases=tuple(str(a) for a in row.get("aliases", ()))))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"{path} line {number} is not a task: {exc!r}; each line needs a JSON object "
                              'with "question" and "answer"') from None
    return tasks
