"""Fixtures for SRE-v0: the Docker engine (started by scripts/docker.sh when missing) and one shared env.

The env's containers come from a process-wide pool, so tests that reuse the
module's env reuse warm containers (each reset wipes /srv and restarts the
system from the image). The SRE image is built on first use, cached by
content hash.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentgym

REPO = Path(__file__).resolve().parents[3]


def _engine_problem() -> str | None:
    from agentgym.sandboxes import BASE_IMAGE, BackendUnavailable, docker

    try:
        client = docker.client()
    except BackendUnavailable as exc:
        return str(exc)
    try:
        client.images.get(BASE_IMAGE)
    except Exception as exc:
        return f"base image {BASE_IMAGE} is missing ({exc}); build it with `bash docker/base.sh`"
    return None


@pytest.fixture(scope="session")
def sre_engine() -> None:
    """The engine answers and the base image exists (starting both via scripts/docker.sh as root)."""
    problem = _engine_problem()
    if problem is not None and os.geteuid() == 0:
        subprocess.run(["bash", str(REPO / "scripts" / "docker.sh")], check=False)
        from agentgym.sandboxes import docker

        docker._client = None
        problem = _engine_problem()
    if problem is not None:
        if os.environ.get("AGENTGYM_ALLOW_NO_DOCKER") == "1":
            pytest.skip(f"no Docker engine (AGENTGYM_ALLOW_NO_DOCKER=1): {problem}")
        pytest.fail(f"SRE-v0 needs the Docker engine: {problem}", pytrace=False)


@pytest.fixture(scope="module")
def sre_env(sre_engine: None) -> Iterator[agentgym.AgentEnv]:
    env = agentgym.make("SRE-v0")
    yield env
    env.close()
