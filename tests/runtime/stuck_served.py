"""`StuckEnv` registered as ``Stuck-v0`` for env server containers: this directory is bound into the container and
put on its PYTHONPATH, and the cluster serves ``stuck_served:Stuck-v0`` (tests/runtime/test_remote_usage_containers.py).
"""

from agentgym.registration import register

register(id="Stuck-v0", entry_point="stuck_env:StuckEnv", max_turns=10)
