"""Credit quality: does an estimator's turn advantage point the way the env's solver does?

    python bench/credit_quality.py runs/keydoor-gigpo                 # a run's directory, the default estimators
    python bench/credit_quality.py runs/keydoor-gigpo --estimators "grpo,gigpo;gigpo:omega=0.5,gamma=0.8"
    python bench/credit_quality.py postgresql://.../runs --run keydoor-gigpo --json   # a shared store

Reads the training batches of a run from its store (the groups each update trained on, as the store's
credit records say; `--include-dropped` adds the groups curation dropped, scored on the recomputed estimators), recomputes the estimators' advantages on exactly those batches, and scores them
against an oracle: replaying each episode in the env, a turn is *good* when its action is one of the
solver's moves from that state (for the grid envs, Maze-v0 and KeyDoor-v0: a move that lowers the
breadth-first distance to the goal; an env with only `solver_action()` is scored against that one move)
and *bad* otherwise (invalid actions included). A learning-free question, asked in seconds: whichever
estimator a user picks, the update pushes up the turns with a positive advantage and down the others, so
an estimator whose advantages separate good from bad turns better hands the trainer a better gradient.

Printed per estimator, over every trained group of every update:

- `auc`: within each group (one task), the probability that a random good turn has a higher advantage
  than a random bad turn (ties count half), pooled over groups weighted by their good x bad pairs. 0.5
  is no information; trajectory-level estimators (GRPO, RLOO) can only get there through the outcome.
- `state_auc`: the same within each anchor state of a group (one task, one state fingerprint): whether
  the advantage prefers the solver's move over another move *taken from the same state*, the comparison
  GiGPO's step part is built for.
- `state_sep`: the same question in the advantage's own units: within each such state the mean advantage
  of its good turns minus that of its bad ones (weighted by the state's good x bad pairs over its turns),
  divided by the std of all advantages. A policy gradient at a state moves the policy by the advantage
  differences among the actions taken there, relative to the advantages' overall spread (the optimiser
  normalises the rest), so this is the signal-to-noise ratio of the update's direction.
- `right_mass`: the share of the advantage mass sum |A| that pushes the right way (A > 0 on good turns,
  A < 0 on bad ones).
- `good_mean` / `bad_mean`: mean advantage of good and of bad turns; `adv_std`: the std of all advantages.

Per-turn figures can overstate what reaches the weights: turns that saw one prompt and took one action share
one gradient of log pi, so the update moves that (prompt, action) by the sum of their advantages, each weighted
as the run's loss aggregation weighs its tokens (`seq-mean-token-mean`: an episode's tokens share one unit). Two
figures score these sums (prompt: the current observation where the run kept no earlier turns, `keep_turns: 0`,
else the observations and actions of the kept turns before it):

- `grad_right`: the share of sum |S| over (prompt, action) pairs that pushes the right way.
- `grad_push`: sum S x (+1 good, -1 bad) / sum |S|, in [-1, 1]: the net direction of the update.

Pooling each state's returns by action, for example, raises `state_sep` but leaves these sums, hence the
update, nearly where they were (docs/credit-log.md).

`NAME:k=v,k=v` passes parameters (`gigpo:omega=0.5`); `gigpo.step` scores GiGPO's step part alone;
`trained` scores the advantages the run itself stored. Also printed: the share of good turns and the
share of turns in a GiGPO anchor cluster whose turns took more than one distinct action (where a step
comparison has something to compare).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import agentgym  # noqa: E402
from agentgym import Episode, TrajectoryStore  # noqa: E402
from agentgym.credit import ESTIMATORS, compute_credit  # noqa: E402
from agentgym.errors import ConfigError  # noqa: E402
from bench.estimator_specs import parse_spec, split_specs  # noqa: E402

DEFAULT = "trained,grpo,rloo,gigpo,gigpo.step"
FIGURES = ("auc", "state_auc", "state_sep", "right_mass", "grad_right", "grad_push", "good_mean", "bad_mean", "adv_std")


@dataclass
class Batch:
    """The groups trained from one policy version (one update's batch): episodes and each turn's oracle label."""

    version: int
    episodes: list[Episode]
    good: np.ndarray  #: [T] bool, flat in episode order
    trained_adv: np.ndarray  #: [T] the advantages the run stored (nan where none)
    pair: np.ndarray  #: [T] int code of (prompt, action, oracle label): turns whose gradients are one
    weight: np.ndarray  #: [T] each turn's weight in the loss (its action tokens, as the run aggregates them)


def parse_estimator(spec: str) -> tuple[str, str, dict[str, Any]]:
    """'gigpo:omega=0.5,gamma=0.8' -> (label, name, params); values parsed as YAML scalars."""
    name, params = parse_spec(spec)
    base = name.split(".")[0]
    if base != "trained" and base not in ESTIMATORS:
        raise ConfigError(f"unknown estimator {base!r} in --estimators; known: trained, {', '.join(sorted(ESTIMATORS))}")
    return spec, name, params


def oracle_labels(env: Any, episode: Episode) -> list[bool]:
    """Replay `episode` in `env`; per turn, whether its action is one of the solver's moves from that state
    (`optimal_moves()` where the env has it, else its one `solver_action()`, compared as text)."""
    inner = getattr(env, "unwrapped", env)
    optimal = getattr(inner, "optimal_moves", None)
    if optimal is None and not getattr(inner, "has_solver", False):
        raise ConfigError(f"{episode.env_id} has no solver (neither optimal_moves() nor solver_action()): "
                          "the oracle needs one")
    env.reset(options={"task_id": episode.task_id})
    labels = []
    for turn in episode.turns:
        fingerprint = inner.state_fingerprint()
        if turn.state_fingerprint and fingerprint != turn.state_fingerprint:
            raise ConfigError(f"episode {episode.id} turn {turn.index}: the replay is at {fingerprint!r} but the "
                              f"stored turn was taken at {turn.state_fingerprint!r}; the env (or its kwargs) is not "
                              "the one the run used, or it is not deterministic given its task id")
        try:
            good = optimal() if optimal is not None else [str(inner.solver_action()).strip()]
        except RuntimeError:  # the solver has no move from here (a dead end): nothing the turn did was good
            good = []
        taken = turn.info.get("move") if optimal is not None else turn.action_text.strip()
        labels.append(turn.valid and taken is not None and taken in good)
        env.step(turn.action_text)
    return labels


def prompt_pairs(episodes: list[Episode], good: np.ndarray, keep_turns: int | None) -> np.ndarray:
    """[T] a code per turn, equal for turns that saw one prompt (the last `keep_turns` turns' observations and
    actions, then the current observation; None: the whole history), sampled one action (its token ids; its text
    where none are stored) and got one oracle label."""
    codes: dict[tuple[Any, ...], int] = {}
    out, row = [], 0
    for ep in episodes:
        history: list[str] = []
        for t in ep.turns:
            kept = history if keep_turns is None else history[max(0, len(history) - 2 * keep_turns):]
            action = tuple(t.action_ids) or " ".join(t.action_text.split())  # the sampled tokens where stored
            key = (*kept, t.observation, action, bool(good[row]))
            out.append(codes.setdefault(key, len(codes)))
            history += [t.observation, t.action_text]
            row += 1
    return np.array(out, dtype=np.int64)


def loss_weights(episodes: list[Episode], aggregation: str) -> np.ndarray:
    """[T] each turn's weight in the loss: its action tokens, divided by its episode's where the loss averages
    per episode first (`seq-mean-token-mean`); the other modes weigh every token alike within a batch."""
    tokens = [np.array([max(1, len(t.action_ids)) for t in ep.turns], dtype=float) for ep in episodes]
    if aggregation == "seq-mean-token-mean":
        tokens = [w / w.sum() for w in tokens]
    return np.concatenate(tokens) if tokens else np.zeros(0)


def gradient_sums(adv: np.ndarray, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """(S per (prompt, action) pair, the pair's oracle label): what the update does with `adv`."""
    ok = ~np.isnan(adv)
    n = int(batch.pair.max()) + 1 if len(batch.pair) else 0
    sums = np.bincount(batch.pair[ok], weights=(batch.weight * adv)[ok], minlength=n)
    label = np.zeros(n, dtype=bool)
    label[batch.pair] = batch.good
    return sums, label


def load_batches(store: TrajectoryStore, run: dict[str, Any], include_dropped: bool) -> list[Batch]:
    cfg = run.get("config") or {}
    env = agentgym.make(cfg["env_id"], **(cfg.get("env_kwargs") or {}))
    episodes = store.episodes(run_id=run["id"])
    credit = store.credit([ep.id for ep in episodes])
    by_version: dict[int, list[Episode]] = defaultdict(list)
    for ep in episodes:
        records = credit.get(ep.id) or []
        if not records:
            continue  # evaluation or warm-start episodes: nothing trained on them
        version = records[0].get("policy_version")
        version = records[0].get("update") if version is None else version
        if version is None or (all(r.get("dropped") for r in records) and not include_dropped):
            continue
        by_version[int(version)].append(ep)
    batches = []
    for version in sorted(by_version):
        eps = sorted(by_version[version], key=lambda e: (e.group_id, e.id))
        good = np.array([g for ep in eps for g in oracle_labels(env, ep)], dtype=bool)
        trained = []
        for ep in eps:
            stored = {r["index"]: r.get("advantage") for r in credit.get(ep.id, [])}
            trained += [np.nan if stored.get(t.index) is None else float(stored[t.index]) for t in ep.turns]
        batches.append(Batch(version, eps, good, np.array(trained, dtype=float),
                             prompt_pairs(eps, good, cfg.get("keep_turns")),
                             loss_weights(eps, cfg.get("aggregation", "token-mean"))))
    env.close()
    return batches


def group_auc(adv: np.ndarray, good: np.ndarray, groups: np.ndarray) -> tuple[float, float]:
    """Within-group Mann-Whitney AUC of `adv` for good vs bad turns, summed as (auc x pairs, pairs)."""
    total, pairs = 0.0, 0.0
    for g in np.unique(groups):
        rows = groups == g
        a, y = adv[rows], good[rows]
        n_good, n_bad = int(y.sum()), int((~y).sum())
        if not n_good or not n_bad or np.isnan(a).any():
            continue
        _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        ranks = (first + (counts + 1) / 2.0)[inverse]  # average ranks, 1-based
        auc = (ranks[y].sum() - n_good * (n_good + 1) / 2.0) / (n_good * n_bad)
        total += auc * n_good * n_bad
        pairs += n_good * n_bad
    return total, pairs


def state_gap(adv: np.ndarray, good: np.ndarray, states: np.ndarray) -> tuple[float, float]:
    """Within each state holding good and bad turns, mean A(good) - mean A(bad), weighted by n_good n_bad /
    n (the pairs' effective size); returned as (weighted sum, weight)."""
    total, weight = 0.0, 0.0
    for s in np.unique(states):
        rows = states == s
        a, y = adv[rows], good[rows]
        n_good, n_bad = int(y.sum()), int((~y).sum())
        if n_good and n_bad and not np.isnan(a).any():
            w = n_good * n_bad / (n_good + n_bad)
            total += w * (a[y].mean() - a[~y].mean())
            weight += w
    return total, weight


def advantages_of(name: str, params: dict[str, Any], batch: Batch) -> np.ndarray:
    if name == "trained":
        return batch.trained_adv
    result = compute_credit(name.split(".")[0], batch.episodes, **params)
    adv = result.step_part if name.endswith(".step") else result.advantages
    if adv is None:
        raise ConfigError(f"{name.split('.')[0]} has no step part to score")
    return adv


def score(name: str, params: dict[str, Any], batches: list[Batch]) -> dict[str, Any]:
    """The figures of the module docstring for one estimator over `batches`."""
    sums = defaultdict(float)
    per_update, every = [], []
    for batch in batches:
        adv = advantages_of(name, params, batch)
        sizes = [ep.num_turns for ep in batch.episodes]
        groups = np.unique(np.repeat([ep.group_id for ep in batch.episodes], sizes), return_inverse=True)[1]
        states = np.unique([f"{ep.group_id}|{t.state_fingerprint}" for ep in batch.episodes for t in ep.turns],
                           return_inverse=True)[1]
        for key, (total, weight) in (("auc", group_auc(adv, batch.good, groups)),
                                     ("state_auc", group_auc(adv, batch.good, states)),
                                     ("state_gap", state_gap(adv, batch.good, states))):
            sums[key] += total
            sums[f"{key}_w"] += weight
            if key == "auc":
                per_update.append(round(total / weight, 4) if weight else None)
        ok = ~np.isnan(adv)
        a, y = adv[ok], batch.good[ok]
        sums["right"] += float(np.abs(a)[(y & (a > 0)) | (~y & (a < 0))].sum())
        sums["mass"] += float(np.abs(a).sum())
        pushes, label = gradient_sums(adv, batch)
        signed = np.where(label, pushes, -pushes)  # > 0: the pair is pushed the right way
        sums["grad_right"] += float(signed[signed > 0].sum())
        sums["grad_push"] += float(signed.sum())
        sums["grad_mass"] += float(np.abs(signed).sum())
        every.append((a, y))
    a = np.concatenate([a for a, _ in every])
    y = np.concatenate([y for _, y in every])
    std = float(a.std()) if len(a) else 0.0

    def ratio(key: str) -> float | None:
        return sums[key] / sums[f"{key}_w"] if sums[f"{key}_w"] else None

    gap = ratio("state_gap")
    return {"auc": ratio("auc"), "state_auc": ratio("state_auc"),
            "state_sep": gap / std if gap is not None and std > 0 else None,
            "right_mass": sums["right"] / sums["mass"] if sums["mass"] else None,
            "grad_right": sums["grad_right"] / sums["grad_mass"] if sums["grad_mass"] else None,
            "grad_push": sums["grad_push"] / sums["grad_mass"] if sums["grad_mass"] else None,
            "good_mean": float(a[y].mean()) if y.any() else None, "bad_mean": float(a[~y].mean()) if (~y).any() else None,
            "adv_std": std, "auc_per_update": per_update}


def mixed_action_share(batches: list[Batch]) -> float:
    """Share of turns whose (group, state) cluster holds more than one distinct action."""
    mixed, total = 0, 0
    for batch in batches:
        actions: dict[tuple[str, str], set[str]] = defaultdict(set)
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for ep in batch.episodes:
            for t in ep.turns:
                key = (ep.group_id, t.state_fingerprint)
                actions[key].add(t.info.get("move") or t.action_text.strip())
                counts[key] += 1
        mixed += sum(n for key, n in counts.items() if len(actions[key]) > 1)
        total += sum(counts.values())
    return mixed / total if total else 0.0


def open_store(where: str) -> tuple[TrajectoryStore, str | None]:
    """A run directory (its run_config.json names the store and the run), a store file or a store URL."""
    path = Path(where)
    if path.is_dir():
        config = path / "run_config.json"
        if not config.is_file():
            raise ConfigError(f"{where} is a directory without run_config.json: give a training run's directory "
                              "(OUTPUT_DIR/NAME), its store file or its store URL")
        cfg = json.loads(config.read_text())
        return TrajectoryStore(cfg.get("store") or str(path / "episodes.db")), cfg.get("name")
    if "://" not in where and not path.is_file():
        raise ConfigError(f"no store at {where}: give a training run's directory, its store file or its store URL")
    return TrajectoryStore(where), None


def pick_run(store: TrajectoryStore, wanted: str | None) -> dict[str, Any]:
    runs = [r for r in store.runs() if (r.get("config") or {}).get("estimator")]
    if wanted:
        runs = [r for r in runs if r["id"] == wanted]
    if len(runs) != 1:
        names = ", ".join(r["id"] for r in store.runs()) or "none"
        raise ConfigError(f"pick one training run with --run (runs in this store: {names})")
    return runs[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store", help="a training run's directory, or a store (a file path or an SQLAlchemy URL)")
    parser.add_argument("--run", default=None, help="the training run's id, where the store holds several")
    parser.add_argument("--estimators", default=DEFAULT, help=f"comma list of NAME[:k=v,...] (default {DEFAULT}); "
                        "separate parameterised entries with ';'")
    parser.add_argument("--include-dropped", action="store_true", help="score the groups curation dropped too")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        specs = [parse_estimator(s) for s in split_specs(args.estimators)]
        store, run_name = open_store(args.store)
        run = pick_run(store, args.run or run_name)
        batches = load_batches(store, run, args.include_dropped)
        if not batches:
            raise ConfigError(f"run {run['run_id']} has no trained batch in this store (no credit records)")
        params_of_run = (run.get("config") or {}).get("estimator_params") or {}
        rows = {}
        for label, name, params in specs:
            base = name.split(".")[0]
            if base == run["config"].get("estimator") and not params:
                params = dict(params_of_run)
            rows[label] = score(name, params, batches)
    except ConfigError as exc:
        parser.error(str(exc))
    n_turns = sum(len(b.good) for b in batches)
    summary = {"run": run["id"], "env": run["config"]["env_id"], "updates": len(batches),
               "episodes": sum(len(b.episodes) for b in batches), "turns": n_turns,
               "good_share": float(np.mean(np.concatenate([b.good for b in batches]))),
               "mixed_action_share": mixed_action_share(batches), "estimators": rows}
    if args.json:
        print(json.dumps(summary))
        return
    table = Table(title=f"credit quality: {summary['run']} ({summary['env']}), {summary['updates']} updates, "
                        f"{summary['episodes']} episodes, {n_turns} turns; good turns "
                        f"{summary['good_share']:.0%}, turns at mixed-action states {summary['mixed_action_share']:.0%}")
    for col in ("estimator", *FIGURES):
        table.add_column(col, justify="left" if col == "estimator" else "right")
    for label, row in rows.items():
        table.add_row(label, *(("-" if row[k] is None else f"{row[k]:.3f}") for k in
                               FIGURES))
    Console(width=None if sys.stdout.isatty() else 160).print(table)


if __name__ == "__main__":
    main()
