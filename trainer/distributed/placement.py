"""Where a Ray run's trainer ranks and rollout workers go: `placement: colocated | disaggregated`.

- ``colocated``: one placement group; bundle i holds trainer rank i *and* the rollout
  workers assigned to it, sharing its device (trainer_gpus + rollout_gpus <= 1 per
  bundle). In sync mode they take turns: generation, then the update.
- ``disaggregated`` (RollArt): two placement groups, one bundle per trainer rank and
  one per rollout worker, so training and generation run on separate devices at once.

The data manager, env workers and the async loop are the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentgym.errors import ConfigError

#: Ray refuses empty bundles; a CPU-only run whose actors reserve nothing asks this much per bundle
MIN_BUNDLE_CPU = 0.01


@dataclass
class Placement:
    """Scheduling strategies for every trainer rank and rollout worker, and the groups to remove at the end."""

    trainer: list[Any]
    rollout: list[Any]
    groups: list[Any]

    def remove(self, ray: Any) -> None:
        from ray.util.placement_group import remove_placement_group

        for pg in self.groups:
            remove_placement_group(pg)


def _bundle(cpus: float, gpus: float) -> dict[str, float]:
    out = {"CPU": max(cpus, MIN_BUNDLE_CPU)}
    if gpus:
        out["GPU"] = gpus
    return out


def place(ray: Any, mode: str, ranks: int, rollout_workers: int, *, cpus: float, trainer_gpus: float,
          rollout_gpus: float, timeout_s: float = 120) -> Placement:
    """Reserve the bundles of `mode` (waits up to `timeout_s` for the cluster to have them)."""
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    def at(pg: Any, i: int) -> Any:
        return PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=i)

    if mode == "colocated":
        if trainer_gpus + rollout_gpus > 1:
            raise ConfigError(f"placement: colocated shares one device per bundle, but the trainer asks "
                              f"{trainer_gpus} and a rollout worker {rollout_gpus} GPU; lower them to sum to <= 1 "
                              "(e.g. 0.5 each) or set placement: disaggregated")
        pg = placement_group([_bundle(cpus, trainer_gpus + rollout_gpus) for _ in range(ranks)], strategy="PACK")
        _wait(ray, pg, timeout_s, "colocated")
        return Placement([at(pg, i) for i in range(ranks)], [at(pg, i % ranks) for i in range(rollout_workers)], [pg])
    trainer = placement_group([_bundle(cpus, trainer_gpus) for _ in range(ranks)], strategy="PACK")
    rollout = placement_group([_bundle(cpus, rollout_gpus) for _ in range(rollout_workers)], strategy="PACK")
    for pg in (trainer, rollout):
        _wait(ray, pg, timeout_s, "disaggregated")
    return Placement([at(trainer, i) for i in range(ranks)], [at(rollout, i) for i in range(rollout_workers)],
                     [trainer, rollout])


def _wait(ray: Any, pg: Any, timeout_s: float, mode: str) -> None:
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        raise ConfigError(f"the Ray cluster could not reserve the {mode} placement ({pg.bundle_specs}) within "
                          f"{timeout_s:.0f}s: it lacks the CPUs/GPUs; lower world_size or ray_rollout_workers, "
                          "or add nodes")
