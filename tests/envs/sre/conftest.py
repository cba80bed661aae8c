"""Fixtures for SRE-v0: one shared env (the Docker engine is the session fixture `docker_engine`).

The env's containers come from a process-wide pool, so tests that reuse the
module's env reuse warm containers (each reset wipes /srv and restarts the
system from the image). The SRE image is built on first use, cached by
content hash.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import agentgym


@pytest.fixture(scope="module")
def sre_env(docker_engine: None) -> Iterator[agentgym.AgentEnv]:
    env = agentgym.make("SRE-v0")
    yield env
    env.close()
