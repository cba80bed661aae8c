"""The Docker engine the container tests use: the running one, else one started by scripts/docker.sh.

`make test` starts the engine first (scripts/docker.sh). When it still does not answer (or the base
image is missing), a test that needs it fails with the reason, unless AGENTGYM_ALLOW_NO_DOCKER=1
turns the failure into a skip. As root the helper tries scripts/docker.sh itself once.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def engine_problem() -> str | None:
    """Why the engine or the base image cannot be used, or None when both are there."""
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


def require_engine() -> None:
    """Return when the engine answers and the base image exists; else start them (as root) or fail/skip."""
    problem = engine_problem()
    if problem is not None and os.geteuid() == 0:
        subprocess.run(["bash", str(REPO / "scripts" / "docker.sh")], check=False)
        from agentgym.sandboxes import docker

        docker._client = None
        problem = engine_problem()
    if problem is not None:
        if os.environ.get("AGENTGYM_ALLOW_NO_DOCKER") == "1":
            pytest.skip(f"no Docker engine (AGENTGYM_ALLOW_NO_DOCKER=1): {problem}")
        pytest.fail(f"the Docker engine is required for this test: {problem}", pytrace=False)
