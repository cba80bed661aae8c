"""Fixtures of the Code-v0 tests: the Docker engine (from the sandbox suite) and an env."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import agentgym
from tests.sandboxes.conftest import docker_engine  # noqa: F401  (the session fixture that starts the engine)

collect_ignore_glob = ["repo_tasks/*"]  # the fixture repos' own tests run inside sandboxes, not here


@pytest.fixture
def code_env(docker_engine) -> Iterator:  # noqa: F811
    env = agentgym.make("Code-v0", max_obs_chars=2000)
    yield env
    env.close()
