"""Load a Spider- or BIRD-format folder as an SQL-v0 task set.

Spider::

    PATH/tables.json
    PATH/dev.json                 [{"db_id", "question", "query"}, ...]   (train: train_spider.json)
    PATH/database/<db_id>/<db_id>.sqlite

BIRD::

    PATH/dev_tables.json
    PATH/dev.json                 [{"db_id", "question", "SQL", "evidence", "difficulty"}, ...]
    PATH/dev_databases/<db_id>/<db_id>.sqlite

Either layout may also sit one level down in ``PATH/<split>/``. Tasks are named
``<split>-<index>`` after their position in the question file; BIRD's
``evidence`` is shown as a hint and its ``difficulty`` kept. Questions whose
database file is missing are skipped and counted (`SpiderTaskSet.skipped`); a
folder with no usable question is an error. The schema shown to the model is
read from each SQLite file, so ``tables.json`` is optional.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agentgym.envs.sql.dataset import SqlTask, TaskSet

from agentgym.errors import ConfigError


@dataclass
class SpiderTaskSet(TaskSet):
    """A loaded folder; `skipped` counts questions whose database file was missing."""

    skipped: int = 0


def _first_existing(candidates: list[Path], what: str, root: Path) -> Path:
    for candidate in candidates:
        if candidate.exists():
            return candidate
    names = ", ".join(str(c.relative_to(root)) for c in candidates)
    raise ConfigError(f"no {what} in {root} (looked for {names}); point 'path' at a Spider or BIRD folder")


def load_spider(path: str | Path, split: str = "dev") -> SpiderTaskSet:
    """The questions of `split` in the folder at `path`, with each database's SQLite file."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ConfigError(f"SQL dataset path {str(root)!r} is not a directory")
    bases = [root, root / split]
    questions_file = _first_existing(
        [b / name for b in bases for name in (f"{split}.json", f"{split}_spider.json")], "question file", root)
    db_dir = _first_existing([b / name for b in bases for name in ("database", f"{split}_databases")],
                             "database folder", root)
    try:
        entries = json.loads(questions_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {questions_file}: {exc}") from None
    if not isinstance(entries, list):
        raise ConfigError(f"{questions_file} must hold a JSON list of questions, got {type(entries).__name__}")
    tasks, paths, skipped = [], {}, 0
    for index, entry in enumerate(entries):
        gold = entry.get("query") or entry.get("SQL") if isinstance(entry, dict) else None
        if not gold or not entry.get("db_id") or not entry.get("question"):
            raise ConfigError(f"{questions_file} entry {index} lacks db_id, question or query/SQL: {entry!r:.200}")
        db_id = str(entry["db_id"])
        db_file = db_dir / db_id / f"{db_id}.sqlite"
        if not db_file.is_file():
            skipped += 1
            continue
        paths[db_id] = db_file
        tasks.append(SqlTask(id=f"{split}-{index}", db_id=db_id, question=str(entry["question"]), gold=str(gold),
                             difficulty=str(entry.get("difficulty") or entry.get("hardness") or ""),
                             evidence=str(entry.get("evidence") or "")))
    if not tasks:
        raise ConfigError(f"none of the {len(entries)} questions in {questions_file} has its database under "
                          f"{db_dir}/<db_id>/<db_id>.sqlite")
    return SpiderTaskSet(name=f"spider:{root}:{split}", tasks=tasks, db_paths=paths, skipped=skipped)
