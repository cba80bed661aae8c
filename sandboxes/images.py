"""Building images with no registry: the debootstrap base and env images FROM it.

Env images live in `docker/<name>/Dockerfile`. Each is tagged
`agentgym/<name>:<hash>` (the hash covers every file of the build context and
the base image id) and `agentgym/<name>:latest`; a build whose hash tag already
exists is skipped. Builds run with `network_mode="none"` and never pull.
A directory with a `debs.txt` gets those Debian packages fetched on the host
first (see `sandboxes.debs`); the hash covers the list, not the fetched files.
Directories whose Dockerfile carries the label `SERVER_LABEL` are env server
images, built by `agentgym.runtime.images` (they need wheels staged), not here.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.sandboxes.errors import ImageNotFound, SandboxError

BASE_IMAGE = "agentgym/base:bookworm"
DOCKER_DIR = Path(__file__).resolve().parent.parent / "docker"
#: the Dockerfile label of env server images (agentgym.runtime.images builds those)
SERVER_LABEL = "agentgym.role=env-server"


@dataclass(frozen=True)
class BuildResult:
    """What `build` did for one image."""

    name: str
    tag: str
    """The content-addressed tag, e.g. agentgym/example:3f2a9c0d1b7e."""
    cached: bool
    """True when an image with this content hash existed and nothing was built."""


def env_images(root: Path = DOCKER_DIR) -> dict[str, Path]:
    """Every sandbox image directory under `root` (a subdirectory holding a Dockerfile without `SERVER_LABEL`)."""
    if not root.is_dir():
        return {}
    dockerfiles = {p.name: p / "Dockerfile" for p in sorted(root.iterdir()) if (p / "Dockerfile").is_file()}
    return {name: f.parent for name, f in dockerfiles.items() if SERVER_LABEL not in f.read_text()}


def content_hash(context: Path, base_id: str) -> str:
    """sha256 of the base image id and every file (path, mode, bytes) of a build context."""
    digest = hashlib.sha256(base_id.encode())
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        rel = path.relative_to(context).as_posix()
        digest.update(f"\0{rel}\0{path.stat().st_mode & 0o777:o}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def ensure_base(*, force: bool = False, root: Path = DOCKER_DIR) -> bool:
    """Build the base image with docker/base.sh when it is missing (or `force`); True when built."""
    from agentgym.sandboxes.docker import client

    if not force and _image_id(client(), BASE_IMAGE) is not None:
        return False
    script = root / "base.sh"
    if not script.is_file():
        raise SandboxError(f"{script} is missing; run from a checkout of agentgym to build {BASE_IMAGE}")
    env = {**os.environ, "FORCE": "1" if force else "0"}
    proc = subprocess.run(["bash", str(script)], env=env, check=False)
    if proc.returncode != 0:
        raise SandboxError(f"building {BASE_IMAGE} failed (bash {script} exited {proc.returncode}; it needs root)")
    return True


def build(name: str, *, force: bool = False, root: Path = DOCKER_DIR) -> BuildResult:
    """Build env image `name` from `root/name/Dockerfile` unless its content hash is already built."""
    from agentgym.sandboxes.docker import client

    known = env_images(root)
    if name not in known:
        raise ImageNotFound(f"no env image {name!r}: expected {root / name / 'Dockerfile'}; known: {sorted(known)}")
    docker_client = client()
    base_id = _image_id(docker_client, BASE_IMAGE)
    if base_id is None:
        raise ImageNotFound(f"{BASE_IMAGE} is missing; build it first with `bash docker/base.sh` "
                            "(or `agentgym sandbox build base`)")
    repo = f"agentgym/{name}"
    tag = f"{repo}:{content_hash(known[name], base_id)}"
    if not force and _image_id(docker_client, tag) is not None:
        docker_client.api.tag(tag, repo, "latest")
        return BuildResult(name, tag, cached=True)
    if (known[name] / "debs.txt").is_file():
        _build_with_debs(docker_client, known[name], tag)
    else:
        _run_build(docker_client, known[name], tag)
    docker_client.api.tag(tag, repo, "latest")
    return BuildResult(name, tag, cached=False)


def _build_with_debs(docker_client: Any, context: Path, tag: str) -> None:
    """Stage the context with the .debs of its debs.txt in `debs/`, then build from the staged copy."""
    with tempfile.TemporaryDirectory(prefix="agentgym-build-") as tmp:
        staged = Path(tmp) / context.name
        shutil.copytree(context, staged, symlinks=True)
        stage_debs(docker_client, context / "debs.txt", staged / "debs", BASE_IMAGE)
        _run_build(docker_client, staged, tag)


def stage_debs(docker_client: Any, debs_txt: Path, dest: Path, parent_image: str) -> None:
    """Fetch the packages of `debs_txt` and what they need beyond `parent_image` into `dest` (see `sandboxes.debs`)."""
    from agentgym.sandboxes import debs

    debs.fetch(debs.read_list(debs_txt), debs.base_status(docker_client, parent_image), dest)


def _run_build(docker_client: Any, context: Path, tag: str, buildargs: dict[str, str] | None = None) -> None:
    log: list[str] = []
    for chunk in docker_client.api.build(path=str(context), tag=tag, rm=True, forcerm=True, pull=False,
                                         network_mode="none", decode=True, labels={"agentgym.image": tag},
                                         buildargs=buildargs):
        if "stream" in chunk:
            log.append(chunk["stream"])
        if "error" in chunk:
            tail = "".join(log[-20:])
            raise SandboxError(f"building {tag} from {context} failed: {chunk['error'].strip()}\n{tail}"
                               "env images must build without network: COPY files in, RUN only local tools")


def _image_id(docker_client: Any, ref: str) -> str | None:
    import docker.errors

    try:
        return docker_client.api.inspect_image(ref)["Id"]
    except docker.errors.ImageNotFound:
        return None
