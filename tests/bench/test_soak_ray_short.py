"""The short Ray soak (bench/soak.py --runtime ray --short): the soak's run on the Ray runtime in a loopback-only
namespace, with env workers' processes killed and hung, an env worker actor and a rollout worker actor SIGKILLed
(Ray restarts them, the run goes on) and the Ray driver SIGKILLed once and resumed; then the local mode's
accounting. Counts only, never times.
"""

from __future__ import annotations

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
