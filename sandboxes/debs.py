"""Debian packages for an env image, fetched on the host so the image build needs no network.

An env image directory may hold `debs.txt`: Debian package names, one per
line (`#` comments). Before the build, `fetch` asks the host's apt for those
packages and everything they need that the base image lacks, resolved against
the base image's own dpkg status and the base's suite (bookworm main and its
security updates), with
a private apt state (no change to the host's apt). The .deb files go into
`debs/` of a staged copy of the build context, where the Dockerfile installs
them with `dpkg -i` while the build runs with `network_mode="none"`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from agentgym.sandboxes.errors import SandboxError

SUITE = os.environ.get("AGENTGYM_BASE_SUITE", "bookworm")
MIRROR = os.environ.get("AGENTGYM_DEBIAN_MIRROR", "http://deb.debian.org/debian")
#: the suite's security updates (Chromium's, among others, land there first); "" leaves them out
SECURITY_MIRROR = os.environ.get("AGENTGYM_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
APT_TIMEOUT_S = 600


def read_list(path: Path) -> list[str]:
    """Package names from a debs.txt (blank lines and `#` comments skipped)."""
    names = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return [n for n in names if n]


def base_status(docker_client: Any, base_image: str) -> bytes:
    """The base image's /var/lib/dpkg/status, read from a throwaway container with no network."""
    output = docker_client.containers.run(base_image, ["cat", "/var/lib/dpkg/status"], remove=True,
                                          network_mode="none", user="0:0", entrypoint=[])
    return bytes(output)


def fetch(packages: list[str], status: bytes, dest: Path) -> list[Path]:
    """Download `packages` and their missing dependencies into `dest`; returns the .deb files."""
    if shutil.which("apt-get") is None:
        raise SandboxError("building an image with debs.txt needs apt-get on the host (a Debian machine)")
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="agentgym-apt-") as tmp:
        root = Path(tmp)
        for sub in ("lists/partial", "archives/partial", "etc"):
            (root / sub).mkdir(parents=True)
        sources = f"deb {MIRROR} {SUITE} main\n"
        if SECURITY_MIRROR:
            sources += f"deb {SECURITY_MIRROR} {SUITE}-security main\n"
        (root / "etc/sources.list").write_text(sources)
        (root / "status").write_bytes(status)
        options = [
            f"-oDir::Etc::sourcelist={root}/etc/sources.list", "-oDir::Etc::sourceparts=-",
            f"-oDir::State::Lists={root}/lists", f"-oDir::State::status={root}/status",
            f"-oDir::Cache={root}", f"-oDir::Cache::archives={root}/archives", "-oDebug::NoLocking=1",
            "-oAPT::Sandbox::User=root", "-q",
        ]
        _apt(options + ["update"], "apt-get update (private state for the image's suite)")
        _apt(options + ["-y", "--download-only", "--no-install-recommends", "install", *packages],
             f"apt-get download of {packages}")
        debs = sorted((root / "archives").glob("*.deb"))
        for deb in debs:
            shutil.copy2(deb, dest / deb.name)
    return sorted(dest.glob("*.deb"))


def _apt(args: list[str], what: str) -> None:
    try:
        proc = subprocess.run(["apt-get", *args], capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SandboxError(f"{what} did not finish within {APT_TIMEOUT_S}s; is {MIRROR} reachable?") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SandboxError(f"{what} failed (exit {proc.returncode}); the host needs apt and access to "
                           f"{MIRROR} (set AGENTGYM_DEBIAN_MIRROR for another mirror):\n{tail}")
