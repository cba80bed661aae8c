"""The command lines the documentation tells a reader to type, found by reading the Markdown.

A command line is a line of a code block (fenced, or indented four spaces), with backslash
continuations joined and a trailing ``# comment`` and ``&`` dropped, or an inline code span, that
starts with one of `PROGRAMS` (after any leading ``VAR=value`` assignments). Optional parts keep their
brackets (``[--write]``); `words` opens them.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

PROGRAMS = ("agentgym ", "python ", "torchrun ", "make ")
_COMMENT = re.compile(r"\s+#\s.*$")
_ENV = re.compile(r"^(?:[A-Z_]+=\S*\s+)+")  #: leading environment assignments (``TORCH_SPEC=skip make ...``)


def _code_lines(text: str) -> list[str]:
    """Code-block lines of a Markdown text, continuations joined."""
    out: list[str] = []
    fenced, pending = False, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not (fenced or line.startswith("    ")) and not pending:
            continue
        line = pending + " " + line.strip() if pending else line.strip()
        if line.endswith("\\"):
            pending = line[:-1].strip()
            continue
        pending = ""
        out.append(line)
    return out


def command_lines(doc: Path) -> list[str]:
    """The commands `doc` tells a reader to type (see the module docstring)."""
    text = doc.read_text()
    lines = [_COMMENT.sub("", line).removesuffix("&") for line in _code_lines(text)]
    prose = re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.S | re.M)  # fenced blocks are not spans
    spans = [span.replace("\\|", "|") for span in re.findall(r"`([^`]+)`", prose)]
    commands = [_ENV.sub("", c.strip()) for c in (*lines, *spans)]
    return [c for c in commands if c.startswith(PROGRAMS)]


def words(command: str) -> list[str]:
    """The command's words, optional brackets opened (``[--resume --run R]`` -> ``--resume --run R``) and
    alternatives split (``--port P|--uds PATH`` -> ``--port``, ``P``, ``--uds``, ``PATH``)."""
    opened = re.sub(r"(?<![\w:])\[|\](?![\w])", " ", command)
    return [piece for word in shlex.split(opened) for piece in word.split("|") if piece]


def options(argv: list[str]) -> list[str]:
    """The options written (``--store=URL`` -> ``--store``), not the values."""
    return [w.split("=")[0] for w in argv if w.startswith("-") and not re.fullmatch(r"-\d+", w)]


def set_keys(argv: list[str]) -> list[str]:
    """The config keys of ``--set KEY=VALUE`` pairs (an upper-case key is a placeholder)."""
    keys = [argv[i + 1].split("=")[0] for i, w in enumerate(argv[:-1]) if w == "--set"]
    return [k for k in keys if not k.isupper()]
