"""Result sets: how they are shown to the model and how two of them are compared.

Comparison is execution match, as in Spider's and BIRD's evaluation: the
predicted query is right when it returns the same rows as the gold query, as a
multiset (row order ignored) unless the gold query orders its rows. Values are
normalised first (1 == 1.0, floats to 6 significant decimals, Decimal as float,
bytes as hex), and when the column counts agree a column permutation is also
accepted (``SELECT name, id`` for ``SELECT id, name``).
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

#: Column permutations are tried only up to this many columns (6! = 720 checks at most).
MAX_PERMUTED_COLUMNS = 6


@dataclass(frozen=True)
class QueryResult:
    """What one statement returned: column names, rows (possibly cut at a cap) and whether more existed."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    more_rows: bool = False
    elapsed_s: float = 0.0

    @property
    def row_count(self) -> int:
        return len(self.rows)


@dataclass(frozen=True)
class TableFormat:
    """Caps on what an observation shows of a result set."""

    max_rows: int = 20
    max_cell_chars: int = 60
    max_chars: int = 4000


@dataclass(frozen=True)
class MatchResult:
    """The verdict of `results_match` and, when false, why (for `info`)."""

    matched: bool
    reason: str = ""
    ordered: bool = False
    details: dict[str, Any] = field(default_factory=dict)


def _cell(value: Any, limit: int) -> str:
    if value is None:
        text = "NULL"
    elif isinstance(value, bytes):
        text = f"<{len(value)} bytes>"
    elif isinstance(value, float):
        text = repr(round(value, 6))
    else:
        text = str(value)
    text = text.replace("\n", "\\n").replace("|", "/")
    return text if len(text) <= limit else text[: max(limit - 1, 1)] + "…"


def format_table(result: QueryResult, fmt: TableFormat = TableFormat()) -> str:
    """A Markdown-like table of at most `fmt.max_rows` rows and `fmt.max_chars` characters."""
    if not result.columns:
        return "Statement ran; it returned no result set."
    shown = result.rows[: fmt.max_rows]
    cells = [[_cell(c, fmt.max_cell_chars) for c in result.columns]]
    cells += [[_cell(v, fmt.max_cell_chars) for v in row] for row in shown]
    widths = [max(len(r[i]) for r in cells) for i in range(len(result.columns))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "-|-".join("-" * w for w in widths))
    width_cap = max(fmt.max_chars // 4, 80)
    lines = [line if len(line) <= width_cap else line[: width_cap - 1] + "…" for line in lines]
    text, kept = "", 0
    for kept, line in enumerate(lines):  # noqa: B007 - kept is read after the loop
        if len(text) + len(line) + 1 > fmt.max_chars:
            break
        text += line + "\n"
    else:
        kept = len(lines)
    rows_shown = max(kept - 2, 0)
    total = f"{result.row_count}+" if result.more_rows else str(result.row_count)
    if rows_shown < result.row_count or result.more_rows:
        text += f"({total} rows; showing the first {rows_shown}. Add LIMIT or aggregate to see less.)"
    else:
        text += f"({result.row_count} row{'s' if result.row_count != 1 else ''})"
    return text


def normalise_value(value: Any) -> Any:
    """A comparable form of one cell: numbers as rounded floats, bytes as hex, text as is."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float | Decimal):
        number = float(value)
        return round(number, 6) + 0.0  # + 0.0 turns -0.0 into 0.0
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if value is None or isinstance(value, str):
        return value
    return str(value)


def _rows(result: QueryResult) -> list[tuple[Any, ...]]:
    return [tuple(normalise_value(v) for v in row) for row in result.rows]


def _same(pred: list[tuple[Any, ...]], gold: list[tuple[Any, ...]], ordered: bool) -> bool:
    if ordered:
        return pred == gold
    return Counter(pred) == Counter(gold)


def _column_permutations(pred: list[tuple[Any, ...]], want: list[tuple[Any, ...]], width: int):
    """Column orders of `pred` under which every column holds the same values as the gold column."""
    pred_cols = [Counter(row[i] for row in pred) for i in range(width)]
    want_cols = [Counter(row[i] for row in want) for i in range(width)]
    options = [[j for j in range(width) if pred_cols[j] == want_cols[i]] for i in range(width)]
    for perm in itertools.product(*options):
        if len(set(perm)) == width and list(perm) != list(range(width)):
            yield perm


def results_match(predicted: QueryResult, gold: QueryResult, *, ordered: bool) -> MatchResult:
    """Whether `predicted` returns the rows of `gold` (a multiset, or a list when `ordered`)."""
    if predicted.more_rows or gold.more_rows:
        return MatchResult(False, "a result set was larger than the comparison cap", ordered)
    if len(predicted.columns) != len(gold.columns):
        return MatchResult(False, f"{len(predicted.columns)} columns returned, {len(gold.columns)} expected",
                           ordered, {"predicted_columns": len(predicted.columns), "gold_columns": len(gold.columns)})
    if len(predicted.rows) != len(gold.rows):
        return MatchResult(False, f"{len(predicted.rows)} rows returned, {len(gold.rows)} expected", ordered,
                           {"predicted_rows": len(predicted.rows), "gold_rows": len(gold.rows)})
    pred, want = _rows(predicted), _rows(gold)
    if _same(pred, want, ordered):
        return MatchResult(True, "", ordered)
    width = len(gold.columns)
    if 1 < width <= MAX_PERMUTED_COLUMNS:
        for perm in _column_permutations(pred, want, width):
            if _same([tuple(row[i] for i in perm) for row in pred], want, ordered):
                return MatchResult(True, "columns in another order", ordered)
    return MatchResult(False, "different values" + (" or row order" if ordered else ""), ordered)
