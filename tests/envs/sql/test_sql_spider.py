"""Spider- and BIRD-format folders (generated here, small) load as task sets and run through the CLI."""

import json
import sqlite3
from pathlib import Path

import pytest
from agentgym.envs.sql.spider import load_spider
from typer.testing import CliRunner

import agentgym
from agentgym import ConfigError, TrajectoryStore
from agentgym.cli import app

CONCERT = ["CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER)",
           "CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, concert_name TEXT, year TEXT, "
           "singer_id INTEGER REFERENCES singer(singer_id))"]
CONCERT_ROWS = ["INSERT INTO singer VALUES (1, 'Joe Sharp', 'Netherlands', 52), (2, 'Timbaland', 'United States', 32),"
                " (3, 'Justin Brown', 'France', 29), (4, 'Rose White', 'France', 41)",
                "INSERT INTO concert VALUES (1, 'Auditions', '2014', 1), (2, 'Super bootcamp', '2014', 2), "
                "(3, 'Home Visits', '2015', 3), (4, 'Week 1', '2015', 3)"]
PETS = ["CREATE TABLE pets (pet_id INTEGER PRIMARY KEY, pet_type TEXT, weight REAL)",
        "INSERT INTO pets VALUES (1, 'cat', 12.0), (2, 'dog', 13.4), (3, 'dog', 9.3)"]
QUESTIONS = [
    ("concert_singer", "How many singers do we have?", "SELECT count(*) FROM singer"),
    ("concert_singer", "What are the names of singers from France?", "SELECT name FROM singer WHERE country = 'France'"),
    ("concert_singer", "List singer names by age, oldest first.", "SELECT name FROM singer ORDER BY age DESC"),
    ("concert_singer", "How many concerts did each singer give? Show name and count.",
     "SELECT T2.name, count(*) FROM concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id GROUP BY T1.singer_id"),
    ("pets_1", "What is the average weight of dogs?", "SELECT avg(weight) FROM pets WHERE pet_type = 'dog'"),
    ("missing_db", "A question whose database is not in the folder.", "SELECT 1"),
]


def make_db(path: Path, statements: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


@pytest.fixture
def spider_dir(tmp_path) -> Path:
    root = tmp_path / "spider"
    make_db(root / "database" / "concert_singer" / "concert_singer.sqlite", CONCERT + CONCERT_ROWS)
    make_db(root / "database" / "pets_1" / "pets_1.sqlite", PETS)
    (root / "tables.json").write_text(json.dumps([{"db_id": "concert_singer"}, {"db_id": "pets_1"}]))
    (root / "dev.json").write_text(json.dumps([{"db_id": d, "question": q, "query": s} for d, q, s in QUESTIONS]))
    return root


@pytest.fixture
def bird_dir(tmp_path) -> Path:
    root = tmp_path / "bird"
    make_db(root / "dev" / "dev_databases" / "pets_1" / "pets_1.sqlite", PETS)
    (root / "dev" / "dev_tables.json").write_text("[]")
    (root / "dev" / "dev.json").write_text(json.dumps([
        {"db_id": "pets_1", "question": "How heavy is the heaviest dog?", "evidence": "heavy refers to weight",
         "SQL": "SELECT MAX(weight) FROM pets WHERE pet_type = 'dog'", "difficulty": "simple"}]))
    return root


def test_loader_reads_questions_databases_and_skips_missing_ones(spider_dir):
    tasks = load_spider(spider_dir, "dev")
    assert [t.id for t in tasks.tasks] == [f"dev-{i}" for i in range(5)]
    assert tasks.skipped == 1 and set(tasks.db_paths) == {"concert_singer", "pets_1"}


def test_bird_layout_with_evidence(bird_dir):
    env = agentgym.make("SQL-v0", dataset="bird", path=str(bird_dir), split="dev")
    obs, info = env.reset(options={"task_id": "dev-0"})
    assert "Hint: heavy refers to weight" in obs and "pets(pet_id INTEGER PRIMARY KEY" in obs
    assert info["difficulty"] == "simple"
    assert env.step(env.unwrapped.solver_action())[1] == 1.0
    env.close()


def test_cli_rollout_runs_the_gold_queries_of_a_spider_folder(spider_dir, tmp_path, digest):
    before = digest(spider_dir / "database" / "concert_singer" / "concert_singer.sqlite")
    store = str(tmp_path / "s.db")
    kwargs = json.dumps({"dataset": "spider", "path": str(spider_dir), "split": "dev"})
    result = CliRunner().invoke(app, ["rollout", "SQL-v0", "--env-kwargs", kwargs, "--policy", "solver",
                                      "-n", "5", "--store", store], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    episodes = TrajectoryStore(store).episodes()
    assert sorted(e.task_id for e in episodes) == [f"dev-{i}" for i in range(5)]
    assert all(e.total_reward == 1.0 for e in episodes)
    assert digest(spider_dir / "database" / "concert_singer" / "concert_singer.sqlite") == before


def test_bad_folders_say_what_is_missing(tmp_path, spider_dir):
    with pytest.raises(ConfigError, match="not a directory"):
        load_spider(tmp_path / "nope")
    with pytest.raises(ConfigError, match="no question file"):
        load_spider(spider_dir, "test")
    with pytest.raises(ConfigError, match="needs path"):
        agentgym.make("SQL-v0", dataset="spider")
    (spider_dir / "dev.json").write_text(json.dumps([{"db_id": "missing_db", "question": "q", "query": "SELECT 1"}]))
    with pytest.raises(ConfigError, match="none of the 1 questions"):
        load_spider(spider_dir)
