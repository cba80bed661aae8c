"""An env cluster's socket directories do not outlive their owner: those of a gone owner are removed, a live one's
kept (the owner's pid and start time are in the directory's name)."""

from __future__ import annotations

import os

import pytest
from agentgym.sandboxes import reaper

from agentgym.errors import EnvInfraError
from agentgym.runtime.cluster import DIR_PREFIX, EnvCluster, Replica, remove_stale_directories


def test_directories_of_gone_owners_are_removed_and_a_live_owners_kept(tmp_path):
    me = f"{DIR_PREFIX}{os.getpid()}-{reaper.process_start(os.getpid())}-abc"
    recycled = f"{DIR_PREFIX}{os.getpid()}-1-abc"  # this pid, but another process's start time: its owner is gone
    gone = f"{DIR_PREFIX}999999999-5-abc"
    other = "agentgym-env-image-x1"  # not a socket directory (an image build's context)
    for name in (me, recycled, gone, other):
        (tmp_path / name).mkdir()
        (tmp_path / name / "env.sock").write_text("")
    removed = remove_stale_directories(str(tmp_path))
    assert sorted(os.path.basename(p) for p in removed) == sorted([recycled, gone])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([me, other])


def test_a_replica_started_while_the_cluster_stops_is_removed_too(monkeypatch):
    """The watcher replaces a dead replica while the trainer stops the cluster: the fresh one is in no member list
    that stop() saw, so check() removes it (its socket directory stayed behind: the container soak's leak)."""
    cluster = EnvCluster("Maze-v0")
    dead, fresh = Replica("dead", "/d1", "e1"), Replica("fresh", "/d2", "e2")
    cluster.members = [dead]
    removed = []

    def start_while_stopping() -> Replica:
        cluster.stop()
        return fresh

    monkeypatch.setattr(cluster, "_running", lambda replica: False)
    monkeypatch.setattr(cluster, "_start_replica", start_while_stopping)
    monkeypatch.setattr(cluster, "_remove", lambda replica: removed.append(replica.container_id))
    cluster.check()
    assert removed == ["dead", "fresh"] and cluster.members == [] and cluster.replaced == 0


def test_a_replica_still_starting_when_the_cluster_stops_gives_up_at_once(tmp_path):
    """A replacement the watcher is starting when the trainer exits stops waiting for its health (its caller
    removes it), instead of waiting out the start timeout in a daemon thread that the exit kills mid-way."""
    cluster = EnvCluster("Maze-v0")
    cluster.stop()
    with pytest.raises(EnvInfraError, match="stopped while a replica started"):
        cluster._wait_healthy(Replica("c1", str(tmp_path), "e1"))
