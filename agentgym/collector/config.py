"""The collector's typed settings and the records it hands back."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentgym.collector.turns import FixedTurns, TurnControl
from agentgym.collector.window import ContextWindow
from agentgym.errors import ConfigError
from agentgym.policy.base import SamplingParams
from agentgym.registration import resolve_turn_limit
from agentgym.trajectory import Episode

ENV_RUNTIMES = ("auto", "process", "thread")


@dataclass(frozen=True)
class Task:
    """One task to roll out: which task of the env, from which seed (identical within a group)."""

    task_id: str | None = None
    seed: int | None = None


@dataclass
class CollectorConfig:
    """Settings of a `Collector`; every field has a working default."""

    sampling: SamplingParams = field(default_factory=SamplingParams)  #: how each turn is sampled
    turn_control: TurnControl | None = None  #: turn budget; None: FixedTurns(max_turns)
    max_turns: int | None = None  #: fixed turn limit when turn_control is None (None: the env's, else `DEFAULT_MAX_TURNS`)
    concurrency: int = 64  #: episodes in flight at once
    turn_timeout_s: float | None = 60.0  #: limit on one env call (reset, step, snapshot), our timeout
    env_start_timeout_s: float | None = 300.0  #: limit on making one env (a worker process starting included)
    #: where envs run: "auto" (a worker process per env unless its class declares thread_safe), "process", "thread"
    env_runtime: str = "auto"
    generate_timeout_s: float | None = 600.0  #: limit on one policy call, our timeout
    episode_timeout_s: float | None = None  #: limit on a whole episode, our timeout
    max_context: int | None = None  #: context length in tokens (None: the policy's); past it: truncated
    context_window: ContextWindow | None = None  #: keep the last N turns / a prompt-token budget (long horizons)
    episode_token_budget: int | None = None  #: sampled tokens per episode (per turn: sampling.max_new_tokens)
    check_template: bool = False  #: verify every finished episode's ids against a fresh tokenization
    record_snapshots: bool = False  #: keep env snapshots at every turn so `branch` restores instead of replaying
    mask_stale_tokens: bool = False  #: APRIL option: loss mask 0 on tokens from earlier rounds of a resumed episode
    max_buffered_groups: int = 4096  #: cap on the partial-rollout buffer (groups)
    run_id: str = ""  #: stored with every episode
    progress: bool = True  #: show a rich progress bar

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1 episode, got {self.concurrency}")
        for name in ("turn_timeout_s", "env_start_timeout_s", "generate_timeout_s", "episode_timeout_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be > 0 seconds or None (no limit), got {value}")
        if self.env_runtime not in ENV_RUNTIMES:
            raise ConfigError(f"env_runtime must be one of {', '.join(ENV_RUNTIMES)}, got {self.env_runtime!r}")
        if self.episode_token_budget is not None and self.episode_token_budget < 1:
            raise ConfigError(f"episode_token_budget must be >= 1 sampled token, got {self.episode_token_budget}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {self.max_turns}")

    def turns(self, env_default: int | None) -> TurnControl:
        """The turn control in force (derived from `turn_control`, `max_turns` and the env's default)."""
        if self.turn_control is not None:
            return self.turn_control
        return FixedTurns(resolve_turn_limit(self.max_turns, env_default))


@dataclass
class CollectResult:
    """What one `collect` call (or one partial-rollout round) produced."""

    #: finished groups, each with all its episodes, in the order of the tasks (resumed groups first) whatever
    #: order they ended in, so that `collect` with one seed returns the same list on every run
    groups: list[list[Episode]]
    partial: int = 0  #: episodes left unfinished in the buffer (resumed by the next round)
    round: int = 0  #: rollout round id
    seconds: float = 0.0
    turns: int = 0  #: turns taken in this call
    tokens: int = 0  #: action tokens sampled in this call

    @property
    def episodes(self) -> list[Episode]:
        return [e for g in self.groups for e in g]
