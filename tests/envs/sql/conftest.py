"""Fixtures of the SQL-v0 tests: the generated databases, built once per session in a temp dir."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from agentgym.envs.sql.dataset import TaskSet, builtin_taskset


@pytest.fixture(scope="session")
def sql_data_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("sql-data"))


@pytest.fixture(scope="session")
def taskset(sql_data_dir: str) -> TaskSet:
    return builtin_taskset(sql_data_dir)


@pytest.fixture(scope="session")
def digest():
    """sha256 of a file, to show a database did not change."""

    def file_digest(path: Path) -> str:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()

    return file_digest
