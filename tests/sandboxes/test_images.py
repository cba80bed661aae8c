"""Env images build from the base with no network, cached by content hash; the CLI drives it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentgym.sandboxes import images
from typer.testing import CliRunner

from agentgym import sandboxes
from tests.sandboxes.conftest import REPO, SMALL

pytestmark = pytest.mark.docker


@pytest.fixture
def context_root(tmp_path: Path, docker_engine: None) -> Iterator[Path]:
    """A copy of docker/example under a temporary root; its images are removed afterwards."""
    shutil.copytree(REPO / "docker" / "example", tmp_path / "agentgym-test-img")
    yield tmp_path
    from agentgym.sandboxes import docker

    api = docker.client().api
    for image in api.images(name="agentgym/agentgym-test-img"):
        for tag in image["RepoTags"] or []:
            api.remove_image(tag, force=True)


def test_build_is_cached_by_content_hash(context_root: Path) -> None:
    first = images.build("agentgym-test-img", root=context_root)
    again = images.build("agentgym-test-img", root=context_root)
    assert not first.cached and again.cached and again.tag == first.tag
    (context_root / "agentgym-test-img" / "check.py").write_text("print('changed')\n")
    changed = images.build("agentgym-test-img", root=context_root)
    assert not changed.cached and changed.tag != first.tag


def test_built_image_runs_locked_down(context_root: Path) -> None:
    tag = images.build("agentgym-test-img", root=context_root).tag
    with sandboxes.open(tag, limits=SMALL) as sb:
        out = sb.exec("agentgym-check").stdout
    assert "uid 1000" in out and "writable ['/work', '/tmp']" in out and "interfaces ['lo']" in out


def test_unknown_image_lists_known_ones(context_root: Path) -> None:
    with pytest.raises(sandboxes.ImageNotFound, match="agentgym-test-img"):
        images.build("nope", root=context_root)


def test_cli_build_example(docker_engine: None) -> None:
    from agentgym.cli.sandbox import sandbox_app

    result = CliRunner().invoke(sandbox_app, ["build", "example", "--json"])
    assert result.exit_code == 0, result.output
    assert "agentgym/example:" in result.output and sandboxes.BASE_IMAGE in result.output
    listed = CliRunner().invoke(sandbox_app, ["ls", "--json"])
    assert listed.exit_code == 0, listed.output
