"""Fixtures for the sandbox tests: the backends and small sandboxes.

Tests that need the engine are marked `docker` and take the session fixture
`docker_engine` (tests/conftest.py, tests/helpers/docker_engine.py). The local
(bwrap) backend is skipped, with the reason, on machines where bwrap cannot run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agentgym.sandboxes import Limits, Sandbox

from agentgym import sandboxes

REPO = Path(__file__).resolve().parents[2]
IMAGE = sandboxes.BASE_IMAGE
SMALL = Limits(cpus=0.5, memory_bytes=192 * 1024 * 1024, pids=64, disk_bytes=16 * 1024 * 1024,
               exec_timeout_s=20, lifetime_s=600, output_bytes=64 * 1024)


def _require(backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_engine")
    else:
        from agentgym.sandboxes import local

        reason = local.unavailable_reason()
        if reason is not None:
            pytest.skip(f"local backend unavailable on this machine: {reason}")


@pytest.fixture(params=[pytest.param("docker", marks=pytest.mark.docker), "local"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend in turn; docker-marked for the engine."""
    _require(request.param, request)
    return request.param


@pytest.fixture
def sandbox(backend: str) -> Iterator[Sandbox]:
    """A fresh sandbox with small limits on the current backend."""
    with sandboxes.open(IMAGE, backend=backend, limits=SMALL) as sb:
        yield sb


@pytest.fixture
def docker_sandbox(docker_engine: None) -> Iterator[Sandbox]:
    """A fresh Docker sandbox with small limits."""
    with sandboxes.open(IMAGE, backend="docker", limits=SMALL) as sb:
        yield sb


def unsupported(backend: str, feature: str) -> None:
    """Skip with the documented reason when `backend` documents `feature` as unenforced."""
    if backend == "local":
        from agentgym.sandboxes.local import UNSUPPORTED

        pytest.skip(UNSUPPORTED[feature])
