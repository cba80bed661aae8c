"""SRE-v0's shipped tasks: single faults, faults with a red herring, and pairs of faults.

Tasks are generated deterministically from the fault kinds (`faults.KINDS`),
their components and variants, and seeds that pick the Redis password, wrong
values, release numbers and file names. Difficulty levels:

- ``easy``: one fault, every tool allowed;
- ``medium``: one fault plus a red herring, mutating tools budgeted;
- ``hard``: two faults on different components (at most one that fills the
  disk), budgeted, and `run` forbidden where the repairs need none.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import cache
from itertools import combinations

from agentgym.envs.sre.faults import KINDS, Call, Fault, call
from agentgym.envs.sre.herrings import HERRINGS
from agentgym.envs.sre.policy import Policy

TEMPLATE_PASSWORD = "s3cr3t-redis-7f3a"
DIFFICULTIES = ("easy", "medium", "hard")
SEEDS_PER_FAULT = 2
HARD_TASKS = 110


@dataclass(frozen=True)
class SreTask:
    """One broken system to repair."""

    id: str
    difficulty: str
    faults: tuple[Fault, ...]
    password: str
    herring: str = ""
    policy: Policy = field(default_factory=Policy)

    @property
    def setup(self) -> str:
        """Task-wide pre-start shell: rotate the Redis password everywhere to this task's."""
        files = "/srv/etc/redis.conf /srv/etc/app.conf /srv/etc/worker.conf"
        return f"sed -i 's|{TEMPLATE_PASSWORD}|{self.password}|' {files}"

    def solution(self) -> list[Call]:
        """The scripted repair: look, fix every fault (disk first), name every fault, submit."""
        ordered = sorted(self.faults, key=lambda f: not KINDS[f.kind].fills_disk)
        fixes = [c for f in ordered for c in KINDS[f.kind].repair(f)]
        diagnoses = [call("diagnose", kind=f.kind, component=f.component) for f in self.faults]
        return [call("status"), *fixes, *diagnoses, call("submit")]


def _params(kind: str, rng: random.Random, password: str) -> tuple[tuple[str, str], ...]:
    values = {
        "day": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        "pid": str(rng.randint(1000, 60000)),
        "version": rng.choice(["1.5.0", "1.4.3", "1.5.1", "1.6.0-rc1", "2.0.0"]),
        "password": password,
    }
    fault_kind = KINDS[kind]
    if "wrong" in fault_kind.param_keys:
        values["wrong"] = ""  # filled per variant by _with_wrong_password
    return tuple(sorted((k, values[k]) for k in fault_kind.param_keys))


def _wrong_password(variant: str, password: str) -> str:
    if variant == "typo":
        return password[:-1] + ("x" if password[-1] != "x" else "y")
    if variant == "old":
        return "s3cr3t-redis-2023"
    return ""


def _fault(kind: str, component: str, variant: str, rng: random.Random, password: str) -> Fault:
    params = dict(_params(kind, rng, password))
    if "wrong" in params:
        params["wrong"] = _wrong_password(variant, password)
    return Fault(kind, component, variant, tuple(sorted(params.items())))


def fault_specs() -> list[tuple[str, str, str]]:
    """Every (kind, component, variant) of the shipped fault kinds."""
    return [(k.name, c, v) for k in KINDS.values() for c, variants in k.variants.items() for v in variants]


def _policy(difficulty: str, faults: tuple[Fault, ...], rng: random.Random) -> Policy:
    if difficulty == "easy":
        return Policy()
    needs = {"run": 0, "edit_config": 0, "restart": 0}
    for f in faults:
        for c in KINDS[f.kind].repair(f):
            needs[c["name"]] += 1
    forbid_run = difficulty == "hard" and needs["run"] == 0 and rng.random() < 0.5
    budgets = {tool: n + 2 for tool, n in needs.items() if not (forbid_run and tool == "run")}
    return Policy(budgets=tuple(sorted(budgets.items())), forbidden=("run",) if forbid_run else ())


def _task(task_id: str, difficulty: str, specs: list[tuple[str, str, str]], rng: random.Random,
          herring: str = "") -> SreTask:
    password = f"s3cr3t-{rng.getrandbits(32):08x}"
    faults = tuple(_fault(k, c, v, rng, password) for k, c, v in specs)
    return SreTask(task_id, difficulty, faults, password, herring, _policy(difficulty, faults, rng))


def _compatible(a: tuple[str, str, str], b: tuple[str, str, str]) -> bool:
    return a[1] != b[1] and not (KINDS[a[0]].fills_disk and KINDS[b[0]].fills_disk)


@cache
def shipped_tasks() -> tuple[SreTask, ...]:
    """Every shipped task, in a fixed order."""
    specs, tasks = fault_specs(), []
    herrings = sorted(HERRINGS)
    for index, spec in enumerate(specs):
        label = "-".join(x for x in spec if x)
        for seed in range(SEEDS_PER_FAULT):
            rng = random.Random(f"easy/{label}/{seed}")
            tasks.append(_task(f"easy/{label}/s{seed}", "easy", [spec], rng))
        for offset in (0, 3):
            herring = herrings[(index + offset) % len(herrings)]
            rng = random.Random(f"medium/{label}/{herring}")
            tasks.append(_task(f"medium/{label}/{herring}", "medium", [spec], rng, herring))
    pairs = [(a, b) for a, b in combinations(specs, 2) if _compatible(a, b)]
    for a, b in random.Random("hard-pairs").sample(pairs, HARD_TASKS):
        label = "+".join("-".join(x for x in s if x) for s in (a, b))
        rng = random.Random(f"hard/{label}")
        tasks.append(_task(f"hard/{label}", "hard", [a, b], rng))
    return tuple(tasks)
