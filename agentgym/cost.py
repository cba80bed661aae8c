"""What one episode cost: env CPU and memory, wall time by stage, tokens, env starts.

The collector records an `EpisodeCost` with every episode it ends (``metadata["cost"]``); the store keeps it
in its own table (`episode_costs`, one row per episode, with the record's `version`) so a run's totals are one
query (`TrajectoryStore.run_costs`); the trainer adds the totals of each update's collected episodes to
metrics.jsonl (``cost/...``) and the viewer's run page shows the run's totals and per-episode means.

Wall time is split into three stages that add up to the episode's wall time:

- ``policy_s``: waiting for generation (every turn's ``generate_s``);
- ``env_s``: making the env, reset and every step (``env_s`` of the turns);
- ``queue_s``: the rest: waiting for a concurrency slot, an idle env, the event loop, the store.

``env_cpu_s`` and ``env_peak_mb`` come from the process the env runs in, through one hook, `env_usage`: CPU
seconds used between the episode's reset and its end, and the process's peak resident memory so far. A local
worker (`ProcessEnv`) reads its worker's /proc; an env served by an env server (a container of an env cluster, a
Ray env worker, ``agentgym envs serve``) reports its session's worker process, read from /proc on the server's side
and sent with every reply (docs/env-protocol.md, "Usage"). They are None when the env runs inside the collector's
process or inside the env server's own process (nothing to attribute to it alone), when the server does not report
usage (an older agentgym), or when the worker is gone.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

COST_VERSION = 1  #: bump when a field changes meaning; stored with every row
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class EpisodeCost:
    """One episode's cost (see the module docstring)."""

    wall_s: float = 0.0
    policy_s: float = 0.0
    env_s: float = 0.0
    queue_s: float = 0.0
    tokens_in: int = 0  #: prompt tokens sent to the policy (the new ones of each turn)
    tokens_out: int = 0  #: sampled tokens
    env_starts: int = 0  #: envs (workers, containers, sandboxes) made for this episode (0: an idle one reused)
    env_cpu_s: float | None = None
    env_peak_mb: float | None = None
    version: int = COST_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeCost:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


#: the fields summed over a run (`env_peak_mb` is a maximum)
SUMMED = ("wall_s", "policy_s", "env_s", "queue_s", "tokens_in", "tokens_out", "env_starts", "env_cpu_s")


def process_usage(pid: int | None) -> tuple[float, float] | None:
    """(CPU seconds used so far, peak resident MB so far) of process `pid` from /proc; None when unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/status") as f:
            peak_kb = next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), None)
    except (OSError, ValueError, IndexError):
        return None
    if peak_kb is None:  # a zombie: the worker died
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS, peak_kb / 1024


def env_usage(env: Any) -> tuple[float, float] | None:
    """(CPU seconds used so far, peak resident MB so far) of the process `env` runs in; None when unknown.

    The hook of the cost measure: an env that runs elsewhere says what it used with a ``usage()`` method
    returning that pair or None (`ProcessEnv`: its worker's /proc; `RemoteEnv`: what its server reported); an
    env with an integer ``pid`` (a process of its own) is read from /proc; any other env runs in the caller's
    process, whose usage is not the env's alone: None.
    """
    usage = getattr(env, "usage", None)
    if callable(usage):
        return usage()
    pid = getattr(env, "pid", None)
    return process_usage(pid) if isinstance(pid, int) else None


def measure(episode: Any, *, ended: float, setup_s: float, env_starts: int,
            usage_start: tuple[float, float] | None, usage_end: tuple[float, float] | None) -> EpisodeCost:
    """The cost of `episode` (an `Episode`) that began at ``episode.created_at`` and ended at `ended` (time.time)."""
    turns = episode.turns
    policy = sum(t.timings.get("generate_s", 0.0) for t in turns)
    env = setup_s + sum(t.timings.get("env_s", 0.0) for t in turns)
    wall = max(ended - episode.created_at, policy + env)
    cpu = peak = None
    if usage_start is not None and usage_end is not None:
        cpu, peak = round(max(0.0, usage_end[0] - usage_start[0]), 3), round(usage_end[1], 1)
    return EpisodeCost(wall_s=round(wall, 4), policy_s=round(policy, 4), env_s=round(env, 4),
                       queue_s=round(wall - policy - env, 4), tokens_in=sum(len(t.prompt_ids) for t in turns),
                       tokens_out=sum(len(t.action_ids) for t in turns), env_starts=env_starts,
                       env_cpu_s=cpu, env_peak_mb=peak)


def totals(costs: list[EpisodeCost]) -> dict[str, float]:
    """Sums over `costs` (``env_peak_mb``: the maximum), with ``episodes`` = how many."""
    out: dict[str, float] = {"episodes": len(costs)}
    for name in SUMMED:
        out[name] = round(sum(getattr(c, name) or 0 for c in costs), 4)
    out["env_peak_mb"] = max((c.env_peak_mb for c in costs if c.env_peak_mb is not None), default=0.0)
    return out
