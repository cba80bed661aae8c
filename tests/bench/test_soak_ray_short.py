"""The short Ray soak (bench/soak.py --runtime ray --short): the soak's run on the Ray runtime in a loopback-only
namespace, with env workers' processes killed and hung, an env worker actor and a rollout worker actor SIGKILLed
(Ray restarts them, the run goes on) and the Ray driver SIGKILLed once and resumed; then the local mode's
accounting, and what an async run on Ray must leave behind (the staleness bound kept, new weights in the rollout
workers' tokens, env-worker state fingerprints). Counts only, never times.
"""

from __future__ import annotations

import json
import shutil

import pytest
from test_soak_short import assert_nothing_lost, short_soak

needs_netns = pytest.mark.skipif(not (shutil.which("unshare") and shutil.which("ip")),
                                 reason="needs unshare (util-linux) and ip (iproute2): run scripts/apt.sh")


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.ray
@needs_netns
def test_short_ray_soak_with_actor_kills_loses_nothing(tmp_path):
    pytest.importorskip("ray", reason="install the ray extra: pip install -e '.[ray]'")
    result = short_soak(tmp_path, "--runtime", "ray", "--trainer-kills", "1", "--actor-kills", "2")
    assert_nothing_lost(result, trainer_kills=1)
    # one env worker and one rollout worker were killed; Ray restarted both and the run went on
    assert result["actors"]["killed"] == {"EnvWorker": 1, "RolloutWorker": 1}, result["actors"]
    assert result["actors"]["rollout_workers_rejoined"] == 1, result["actors"]
    hit = result["faults_hit_stored_episodes"]
    infra = result["infra_failures"]
    # the episodes in flight on the killed actors are infra failures the kills explain (none unexplained)
    # (a reset that waited for the restarting env worker past the collector's limit is the env worker kill's too)
    assert infra.get("rollout_worker_lost", 0) + infra.get("env_connection_lost", 0) \
        + infra.get("env_reset_timeout", 0) == hit.get("actor_kill", 0) + result["env_lost_at_trainer_kill"]
    leaked = result["leaked"]
    assert leaked["ray_session_processes"] == [] and not leaked["ray_session_dir"], leaked
    assert leaked["outlived_their_driver"] == 0, leaked["outlived"]
    assert_async_ray_run(tmp_path / "runs" / "soak")


def assert_async_ray_run(run_dir):
    """The async run on Ray (two rollout workers, one env worker) kept the data manager's staleness bound (1) and
    fed its rollout workers new weights, whose tokens carry the version they were sampled with."""
    from agentgym.store import TrajectoryStore

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert rows and all(r["staleness_max"] <= 1 for r in rows), [r.get("staleness_max") for r in rows]
    episodes = list(TrajectoryStore(str(run_dir / "episodes.db")).iter_episodes(run_id="soak"))
    turns = [t for e in episodes for t in e.turns]
    versions = [v for t in turns for v in t.token_versions]
    assert versions and min(versions) >= 0 and max(versions) >= 1, "no new weights reached the rollout workers"
    assert max(versions) <= max(r["policy_version"] for r in rows)
    assert all(t.state_fingerprint for t in turns)  # from the env worker's session
    assert all(e.env_id.endswith("SoakMaze-v0") for e in episodes), {e.env_id for e in episodes}
    assert (run_dir / "checkpoints" / "latest").exists()
