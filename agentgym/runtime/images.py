"""Env server images, one per env family: ``docker/<family>/`` built without network, content-hash cached.

Which image serves an env is declared where the env is registered:
``register("Browser-v0", ..., image="browser")``; an env that names none is
served from the generic image ``env`` (docker/env: agentgym with its serve and
tools extras), which is all a pure-Python env needs. `image_for` reads it.

A recipe is a directory ``docker/<family>/`` whose Dockerfile carries the label
``agentgym.role=env-server`` (the sandbox images next to it do not) and
builds either ``FROM agentgym/base:bookworm`` or, to add to another family's
image, ``ARG PARENT=agentgym/<family>`` then ``FROM ${PARENT}``: that image is
built first and passed in by its content-hash tag (the parent may also be a
sandbox image, as docker/sre-env/ builds on docker/sre/). Next to the Dockerfile:

- ``requirements.txt`` (optional): pip requirements whose wheels (and pip's
  own) are fetched on the host into ``wheels/`` of a staged copy of the
  context, since the build has no network and the base image no pip; a line
  ``.[extra,...]`` is agentgym built from this checkout with those extras.
- ``debs.txt`` (optional): Debian packages fetched on the host into ``debs/``,
  resolved against the parent image's dpkg status (`agentgym.sandboxes.debs`).

The tag ``agentgym/<family>:<hash>`` covers the parent image's id, the recipe
and, when the recipe installs agentgym, agentgym's sources, so a build is
skipped when nothing changed (and redone on a fresh machine, as CI is).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from agentgym.errors import ConfigError
from agentgym.sandboxes.images import SERVER_LABEL

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO_ROOT / "docker"
GENERIC = "env"
#: the folders and files of the checkout that end up in an image that installs agentgym
SOURCES = ("agentgym", "envs", "sandboxes", "trainer", "setup.py", "pyproject.toml")
_PARENT_RE = re.compile(r"^\s*ARG\s+PARENT=agentgym/([\w.-]+)\s*$", re.MULTILINE)


def is_server_recipe(directory: Path) -> bool:
    """True when `directory` holds an env server image recipe (its Dockerfile has the server label)."""
    dockerfile = directory / "Dockerfile"
    return dockerfile.is_file() and SERVER_LABEL in dockerfile.read_text()


def server_recipes(root: Path = DOCKER_DIR) -> dict[str, Path]:
    """Every env server image recipe under `root`, by family name."""
    if not root.is_dir():
        return {}
    return {p.name: p for p in sorted(root.iterdir()) if is_server_recipe(p)}


def image_for(env_id: str) -> str:
    """The family image that serves `env_id`: its registration's ``image``, else the generic one."""
    from agentgym.registration import registry

    return registry[env_id].image or GENERIC


def recipe(family: str, root: Path = DOCKER_DIR) -> Path:
    """The recipe directory of `family`, or a ConfigError naming the known ones."""
    known = server_recipes(root)
    if family not in known:
        raise ConfigError(f"no env server image recipe {family!r}: expected {root / family / 'Dockerfile'} with "
                          f"LABEL {SERVER_LABEL}; known: {sorted(known)}. Build images from a checkout of agentgym")
    return known[family]


def parent_of(directory: Path) -> str | None:
    """The family image a recipe builds on (its ``ARG PARENT=agentgym/<family>``), None for the base image."""
    match = _PARENT_RE.search((directory / "Dockerfile").read_text())
    return match[1] if match else None


def installs_agentgym(directory: Path) -> bool:
    requirements = directory / "requirements.txt"
    return requirements.is_file() and any(r.startswith(".[") or r == "." for r in _requirements(requirements))


def source_hash(directory: Path, parent_id: str) -> str:
    """sha256 (12 hex digits) of the parent image id, the recipe and (if it installs agentgym) agentgym's sources."""
    digest = hashlib.sha256(parent_id.encode())
    roots = [(directory, directory.parent)]
    roots += [(REPO_ROOT / name, REPO_ROOT) for name in SOURCES] if installs_agentgym(directory) else []
    for root, top in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
                continue
            digest.update(f"\0{path.relative_to(top).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def ensure_image(family: str = GENERIC, *, force: bool = False, _seen: tuple[str, ...] = ()) -> str:
    """The tag of an up-to-date image of `family` (and of its parents), built (minutes) when missing."""
    from agentgym.sandboxes import images
    from agentgym.sandboxes.docker import client

    if family in _seen:
        raise ConfigError(f"env server images build on each other in a cycle: {' -> '.join((*_seen, family))}")
    directory = recipe(family)
    docker_client = client()
    parent = parent_of(directory)
    if parent is None:
        images.ensure_base()
        parent_tag = images.BASE_IMAGE
    elif parent in server_recipes():
        parent_tag = ensure_image(parent, _seen=(*_seen, family))
    else:  # a sandbox image (docker/sre/: SRE-v0's system), which docker/sre-env/ serves from inside
        images.ensure_base()
        parent_tag = images.build(parent).tag
    tag = f"agentgym/{family}:{source_hash(directory, images._image_id(docker_client, parent_tag))}"
    if not force and images._image_id(docker_client, tag) is not None:
        return tag
    with tempfile.TemporaryDirectory(prefix=f"agentgym-{family}-image-") as tmp:
        context = Path(tmp) / family
        shutil.copytree(directory, context)
        if (directory / "requirements.txt").is_file():
            fetch_wheels(directory / "requirements.txt", context / "wheels")
        if (directory / "debs.txt").is_file():
            images.stage_debs(docker_client, directory / "debs.txt", context / "debs", parent_tag)
        images._run_build(docker_client, context, tag, buildargs={"PARENT": parent_tag} if parent else None)
    docker_client.api.tag(tag, f"agentgym/{family}", "latest")
    return tag


def ensure_env_image(*, force: bool = False) -> str:
    """The generic env server image (``agentgym/env``); see `ensure_image`."""
    return ensure_image(GENERIC, force=force)


def _requirements(path: Path) -> list[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def fetch_wheels(requirements: Path, dest: Path) -> None:
    """Wheels for every requirement of `requirements` (and their dependencies) plus pip's own, into `dest`."""
    wanted = [str(REPO_ROOT) + r[1:] if r.startswith(".") else r for r in _requirements(requirements)]
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    for command in ([*pip, "wheel", "--prefer-binary", "--wheel-dir", str(dest), *wanted],
                    [*pip, "download", "--no-deps", "--dest", str(dest), "pip"]):
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ConfigError(f"fetching the wheels of {requirements} failed ({' '.join(command[3:5])}): "
                              f"{proc.stderr.strip()[-1500:]}; the host needs pip and access to a package index")
