"""The learning benchmark's results: per-run outcomes, the JSON object, the table, the PNG, shard merging.

`bench/learning.py` runs the benchmark and hands its outcomes here; `python bench/learning.py --merge`
reads shards' JSON objects back through `merge` and `outcomes_of`.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import math
import platform
import statistics
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ESTIMATORS = ("grpo", "dr_grpo", "rloo", "gae", "gigpo", "spa", "oprl", "trace")  #: the benchmark's default order
THRESHOLDS = (0.5, 0.8)
COLLAPSE_DROP = 0.2
BASELINE = "grpo"  #: the estimator the paired training-success column compares with
#: held-out evaluation of JSON objects that do not say (their task count and spacing are unknown, so a merge
#: compares them on the keys they have)
GREEDY = {"temperature": 0.0, "samples": 1}
ROOT = Path(__file__).resolve().parents[1]


def checkout_commit() -> str | None:
    """The commit the benchmark ran from (`-dirty` with uncommitted changes), None outside a git checkout: a
    shard's JSON says which code produced it, and a merge lists every commit its shards came from."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


UNRECORDED = "unrecorded"  #: the machine of a shard written before its JSON named one


def machine_id() -> str:
    """What makes two runs of one seed compute alike: the CPU (model and instruction set, read from
    /proc/cpuinfo) and the torch build. The same seed's SFT warm start differs between machines (KeyDoor-v0 seed
    0: 0.28 held-out success on one 2-core machine, 0.45 on another), so a merge pairs runs by seed *and* machine."""
    try:
        first = Path("/proc/cpuinfo").read_text().split("\n\n", 1)[0]
        cpu = "|".join(line.split(":", 1)[1].strip() for line in first.splitlines()
                       if line.split(":", 1)[0].strip() in ("vendor_id", "model name", "flags"))
    except OSError:
        cpu = platform.processor()
    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = "none"
    return f"{platform.machine()}-" + hashlib.sha256(f"{cpu}|torch {torch}".encode()).hexdigest()[:10]


@dataclass
class RunOutcome:
    """One run's result: its held-out curve, training success per update, how it ended."""

    env: str
    estimator: str
    seed: int
    evals: list[tuple[int, int, float]]  #: (update, env steps, held-out success)
    wall_s: float
    stopped_by: str
    reached: dict[float, tuple[int, int] | None] = field(default_factory=dict)  #: threshold -> (update, steps)
    train: list[float] = field(default_factory=list)  #: training success of each update's batch
    warm_start: str | None = None  #: `weights_digest` of the policy RL started from (None: not recorded)

    @property
    def final(self) -> float:
        return self.evals[-1][2] if self.evals else float("nan")

    @property
    def start(self) -> float:
        """Held-out success of the starting policy (the warm start, update 0); nan where not evaluated."""
        return self.evals[0][2] if self.evals and self.evals[0][0] == 0 else float("nan")

    @property
    def collapsed(self) -> bool:
        return bool(self.evals) and max(s for _, _, s in self.evals) - self.final > COLLAPSE_DROP


def weights_digest(policy: Path) -> str:
    """The first 12 hex digits of the sha256 of a saved policy's weight files (``*.safetensors``, ``*.bin``, in name
    order): two runs with equal digests started RL from the same weights, whatever machine they ran on."""
    files = sorted(f for f in policy.rglob("*") if f.is_file() and f.suffix in (".safetensors", ".bin"))
    if not files:
        raise FileNotFoundError(f"{policy}: no *.safetensors or *.bin weight files to digest")
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.relative_to(policy).as_posix().encode() + b"\0")
        with f.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:12]


def thresholds_reached(o: RunOutcome) -> None:
    """Fill `o.reached`: per threshold, the first (update, env steps) whose held-out success reached it."""
    for t in THRESHOLDS:
        o.reached[t] = next(((u, s) for u, s, rate in o.evals if rate >= t), None)


def curve_fields(o: RunOutcome) -> dict[str, Any]:
    """The JSON fields read off a run's held-out curve (after `thresholds_reached`): the first update and env
    steps at each threshold (None where never reached), and whether the run collapsed."""
    fields: dict[str, Any] = {}
    for t in THRESHOLDS:
        hit = o.reached[t]
        fields[f"updates_to_{t}"] = hit[0] if hit else None
        fields[f"env_steps_to_{t}"] = hit[1] if hit else None
    return {**fields, "collapsed": o.collapsed}


#: two-sided 95% quantiles of Student's t by degrees of freedom (1.96 beyond the table)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def interval95(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t interval over seeds (0 for a single seed)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, T975.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))


def read_every(data: dict[str, Any], every: int, path: str = "") -> dict[str, Any]:
    """A shard read as if it had been evaluated every `every` updates (it must have been evaluated at each
    multiple of `every`, whatever its own spacing or whether the JSON names it): each curve
    keeps its updates divisible by `every` and its last point (every run is evaluated after its last update), and
    the thresholds' first updates and the collapse flag are read again from what is kept. So a shard evaluated
    every update merges with shards evaluated every 2, and one run gives both spacings' races."""
    if every < 1:
        raise SystemExit(f"--read-every {every}: give a number of updates >= 1")
    envs: dict[str, dict[str, dict[str, list]]] = {}
    for env_id, per in data["envs"].items():
        for name, e in per.items():
            curves, fields = [], []
            for seed, curve in zip(e.get("seed", range(len(e["curve"]))), e["curve"], strict=False):
                missing = sorted(set(range(0, curve[-1][0] + 1, every)) - {p[0] for p in curve}) if curve else []
                if missing:
                    raise SystemExit(f"{path}: {name} seed {seed} on {env_id} was not evaluated at update(s) "
                                     f"{missing[:3]}: it cannot be read every {every} updates")
                curves.append([p for i, p in enumerate(curve) if p[0] % every == 0 or i == len(curve) - 1])
                o = RunOutcome(env_id, name, 0, [(int(u), int(st), float(r)) for u, st, r in curves[-1]], 0.0, "")
                thresholds_reached(o)
                fields.append(curve_fields(o))
            read = {key: [f[key] for f in fields] for key in (fields[0] if fields else {})}
            envs.setdefault(env_id, {})[name] = {**e, "curve": curves, **read}
    return {**data, "envs": envs, "eval": {**(data.get("eval") or {}), "every": every}}


def merge(paths: list[str], every: int | None = None) -> dict[str, object]:
    """One JSON object from the `--json` objects of shards (their per-seed lists concatenated, with the machine
    of each run; a seed two shards of one machine both ran is refused); with `every`, each shard is first read
    at that spacing (`read_every`)."""
    merged: dict[str, object] = {"envs": {}, "updates": None, "seeds": 0}
    sources: dict[tuple[str, str, int, str], str] = {}  # (env, estimator, seed, machine) -> its shard
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
            budget = data.get("budget") or {"updates": data["updates"]}
        except (OSError, ValueError, KeyError, AttributeError) as exc:
            raise SystemExit(f"{path}: not a --json output of this benchmark ({exc!r}); give the files that "
                             "`python bench/learning.py ... --json > FILE` wrote") from None
        if every is not None:
            data = read_every(data, every, path)
        mode = {**GREEDY, **(data.get("eval") or {})}
        known = merged.get("eval") or {}
        if any(known[k] != mode[k] for k in known.keys() & mode.keys()):  # type: ignore[attr-defined]
            raise SystemExit(f"{path}: held-out evaluation {mode}, the other shards {known}: "
                             "shards of one benchmark must evaluate alike")
        merged["eval"] = {**known, **mode}  # type: ignore[dict-item]
        if merged.get("budget") not in (None, budget):
            raise SystemExit(f"{path}: budget {budget} per run, the other shards {merged['budget']}: "
                             "shards of one benchmark must share the budget")
        merged["updates"], merged["budget"] = data["updates"], budget
        commits = merged.setdefault("commits", [])
        commits.extend(c for c in data.get("commits", []) if c not in commits)  # type: ignore[union-attr]
        for env_id, per in data["envs"].items():
            for name, e in per.items():
                into = merged["envs"].setdefault(env_id, {}).setdefault(name, {})  # type: ignore[union-attr]
                machines = e.get("machine") or [data.get("machine") or UNRECORDED] * len(e["final_success"])
                for seed, machine in zip(e.get("seed", []), machines, strict=False):
                    if (env_id, name, seed, machine) in sources:
                        raise SystemExit(
                            f"{path}: seed {seed} of {name} on {env_id} (machine {machine}) is also in "
                            f"{sources[env_id, name, seed, machine]}: a benchmark has one run per seed and machine; "
                            "move the run that was superseded out of the shards you merge "
                            "(bench/results/superseded/ keeps such runs; repeats/, a repeat of one seed "
                            "on one machine)")
                    sources[env_id, name, seed, machine] = path
                for key, values in e.items():
                    if key != "machine":
                        into.setdefault(key, []).extend(values)
                into.setdefault("machine", []).extend(machines)
    merged["seeds"] = max((len(e["final_success"]) for per in merged["envs"].values()  # type: ignore[union-attr]
                           for e in per.values()), default=0)
    return merged


def outcomes_of(data: dict[str, object]) -> list[RunOutcome]:
    """Outcomes rebuilt from a JSON object's curves (for the PNG of merged shards)."""
    out = []
    for env_id, per in data["envs"].items():  # type: ignore[union-attr]
        for name, e in per.items():
            for i, curve in enumerate(e.get("curve", [])):
                evals = [(int(u), int(st), float(s)) for u, st, s in curve]
                train = e.get("train_success", [[]] * len(e["curve"]))[i]
                warm = e.get("warm_start", [None] * len(e["curve"]))[i]
                out.append(RunOutcome(env_id, name, e.get("seed", list(range(len(e["curve"]))))[i], evals,
                                      e["wall_s"][i], e["stopped_by"][i], train=train, warm_start=warm))
                thresholds_reached(out[-1])
    return out


def as_json(outcomes: list[RunOutcome], args: argparse.Namespace) -> dict[str, object]:
    envs: dict[str, dict[str, dict[str, list]]] = {}
    for o in outcomes:
        e = envs.setdefault(o.env, {}).setdefault(o.estimator, {})
        for key, value in curve_fields(o).items():
            e.setdefault(key, []).append(value)
        e.setdefault("start_success", []).append(None if math.isnan(o.start) else round(o.start, 4))
        e.setdefault("final_success", []).append(round(o.final, 4))
        e.setdefault("wall_s", []).append(round(o.wall_s, 1))
        e.setdefault("stopped_by", []).append(o.stopped_by)
        e.setdefault("seed", []).append(o.seed)
        e.setdefault("curve", []).append([[u, st, round(rate, 4)] for u, st, rate in o.evals])
        e.setdefault("train_success", []).append([round(rate, 4) for rate in o.train])
        e.setdefault("warm_start", []).append(o.warm_start)
    return {"envs": envs, "updates": args.updates, "seeds": args.seeds, "budget": budget_of(args),
            "eval": {"temperature": args.eval_temperature, "samples": args.eval_samples,
                     "tasks": args.eval_tasks, "every": args.eval_every}, "machine": machine_id(),
            "commits": [c for c in [getattr(args, "commit", None)] if c]}


def describe_eval(data: dict[str, Any]) -> str:
    """How held-out success was measured: 'greedy' or 'N sampled per task at T', and on how many tasks how
    often where the JSON says."""
    mode = {**GREEDY, **(data.get("eval") or {})}
    parts = ["greedy" if not mode["temperature"] else f"{mode['samples']} sampled per task at T={mode['temperature']:g}"]
    if "tasks" in mode:
        parts.append(f"{mode['tasks']} tasks")
    if "every" in mode:
        parts.append(f"every {mode['every']} updates")
    return ", ".join(parts)


def budget_of(args: argparse.Namespace) -> dict[str, float | None]:
    """The equal budget of every run: updates (a cap where another budget is set), env steps, wall seconds."""
    return {"updates": args.updates, "env_steps": args.env_steps, "wall_s": args.wall_s}


def describe_budget(budget: dict[str, Any]) -> str:
    if budget.get("env_steps"):
        return f"{budget['env_steps']} env steps per run"
    if budget.get("wall_s"):
        return f"{budget['wall_s']:g} s of training per run"
    return f"{budget['updates']} updates per run"


def _mean_reached(values: list[int | None]) -> str:
    hits = [v for v in values if v is not None]
    return f"{statistics.fmean(hits):.1f} ({len(hits)}/{len(values)})" if hits else f"- (0/{len(values)})"


def mean_updates(values: list[int | None], budget: int | None) -> str:
    """`_mean_reached`, and where some seed never reached the threshold within a budget of `budget` updates, the
    mean over every seed with a never counted as the budget: a lower bound of that estimator's mean, which the
    mean over reaching seeds alone is not (an estimator that reaches only on its easiest seeds looks fast)."""
    text = _mean_reached(values)
    if budget is None or None not in values or all(v is None for v in values):
        return text
    return f"{text}; all >= {statistics.fmean(budget if v is None else v for v in values):.1f}"


def _runs(e: dict[str, list]) -> list[tuple[int, str, str | None]]:
    """(seed, machine, warm-start digest) of each run of an entry (one shard's own entries name no machine: all
    are one; shards written before the digest was recorded have none)."""
    seeds = e.get("seed", [])
    return list(zip(seeds, e.get("machine", [UNRECORDED] * len(seeds)), e.get("warm_start", [None] * len(seeds)),
                    strict=False))


def same_start(a: tuple[int, str, str | None], b: tuple[int, str, str | None]) -> bool:
    """Did two runs start RL from the same policy? Same seed, and the same warm-start digest where both record
    one; else the same machine (one seed's warm start differs between machines: KeyDoor-v0 seed 0 gave 0.28
    held-out success on one 2-core machine, 0.45 on another, and repeats bit for bit on one)."""
    if a[0] != b[0]:
        return False
    return a[2] == b[2] if a[2] and b[2] else a[1] == b[1]


def paired(e: dict[str, list], base: dict[str, list], key: str) -> list[tuple[Any, Any]]:
    """(this run's `key` value, the baseline's) for every run of `e` whose seed the baseline ran from the same
    warm start (`same_start`); runs without such a partner are left out. Where the baseline ran that start more
    than once (two machine types whose warm starts are equal bit for bit), a run pairs with the baseline's run
    from its own machine first; the others take a baseline run no run has taken while one is left."""
    theirs = list(zip(_runs(base), base.get(key, []), strict=False))
    mine = list(zip(_runs(e), e.get(key, []), strict=False))
    partner: dict[int, int] = {}  # index in mine -> index in theirs
    for own_machine in (True, False):
        for r, (run, _) in enumerate(mine):
            if r in partner:
                continue
            match = [i for i, (other, _) in enumerate(theirs)
                     if same_start(run, other) and (other[1] == run[1] or not own_machine)]
            if match:
                taken = set(partner.values())
                partner[r] = min(match, key=lambda i: i in taken)  # an untaken run first, else the first match
    return [(value, theirs[partner[r]][1]) for r, (_, value) in enumerate(mine) if r in partner]


def paired_gap(e: dict[str, list], base: dict[str, list]) -> list[float]:
    """Per seed both ran from one warm start: the mean over the last half of the updates of (training success -
    the baseline's). Every estimator of a seed starts from the same warm start and trains on the same tasks in the
    same order, so the difference cancels what the seed's warm start and tasks share."""
    gaps = []
    for mine, theirs in paired(e, base, "train_success"):
        n = min(len(mine), len(theirs))
        if n:
            half = n // 2
            gaps.append(statistics.fmean(a - b for a, b in zip(mine[half:n], theirs[half:n], strict=True)))
    return gaps


def race(e: dict[str, list], base: dict[str, list], key: str = "updates_to_0.8") -> tuple[int, int, int] | None:
    """Per seed both ran from one warm start: was this estimator's first update at the threshold (`key`) earlier,
    the same or later than the baseline's? Counts (ahead, level, behind); a seed where one reached it and the
    other never did is ahead or behind, one where neither did is level. None when no seed was run by both."""
    counts = [0, 0, 0]
    for mine, other in paired(e, base, key):
        a = math.inf if mine is None else mine
        b = math.inf if other is None else other
        counts[0 if a < b else 1 if a == b else 2] += 1
    return tuple(counts) if any(counts) else None  # type: ignore[return-value]


def sign_test(ahead: int, behind: int) -> float:
    """Two-sided exact sign test of a race count (level seeds left out): the probability, were each seed a fair
    coin between ahead and behind, of a split at least this uneven. 5 / 0 / 0 gives 0.0625 and 4 / 0 / 1 0.375:
    no five-seed count is evidence alone; pooled races are (15 / 4 / 1 gives 0.0005)."""
    n = ahead + behind
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(ahead, behind) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def describe_race(counts: tuple[int, int, int] | None) -> str:
    """The race column: 'ahead/level/behind (sign test p)', or '-' where no seed was run by both."""
    if counts is None:
        return "-"
    return "/".join(map(str, counts)) + f" (p {sign_test(counts[0], counts[2]):.2g})"


def print_table(data: dict[str, object], console: Console) -> None:
    spent = data.get("budget") or {"updates": data["updates"]}
    budget = describe_budget(spent)  # type: ignore[arg-type]
    cap = None if spent.get("env_steps") or spent.get("wall_s") else spent["updates"]  # type: ignore[union-attr]
    table = Table(title=f"held-out success ({describe_eval(data)}), {budget} (equal budgets), {data['seeds']} seed(s)")
    for col in ("env", "estimator", "start", "updates to 0.5", "updates to 0.8", "env steps to 0.5", "env steps to 0.8",
                f"to 0.8 vs {BASELINE}: ahead/level/behind", "final success (95% CI)",
                f"train success - {BASELINE}, last half (95% CI)", "collapsed",
                "wall s/run", "stopped by"):
        table.add_column(col, justify="right")
    for env_id, per in data["envs"].items():  # type: ignore[union-attr]
        for name, e in per.items():
            mean, half = interval95(e["final_success"])
            base = per.get(BASELINE) if name != BASELINE else None
            gaps = paired_gap(e, base) if base else []
            gap = "-" if not gaps else "{:+.3f} ± {:.3f} ({} seeds)".format(*interval95(gaps), len(gaps))
            seeds = race(e, base) if base else None
            starts = [v for v in e.get("start_success", []) if v is not None]
            table.add_row(env_id, name, f"{statistics.fmean(starts):.2f}" if starts else "-",
                          mean_updates(e["updates_to_0.5"], cap), mean_updates(e["updates_to_0.8"], cap),
                          _mean_reached(e["env_steps_to_0.5"]), _mean_reached(e["env_steps_to_0.8"]),
                          describe_race(seeds), f"{mean:.2f} ± {half:.2f}", gap,
                          f"{sum(e['collapsed'])}/{len(e['collapsed'])}",
                          f"{statistics.fmean(e['wall_s']):.0f}",
                          ", ".join(f"{k} {v}" for k, v in sorted(Counter(e["stopped_by"]).items())))
    console.print(table)
    if data.get("commits"):
        console.print(f"code: {', '.join(data['commits'])}")  # type: ignore[arg-type]
    machines = Counter(m for per in data["envs"].values() for e in per.values()  # type: ignore[union-attr]
                       for m in e.get("machine", []))
    if len(machines) > 1:
        console.print("machines (runs pair by seed and warm-start digest, or by machine where a shard has no digest): "
                      + ", ".join(f"{m} {n} runs" for m, n in sorted(machines.items())))
    console.print("start: held-out success of the warm start (update 0), mean over seeds; "
                  "updates/env steps: mean over the seeds that reached the threshold (how many did, in brackets; "
                  "'all >= M': the mean over every seed with a never counted as the budget, a lower bound); "
                  f"ahead/level/behind: seeds where the first update at 0.8 held-out came before, with or after "
                  f"{BASELINE}'s (never counts as later than any update; never against never is level; p: the two-sided "
                  f"sign test of ahead against behind, level seeds left out); "
                  f"train success - {BASELINE}: per seed, the mean over the last half of the updates of the batch "
                  f"success minus {BASELINE}'s on the same tasks from the same warm start, then over seeds")


def plot(outcomes: list[RunOutcome], path: Path, evaluation: str = "greedy") -> None:
    """Every run's held-out curve (top row, one panel per env) and its training batch success per update
    (bottom row): estimators of one seed train on the same tasks, so the bottom row is the paired view."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({o.env for o in outcomes})
    names = sorted({o.estimator for o in outcomes}, key=lambda n: (ESTIMATORS.index(n) if n in ESTIMATORS
                                                                   else len(ESTIMATORS), n))
    colours = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
    fig, axes = plt.subplots(2, len(envs), figsize=(6 * len(envs), 7.5), squeeze=False)
    for col, env_id in enumerate(envs):
        runs = [o for o in outcomes if o.env == env_id]
        labelled: set[str] = set()
        for o in runs:
            label = None if o.estimator in labelled else o.estimator
            labelled.add(o.estimator)
            axes[0][col].plot([u for u, _, _ in o.evals], [s for _, _, s in o.evals], "o-", ms=3, alpha=0.8,
                              color=colours[o.estimator], label=label)
            axes[1][col].plot(range(1, len(o.train) + 1), o.train, "-", lw=1, alpha=0.7,
                              color=colours[o.estimator], label=label)
        for t in THRESHOLDS:
            axes[0][col].axhline(t, color="grey", lw=0.5, ls="--")
        axes[0][col].set_title(env_id)
        axes[0][col].set_ylabel(f"held-out success ({evaluation})")
        axes[1][col].set_ylabel("training batch success (sampled)")
        for ax in axes[:, col]:
            ax.set_xlabel("update")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def finish(data: dict[str, object], console: Console, args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps(data))
        return
    print_table(data, console)
    if args.plot:
        console.print(f"curves: {args.plot}")
