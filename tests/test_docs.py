"""The repository's documentation stays true: every command the README and docs/ tell a reader to type
exists with the options as written (its --help runs; the cheap ones run for real in
tests/test_docs_run.py), every link resolves inside the repository, nothing cites files outside it,
and the trajectory schema page names every field."""

from __future__ import annotations

import dataclasses
import functools
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
import typer.testing

from agentgym.cli import app
from agentgym.config import TrainConfig, config_help
from agentgym.trajectory import Episode, Turn
from tests.helpers.doc_commands import command_lines, options, set_keys, words

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "sandboxes" / "README.md",
        *sorted((ROOT / "docs").rglob("*.md"))]
OUTSIDE = re.compile(r"ALGORITHMS\.md|ARCHITECTURE\.md|\.\./shared|/work/shared")
PLACEHOLDER_CONFIGS = {"configs/my-run.yaml", "configs/NAME.yaml"}  #: configs the reader writes or picks


def documented() -> list[tuple[str, str]]:
    """(doc, command line) for every command a doc tells a reader to type (tests/helpers/doc_commands.py)."""
    return sorted({(str(doc.relative_to(ROOT)), line) for doc in DOCS for line in command_lines(doc)})


def of_program(*programs: str) -> list[Any]:
    return [pytest.param(line, id=f"{doc}: {line}") for doc, line in documented() if line.split()[0] in programs]


def resolve(argv: list[str]) -> tuple[list[str], Any]:
    """(subcommand path, the click command) of an `agentgym` command's words after `agentgym`."""
    node: Any = typer.main.get_command(app)  # typer ships its own click: duck-typed
    path: list[str] = []
    rest = list(argv)
    while hasattr(node, "commands") and rest and rest[0] in node.commands:
        path.append(rest[0])
        node = node.commands[rest.pop(0)]
    if hasattr(node, "commands") and "run" in node.commands:  # `agentgym eval ENV ...` routes to `run`
        node = node.commands["run"]
    return path, node


def agentgym_words(line: str) -> list[str]:
    """The words after `agentgym` (a `torchrun ... -m agentgym` line too)."""
    argv = words(line)
    if argv[0] == "torchrun":
        argv = argv[argv.index("-m") + 1:]
    assert argv[0] == "agentgym", line
    return argv[1:]


@functools.cache
def help_of(path: tuple[str, ...]) -> int:
    return typer.testing.CliRunner().invoke(app, [*path, "--help"]).exit_code


@pytest.mark.parametrize("line", of_program("agentgym", "torchrun"))
def test_every_documented_agentgym_command_exists_with_the_options_it_shows(line):
    argv = agentgym_words(line)
    path, node = resolve(argv)
    assert path, f"{line!r} names no agentgym command"
    known = {opt for param in node.params for opt in (*param.opts, *param.secondary_opts)}
    missing = [o for o in options(argv) if o not in known]
    assert not missing, f"the docs show {line!r} but `agentgym {' '.join(path)}` has no {missing}"
    unknown = [k for k in set_keys(argv) if k not in TrainConfig.model_fields]
    assert not unknown, f"the docs show {line!r} but the run config has no {unknown}"
    assert help_of(tuple(path)) == 0


@functools.cache
def script_help(*head: str) -> str:
    proc = subprocess.run([sys.executable, *head, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"python {' '.join(head)} --help failed: {proc.stderr[-1500:]}"
    return proc.stdout


@pytest.mark.parametrize("line", of_program("python"))
def test_every_documented_python_command_runs_its_help_with_the_options_it_shows(line):
    argv = words(line)[1:]
    head = argv[:2] if argv[0] == "-m" else argv[:1]
    text = script_help(*head)
    missing = [o for o in options(argv[len(head):]) if o not in text]
    assert not missing, f"the docs show {line!r} but its --help has no {missing}"
    unknown = [k for k in set_keys(argv) if k not in TrainConfig.model_fields]
    assert not unknown, f"the docs show {line!r} but the run config has no {unknown}"


@pytest.mark.parametrize("line", of_program("make"))
def test_every_documented_make_target_exists(line):
    targets = [w for w in words(line)[1:] if not w.startswith("-")]
    proc = subprocess.run(["make", "-n", *targets], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_the_config_files_the_docs_name_exist():
    named = {w for _, line in documented() for w in words(line) if re.fullmatch(r"configs/[\w./-]+\.yaml", w)}
    missing = sorted(w for w in named - PLACEHOLDER_CONFIGS if not (ROOT / w).exists())
    assert not missing, f"the docs run config files that do not exist: {missing}"


def test_readme_commands_without_placeholders_run_as_written():
    runner = typer.testing.CliRunner()
    result = runner.invoke(app, ["envs", "list", "--json"])
    assert result.exit_code == 0 and "Maze-v0" in result.output


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve_inside_the_repository(doc):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        path = (doc.parent / target).resolve()
        assert path.is_relative_to(ROOT), f"{doc.name} links outside the repository: {target}"
        assert path.exists(), f"{doc.name} links to {target}, which does not exist"


def test_nothing_cites_files_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    offenders = []
    for name in tracked.splitlines():
        path = ROOT / name
        if path.suffix not in {".py", ".md", ".yaml", ".toml", ".sh", ".txt", ".html", ".cfg"} or not path.exists():
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line) and path != Path(__file__):
                offenders.append(f"{name}:{n}: {line.strip()}")
    assert not offenders, "cite docs/ instead:\n" + "\n".join(offenders)
    assert not OUTSIDE.search(config_help()), "agentgym train --help-config cites a file outside the repository"


@pytest.mark.parametrize("record", [Episode, Turn])
def test_the_trajectory_page_names_every_field(record):
    text = (ROOT / "docs" / "trajectory.md").read_text()
    missing = [f.name for f in dataclasses.fields(record) if f"| `{f.name}` |" not in text]
    assert not missing, f"docs/trajectory.md does not describe {record.__name__}.{missing}"
