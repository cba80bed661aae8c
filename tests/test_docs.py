"""The repository's documentation stays true: every README command runs (its --help, with the options
as written), every link resolves inside the repository, nothing cites files outside it, and the
trajectory schema page names every field."""

from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer.main
import typer.testing

from agentgym.cli import app
from agentgym.config import config_help
from agentgym.trajectory import Episode, Turn

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "sandboxes" / "README.md",
        *sorted((ROOT / "docs").rglob("*.md"))]
OUTSIDE = re.compile(r"ALGORITHMS\.md|ARCHITECTURE\.md|\.\./shared|/work/shared")


def readme_commands() -> list[str]:
    """Every `agentgym ...` command line of the README (code spans and code blocks), optional parts kept."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for line in text.splitlines():
        spans = re.findall(r"`([^`]+)`", line) or ([line.split("#")[0]] if line.startswith("agentgym ") else [])
        commands += [s.replace("\\|", "|").strip() for s in spans if s.startswith("agentgym ")]
    return sorted(set(commands))


def readme_make_targets() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return sorted(set(re.findall(r"(?:^|`|\s)make ([a-z][\w-]*)", text)))


def resolve(command: str) -> tuple[list[str], Any, list[str]]:
    """(subcommand path, the click command, the options written) of a README command line."""
    words = shlex.split(re.sub(r"[\[\]]", " ", command))[1:]
    node: Any = typer.main.get_command(app)  # typer ships its own click: duck-typed
    path: list[str] = []
    while hasattr(node, "commands") and words and words[0] in node.commands:
        path.append(words[0])
        node = node.commands[words.pop(0)]
    if hasattr(node, "commands") and words and "run" in node.commands:  # `agentgym eval ENV ...` routes to `run`
        node = node.commands["run"]
    options = [w.split("=")[0] for w in words if w.startswith("-")]
    return path, node, options


@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_exists_with_the_options_it_shows(command):
    path, node, options = resolve(command)
    assert path, f"README command {command!r} names no agentgym command"
    known = {opt for param in node.params for opt in (*param.opts, *param.secondary_opts)}
    missing = [o for o in options if o not in known]
    assert not missing, f"README shows {command!r} but `agentgym {' '.join(path)}` has no {missing}"
    result = typer.testing.CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output


def test_readme_commands_without_placeholders_run_as_written():
    runner = typer.testing.CliRunner()
    result = runner.invoke(app, ["envs", "list", "--json"])
    assert result.exit_code == 0 and "Maze-v0" in result.output


@pytest.mark.parametrize("target", readme_make_targets())
def test_every_make_target_the_readme_names_exists(target):
    proc = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


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
