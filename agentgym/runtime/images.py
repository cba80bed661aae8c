"""The env server image ``agentgym/env``: built FROM the local base image, without network, content-hash cached.

The recipe is docker/env/ (a Dockerfile and requirements.txt). Since the base
image has no network and no pip, the wheels are fetched on the host: pip
builds agentgym from this checkout and downloads every dependency of
requirements.txt into a staging copy of the build context, which the
Dockerfile installs with ``pip install --no-index``. The image is tagged
``agentgym/env:<hash>`` where the hash covers the base image id, the recipe
and agentgym's source files, so a build is skipped when nothing changed (and
redone on a fresh machine, as CI is).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from agentgym.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPE = REPO_ROOT / "docker" / "env"
IMAGE = "agentgym/env"
#: the folders and files of the checkout that end up in the image (agentgym's packages and build files)
SOURCES = ("agentgym", "envs", "sandboxes", "trainer", "setup.py", "pyproject.toml")


def source_hash(base_id: str) -> str:
    """sha256 (12 hex digits) of the base image id, the recipe and agentgym's sources."""
    digest = hashlib.sha256(base_id.encode())
    roots = [RECIPE, *(REPO_ROOT / name for name in SOURCES)]
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
                continue
            digest.update(f"\0{path.relative_to(REPO_ROOT).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def ensure_env_image(*, force: bool = False) -> str:
    """The tag of an up-to-date env server image, built (a few minutes) when missing."""
    from agentgym.sandboxes import images
    from agentgym.sandboxes.docker import client

    if not (RECIPE / "Dockerfile").is_file() or not (REPO_ROOT / "setup.py").is_file():
        raise ConfigError(f"the env image recipe {RECIPE} is missing; build images from a checkout of agentgym")
    docker_client = client()
    images.ensure_base()
    base_id = images._image_id(docker_client, images.BASE_IMAGE)
    tag = f"{IMAGE}:{source_hash(base_id)}"
    if not force and images._image_id(docker_client, tag) is not None:
        return tag
    with tempfile.TemporaryDirectory(prefix="agentgym-env-image-") as tmp:
        context = Path(tmp) / "env"
        shutil.copytree(RECIPE, context)
        fetch_wheels(context / "wheels")
        images._run_build(docker_client, context, tag)
    docker_client.api.tag(tag, IMAGE, "latest")
    return tag


def fetch_wheels(dest: Path) -> None:
    """agentgym's wheel and every dependency of the recipe's requirements.txt, plus pip's own wheel, into `dest`."""
    requirements = [line.split("#")[0].strip() for line in (RECIPE / "requirements.txt").read_text().splitlines()]
    requirements = [str(REPO_ROOT) + r[1:] if r.startswith(".[") else r for r in requirements if r]
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    for command in ([*pip, "wheel", "--prefer-binary", "--wheel-dir", str(dest), *requirements],
                    [*pip, "download", "--no-deps", "--dest", str(dest), "pip"]):
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ConfigError(f"fetching the env image's wheels failed ({' '.join(command[3:5])}): "
                              f"{proc.stderr.strip()[-1500:]}; the host needs pip and access to a package index")
