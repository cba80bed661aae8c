"""Fixtures shared by every suite: the Docker engine, stores on SQLite and on PostgreSQL (tests/helpers finds or starts each)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.helpers.docker_engine import require_engine
from tests.helpers.postgres import ENV_VAR, find_server

_services_used: list[str] = []  #: what the session found or started, reported at the end


def pytest_report_header(config) -> list[str]:
    """Where each service the suites need comes from (PostgreSQL is resolved when first used)."""
    docker = "engine socket found" if Path("/var/run/docker.sock").exists() else "no engine socket: run scripts/docker.sh"
    chromium = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else "missing: run scripts/apt.sh"
    netns = "unshare + ip found" if shutil.which("unshare") and shutil.which("ip") else "missing: run scripts/apt.sh"
    return [f"postgres: {ENV_VAR}, else the local server on 127.0.0.1:5432, else a throwaway server "
            "(tests/helpers/postgres.py)",
            f"docker: {docker} (make test starts it with scripts/docker.sh)",
            f"chromium: {chromium}; ray network namespace (scripts/ray-netns.sh): {netns}"]


def pytest_terminal_summary(terminalreporter) -> None:
    for line in _services_used:
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """The Docker engine answers and the base image exists (tests/helpers/docker_engine.py)."""
    require_engine()


@pytest.fixture(scope="session")
def tiny_dir() -> Path:
    """The tiny local model (built once, cached): real weights and tokenizer, no download."""
    from agentgym.policy.models import tiny_model_dir

    return tiny_model_dir()


@pytest.fixture(scope="session")
def tokenizer(tiny_dir):
    """The tiny model's tokenizer."""
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(tiny_dir))


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The admin URL of the session's PostgreSQL server: named, local, or a throwaway one started here.

    Which one is printed. A server that cannot be found or started fails the tests (never skips them).
    """
    try:
        server = find_server()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    _services_used.append(f"postgres: used the {server.origin} at {server.url}")
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    name = f"agentgym_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(postgres_server).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request) -> str:
    """Each store test runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("postgres_url")
