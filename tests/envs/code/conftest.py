"""Fixtures of the Code-v0 tests: an env (the Docker engine is the session fixture `docker_engine`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import agentgym

collect_ignore_glob = ["repo_tasks/*"]  # the fixture repos' own tests run inside sandboxes, not here


@pytest.fixture
def code_env(docker_engine) -> Iterator:
    env = agentgym.make("Code-v0", max_obs_chars=2000)
    yield env
    env.close()
