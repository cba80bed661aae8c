"""A small SQL lexer: enough to split statements, name the statement kind and find a top-level ORDER BY.

It skips string literals ('...'), quoted identifiers ("...", `...`, [...]),
comments (-- and /* */) and PostgreSQL dollar quotes ($$...$$, $tag$...$tag$),
so a ';' or 'ORDER BY' inside any of them is not mistaken for SQL. It does not
parse SQL; the database does that and reports its own errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Token:
    """A word, a punctuation character, or a skipped literal/comment (kind 'opaque')."""

    kind: str  # "word" | "punct" | "opaque"
    text: str
    start: int


def _skip_quoted(sql: str, i: int, close: str) -> int:
    """Index just past the literal opened at `i` (doubled closers are escapes); len(sql) if unclosed."""
    j = i + 1
    while j < len(sql):
        if sql[j] == close:
            if j + 1 < len(sql) and sql[j + 1] == close and close != "]":
                j += 2
                continue
            return j + 1
        j += 1
    return len(sql)


def tokens(sql: str) -> list[Token]:
    """The significant tokens of `sql` (whitespace and comments dropped, literals kept as 'opaque')."""
    out: list[Token] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch.isspace():
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif ch in "'\"`[":
            end = _skip_quoted(sql, i, {"[": "]"}.get(ch, ch))
            out.append(Token("opaque", sql[i:end], i))
            i = end
        elif ch == "$" and (m := _DOLLAR.match(sql, i)):
            close = sql.find(m.group(0), m.end())
            end = n if close < 0 else close + len(m.group(0))
            out.append(Token("opaque", sql[i:end], i))
            i = end
        elif m := _WORD.match(sql, i):
            out.append(Token("word", m.group(0), i))
            i = m.end()
        else:
            out.append(Token("punct", ch, i))
            i += 1
    return out


def split_statements(sql: str) -> list[str]:
    """The non-empty statements of `sql`, split at top-level semicolons."""
    parts: list[str] = []
    start = 0
    for tok in tokens(sql):
        if tok.kind == "punct" and tok.text == ";":
            parts.append(sql[start:tok.start])
            start = tok.start + 1
    parts.append(sql[start:])
    return [p.strip() for p in parts if tokens(p)]


def statement_kind(sql: str) -> str:
    """The first keyword of the statement, upper-cased ('SELECT', 'WITH', 'DROP', ...); '' if none."""
    for tok in tokens(sql):
        if tok.kind == "word":
            return tok.text.upper()
        if tok.kind == "opaque" or tok.text != "(":
            return ""
    return ""


def has_top_level_order_by(sql: str) -> bool:
    """Whether the outermost query ends in ORDER BY (so the order of its rows matters)."""
    depth, previous = 0, ""
    for tok in tokens(sql):
        if tok.kind == "punct":
            depth += tok.text == "("
            depth -= tok.text == ")"
            previous = ""
        elif tok.kind == "word":
            word = tok.text.upper()
            if depth == 0 and previous == "ORDER" and word == "BY":
                return True
            previous = word
        else:
            previous = ""
    return False
