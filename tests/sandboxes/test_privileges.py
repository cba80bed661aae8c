"""Privileges: the unprivileged default, container root with a fixed capability set, and bad values rejected."""

from __future__ import annotations

import pytest
from agentgym.sandboxes import BackendUnavailable, Privileges
from agentgym.sandboxes.privileges import CONTAINER_ROOT_CAPABILITIES

from agentgym import sandboxes


def test_default_is_unprivileged_and_root_keeps_only_in_container_capabilities() -> None:
    assert Privileges().is_default and Privileges().uid == 1000 and Privileges().capabilities == ()
    root = Privileges.container_root()
    assert (root.uid, root.gid) == (0, 0) and set(root.capabilities) == set(CONTAINER_ROOT_CAPABILITIES)
    assert not {"SYS_ADMIN", "NET_ADMIN", "NET_RAW", "SYS_PTRACE", "MKNOD", "DAC_READ_SEARCH"} & set(root.capabilities)


@pytest.mark.parametrize("kwargs, needle", [
    ({"user": "root"}, "numeric 'uid:gid'"),
    ({"user": "0:0", "capabilities": ("SYS_ADMIN",)}, "not allowed"),
    ({"capabilities": ("NET_RAW", "KILL")}, "NET_RAW"),
])
def test_bad_privileges_are_rejected_with_the_fix(kwargs, needle) -> None:
    with pytest.raises(ValueError, match=needle):
        Privileges(**kwargs)


def test_local_backend_refuses_root() -> None:
    with pytest.raises(BackendUnavailable, match="need the Docker backend"):
        sandboxes.open("agentgym/base:bookworm", backend="local", privileges=Privileges.container_root())
