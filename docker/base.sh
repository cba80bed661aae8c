#!/usr/bin/env bash
# Build the agentgym base image (agentgym/base:bookworm) without a container registry.
#
#   bash docker/base.sh            # build if the image is missing
#   FORCE=1 bash docker/base.sh    # rebuild even if it exists
#
# debootstrap makes a minimal Debian bookworm root with python3 and the common
# command-line tools from the Debian mirror, adds the non-root user `agent`
# (uid 1000) and the writable mount points, and `docker import` turns the tree
# into an image. Env images are Dockerfiles `FROM agentgym/base:bookworm`
# that need no network at build time (see docker/README.md). Needs root,
# debootstrap and a running Docker engine (scripts/docker.sh provides both).
set -euo pipefail

IMAGE="${AGENTGYM_BASE_IMAGE:-agentgym/base:bookworm}"
SUITE="${AGENTGYM_BASE_SUITE:-bookworm}"
# The mirror this machine's apt already uses (deb.debian.org unless overridden).
MIRROR="${AGENTGYM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3,procps,ca-certificates,curl,git,less,patch,diffutils,file,xz-utils,bzip2,unzip,make,sqlite3,iproute2,netcat-openbsd"

if [[ "${FORCE:-0}" != 1 ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "base image $IMAGE exists (FORCE=1 to rebuild)"
    exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "docker/base.sh must run as root (debootstrap needs it)" >&2; exit 1; }

ROOT="$(mktemp -d /tmp/agentgym-base.XXXXXX)"
trap 'rm -rf "$ROOT"' EXIT
echo "debootstrap $SUITE from $MIRROR into $ROOT"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT" "$MIRROR"

# The non-root user every sandbox runs as, and the mount points that become
# size-limited tmpfs at run time (the root filesystem itself is read-only).
chroot "$ROOT" groupadd --gid 1000 agent
chroot "$ROOT" useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash agent
mkdir -p "$ROOT/work"
chown 1000:1000 "$ROOT/work"
# Keep the image small: no apt lists, caches, docs or man pages.
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/apt/archives/*.deb \
       "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/*

tar --numeric-owner -C "$ROOT" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
    --change 'WORKDIR /work' \
    --change 'USER agent' \
    --change 'CMD ["/bin/bash"]' \
    --change "LABEL agentgym.base=$SUITE" \
    - "$IMAGE"
echo "built $IMAGE"
