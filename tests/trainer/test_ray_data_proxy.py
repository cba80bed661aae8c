"""The Ray data-manager proxy offers every `DataManager` call the rollout driver and the trainer loops make.

A method missing from `RemoteDataManager` does not fail at import: it fails inside a rollout worker's
producer, where (before this check) it stopped collection silently and left the trainer waiting for
batches until the test's timeout. This test reads the calls off the loop sources, so a new call to the
data manager cannot land without its proxy.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from agentgym.trainer.ray_runtime.data_actor import DataManagerActor, RemoteDataManager

ROOT = Path(__file__).resolve().parents[2]
CALLERS = ["trainer/collection.py", "trainer/loops.py", "trainer/ray_runtime/trainer_actor.py"]


def data_manager_calls() -> set[str]:
    calls: set[str] = set()
    for rel in CALLERS:
        calls |= set(re.findall(r"\bdm\.([a-z_]+)", (ROOT / rel).read_text()))
    return calls - {"restore"}  # a resume restores inside the actor (DataManagerActor.restore), not over the proxy


def test_the_proxy_and_the_actor_answer_every_call_the_loops_make():
    calls = data_manager_calls()
    assert {"try_acquire", "stalled", "pull", "push"} <= calls  # the scan found the loops' calls
    proxied = calls - {"batch_groups"}  # an attribute the proxy reads from the actor once, in __init__
    assert "self.batch_groups" in inspect.getsource(RemoteDataManager.__init__)
    assert sorted(c for c in proxied if not hasattr(RemoteDataManager, c)) == []
    assert sorted(c for c in calls if not hasattr(DataManagerActor, c)) == []
