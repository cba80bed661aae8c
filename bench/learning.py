"""Learning benchmark: every credit-assignment estimator on Maze-v0 and KeyDoor-v0, equal update budgets.

    python bench/learning.py                                         # every estimator, both envs, 5 seeds, all cores
    python bench/learning.py --estimators grpo,gigpo --envs KeyDoor-v0 --seeds 2 --updates 30
    python bench/learning.py --estimators "grpo,gigpo,gigpo:gamma=0.8"     # a variant beside its recipe
    python bench/learning.py --json                                  # one JSON object (shape below)
    python bench/learning.py --updates 1 --seeds 1 --estimators grpo --set sft_steps=2 --json   # smoke scale
    python bench/learning.py --env-steps 60000 --estimators grpo,gigpo --envs KeyDoor-v0   # equal env steps
    python bench/learning.py --wall-s 900 --jobs 2 --torch-threads 1 --estimators grpo,gigpo  # equal wall time
    python bench/learning.py --jobs 8 --json                         # 8 runs at once, whatever the cores
    python bench/learning.py --merge a.json b.json                   # one table (and PNG) from shards' --json
    python bench/learning.py --merge a.json b.json --read-every 2    # a shard evaluated every update, read every 2

Every run is the real training loop on the estimator's own recipe (configs/<estimator>.yaml: the shared CPU
recipe plus the estimator's parameters) with the env section of the benchmark env (configs/envs/
maze-open.yaml, configs/keydoor.yaml, which also gives KeyDoor-v0's level, prompt window, warm start and
learning rate). The budget is the same for every estimator: a number of updates (`--updates`, default 40), of env
steps (`--env-steps N`: each run stops once it has collected N turns, so an estimator whose episodes end sooner
gets more updates) or of training seconds (`--wall-s S`); dynamic sampling is off (`drop_zero_variance:
false`) so that every update consumes the same groups_per_batch x group_size episodes whatever the
estimator, and every run is evaluated after its last update, so its final figure is the policy its budget
ends with. `--time-limit` is a guard only: the table's "stopped by" column counts the runs it cut. No
estimator is tuned per seed: each runs with its docs/algorithms.md defaults and its recipe's settings. The
SFT warm start is done once per env and seed and shared by every estimator of that seed: the same policy,
bit for bit, that a run's own warm start leaves, so estimators are compared from one starting point (a
paired comparison) and the warm start, which on KeyDoor-v0's medium level costs about ten updates, is paid
once per seed; with `--jobs`, a seed's runs start as soon as its warm start is done, beside the other seeds'
warm starts. `--fresh-warm-starts` gives each run its own; a `--runs-dir` that already holds the warm start
of a key (from an earlier benchmark) lends it again, and a run that finished there under the same config is
not run again (a killed benchmark, started again with the same arguments, goes on where it stopped; one with
more seeds or estimators runs only what is new). An estimator may carry parameters over its recipe's
(`gigpo:gamma=0.8`): the spec is its label in the table and the JSON, so variants of one estimator are
compared from the same warm starts on the same tasks.

Measured per run, on held-out tasks (the env's eval split, greedy unless `--eval-temperature T --eval-samples N`
ask for N episodes per task sampled at T, every `--eval-every` updates and of
the warm start itself, as update 0): the starting success, updates and env steps (turns collected) until
held-out success first reaches 0.5 and 0.8, the final held-out success (last evaluation) and whether the
run collapsed (final success below its best by more than 0.2). The table gives means over seeds with a
95% interval (t distribution) for the final success, and a paired figure that needs fewer seeds: since
every estimator of a seed starts from the same warm start and trains on the same tasks in the same
order, the mean over the last half of the updates of its batch success minus GRPO's on the same batches
(a 32-task evaluation alone is about +-0.15), and per seed whether it reached 0.8 held-out before, with or
after GRPO (ahead/level/behind: what "fewer updates in at least 4 of 5 seeds" is read from). The PNG
draws every run's held-out curve; `--json` prints exactly

    {"envs": {ENV_ID: {ESTIMATOR: {"updates_to_0.5": [...], "updates_to_0.8": [...],
                                   "final_success": [...], "collapsed": [...],
                                   "start_success": [...],
                                   "env_steps_to_0.5": [...], "env_steps_to_0.8": [...],
                                   "wall_s": [...], "stopped_by": [...], "seed": [...], "warm_start": [...],
                                   "curve": [[[update, env steps, success], ...], ...],
                                   "train_success": [[batch success of update 1, ...], ...]}}},
     "updates": N, "seeds": S, "budget": {"updates": N, "env_steps": M or null, "wall_s": T or null},
     "eval": {"temperature": T, "samples": N, "tasks": K, "every": U}, "commits": [COMMIT]}

with one list entry per seed (null where a threshold was never reached). `--jobs N` runs N runs at once,
each in a process of its own (give each `--torch-threads` so that N x threads fits the cores); left out, it is
the cores this process may use over `--torch-threads` (default 1: one run per core trains fastest on CPU), so
the bare command is the protocol the docs report: 40 updates, an evaluation every 2, every core busy. Shards of
the protocol (`--first-seed`, `--estimators`, `--envs`) run on different machines combine with `--merge`
(refused where budgets or held-out evaluations differ: temperature, samples, tasks, spacing),
which reads their JSON objects and prints the one table (bench/learning_report.py: the outcomes, JSON,
table, PNG and merging); `commits` names the code (`git describe --dirty`) and a merge lists every shard's.
`machine` names the CPU and torch build, and each run's `warm_start` the digest of the weights its RL started
from (`weights_digest`): one seed's warm start differs between machines, so a merge pairs an estimator's run with
the baseline's of the same seed and the same digest (by machine where a shard has no digests, as those written
before 2026-12-07), and refuses a seed that two shards of one machine both ran.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from agentgym.config import load_train_config, parse_overrides  # noqa: E402
from agentgym.errors import ConfigError  # noqa: E402
from bench.estimator_specs import parse_spec, split_specs  # noqa: E402
from bench.learning_report import (  # noqa: E402
    ESTIMATORS,
    RunOutcome,
    as_json,
    checkout_commit,
    describe_eval,
    finish,
    merge,
    outcomes_of,
    plot,
    thresholds_reached,
    weights_digest,
)

#: env id -> the recipe file whose env keys (ENV_KEYS: env section, prompt window, warm start, learning rate) the
#: benchmark uses
ENV_SECTIONS = {"Maze-v0": ROOT / "configs" / "envs" / "maze-open.yaml", "KeyDoor-v0": ROOT / "configs" / "keydoor.yaml"}
ENV_KEYS = ("env", "env_kwargs", "max_turns", "keep_turns", "sft_steps", "sft_episodes", "sft_batch_episodes", "lr")
UPDATE_CAP = 100_000  #: the updates of a run whose budget is env steps or wall time
#: the equal budget. At 24 (the default until 2026-12-07) the recipe's KeyDoor-v0 seeds whose warm start was below
#: 0.5 reached 0.8 held-out with neither estimator (5 of 10 seeds in two benchmarks), so the race measured nothing
#: there; within 40 GiGPO reached it on all five seeds of one benchmark (docs/credit-log.md, "Forty updates")
DEFAULT_UPDATES = 40
#: the settings of a warm start stopped at a target (`sft_target_success`); none of them counts without one
TARGET_KEYS = ("sft_target_success", "sft_check_every", "sft_check_tasks")
#: config keys a warm start depends on besides the sft_*, tiny_*, lora_* and context* families
WARM_START_KEYS = ("model", "dtype", "device", "env", "env_kwargs", "max_turns", "seed", "chat_tools",
                   "system_prompt", "micro_batch_tokens", "max_new_tokens", "strategy")


def env_section(env_id: str) -> dict[str, object]:
    """The env keys (and warm start and learning rate, where the env's recipe sets them) the benchmark env's file
    sets: the same for every estimator."""
    cfg = load_train_config(ENV_SECTIONS[env_id])
    return {k: getattr(cfg, k) for k in ENV_KEYS if k in cfg.model_fields_set}


def run_name(env_id: str, estimator: str, seed: int) -> str:
    """The run's directory name; an estimator spec's parameters become part of it ('gigpo-gamma_0.8')."""
    return f"{env_id}-{re.sub(r'[^A-Za-z0-9._-]+', '_', estimator.replace(':', '-'))}-s{seed}"


def run_config(env_id: str, estimator: str, seed: int, args: argparse.Namespace, out: Path) -> Any:
    """The benchmark's config of one run (the estimator's recipe, the benchmark env's section, the budget);
    `estimator` is a spec, its parameters (`gigpo:gamma=0.8`) override the recipe's `estimator_params`."""
    name, params = parse_spec(estimator)
    overrides = {**env_section(env_id), "name": run_name(env_id, estimator, seed), "output_dir": str(out),
                 "seed": seed, "updates": args.updates, "drop_zero_variance": False, "eval_tasks": args.eval_tasks,
                 "eval_every": args.eval_every, "eval_at_start": True, "checkpoint_every": 0, "tensorboard": False,
                 "plot": False, "time_limit_s": args.time_limit, "max_env_steps": args.env_steps,
                 "torch_threads": args.torch_threads, "eval_temperature": args.eval_temperature,
                 "eval_samples": args.eval_samples, **args.overrides}
    cfg = load_train_config(ROOT / "configs" / f"{name}.yaml", overrides)
    if params:
        overrides["estimator_params"] = {**cfg.estimator_params, **params}
        cfg = load_train_config(ROOT / "configs" / f"{name}.yaml", overrides)
    return cfg


def warm_start_key(cfg: Any) -> str:
    """What a run's warm start depends on (its model, env, demonstrations, SFT settings, prompt layout, seed):
    runs with equal keys start RL from the same policy."""
    from agentgym.trainer.components import context_settings

    fields = {k: v for k, v in cfg.model_dump(mode="json").items()
              if k.startswith(("sft_", "tiny_", "lora_", "context", "train_tasks")) or k in WARM_START_KEYS}
    if cfg.sft_target_success is None:  # the checks' settings matter only with a target (kept keys stay valid)
        fields = {k: v for k, v in fields.items() if k not in TARGET_KEYS}
    text = json.dumps({**fields, **context_settings(cfg)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def warm_start_one(env_id: str, estimator: str, seed: int, args: argparse.Namespace, out: str) -> tuple[str, str, float]:
    """The shared warm start of `run_config(...)`'s key: (key, policy directory, wall seconds)."""
    from agentgym.trainer.sft import warm_start_only

    cfg = run_config(env_id, estimator, seed, args, Path(out))
    key = warm_start_key(cfg)
    cfg = cfg.model_copy(update={"name": f"{env_id}-warm-start-s{seed}-{key}"})
    kept = cfg.run_dir / "checkpoints" / "sft" / "policy"
    if (cfg.run_dir / "sft.json").is_file() and kept.is_dir():  # a --runs-dir of an earlier benchmark
        return key, str(kept), 0.0
    started = time.perf_counter()
    policy = warm_start_only(cfg)
    return key, str(policy), time.perf_counter() - started


def run_one(env_id: str, estimator: str, seed: int, args: argparse.Namespace, out: Path,
            console: Console, warm: dict[str, str] | None = None) -> RunOutcome:
    """One run; with `warm` (key -> policy directory), RL starts from the shared warm start of its key. A run
    of the same config that finished in this runs directory before (a killed or extended benchmark) is not
    run again: its kept outcome is returned."""
    from agentgym.trainer.train import train

    cfg = run_config(env_id, estimator, seed, args, out)
    if warm is not None and cfg.sft_steps:
        cfg = type(cfg).model_validate({**cfg.model_dump(), "model": warm[warm_start_key(cfg)], "sft_steps": 0,
                                        "sft_target_success": None})
    kept = kept_outcome(cfg)
    if kept is not None:
        console.print(f"[bold]{env_id} {estimator}[/] seed {seed}: kept from {cfg.run_dir / OUTCOME_FILE}")
        return kept
    if cfg.run_dir.exists():  # an unfinished run (a killed benchmark) or one of another config: started afresh
        console.print(f"[bold]{env_id} {estimator}[/] seed {seed}: replacing {cfg.run_dir} (unfinished or another config)")
        shutil.rmtree(cfg.run_dir)
    started = time.perf_counter()
    result = train(cfg, console=console)
    evals = [(int(r["update"]), int(r.get("env_steps", 0)), float(r["eval_success_rate"]))
             for r in result.rows if "eval_success_rate" in r]
    o = RunOutcome(env_id, estimator, seed, evals, time.perf_counter() - started, result.stopped_by,
                   train=[float(r["success_rate"]) for r in result.rows if "success_rate" in r],
                   warm_start=start_digest(cfg))
    thresholds_reached(o)
    keep_outcome(o, cfg)
    return o


def start_digest(cfg: Any) -> str | None:
    """`weights_digest` of the policy the run's RL started from: the shared warm start it was given (its
    `model`), or the warm start it did itself; None for RL from a model's initial weights (no SFT)."""
    for policy in (cfg.run_dir / "checkpoints" / "sft" / "policy", Path(str(cfg.model))):
        if policy.is_dir():
            try:
                return weights_digest(policy)
            except FileNotFoundError:  # a model directory without weights (a config): not a policy
                continue
    return None


OUTCOME_FILE = "bench_outcome.json"  #: a finished run's outcome and config, in its run directory


def _config_json(cfg: Any) -> dict[str, Any]:
    return json.loads(json.dumps(cfg.model_dump(mode="json"), sort_keys=True, default=str))


def keep_outcome(o: RunOutcome, cfg: Any) -> None:
    """Write `o` beside the run's store (atomically), with the config it ran under."""
    data = {"env": o.env, "estimator": o.estimator, "seed": o.seed, "evals": o.evals, "wall_s": o.wall_s,
            "stopped_by": o.stopped_by, "train": o.train, "warm_start": o.warm_start, "config": _config_json(cfg)}
    path = cfg.run_dir / OUTCOME_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def kept_outcome(cfg: Any) -> RunOutcome | None:
    """The outcome a finished run of exactly this config left in its run directory, else None."""
    try:
        data = json.loads((cfg.run_dir / OUTCOME_FILE).read_text())
    except (OSError, ValueError):
        return None
    if data.get("config") != _config_json(cfg):
        return None
    o = RunOutcome(data["env"], data["estimator"], data["seed"], [tuple(e) for e in data["evals"]],
                   data["wall_s"], data["stopped_by"], train=data["train"],
                   warm_start=data.get("warm_start") or start_digest(cfg))  # outcomes kept before 2026-12-07 name none
    thresholds_reached(o)
    return o


def die_with_parent(parent: int) -> None:
    """A `--jobs` worker ends when the benchmark's process does, however it ended (Linux's parent-death signal):
    a killed benchmark leaves no run writing into its runs directory."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the benchmark ended before the signal was armed
        os._exit(1)


def run_isolated(env_id: str, estimator: str, seed: int, args: argparse.Namespace, out: str,
                 warm: dict[str, str] | None) -> RunOutcome:
    """`run_one` in a worker process of `--jobs` (its console output goes to stderr, prefixed by the run)."""
    console = Console(stderr=True)
    return run_one(env_id, estimator, seed, args, Path(out), console, warm)


def warm_start_keys(plan: list[tuple[str, str, int]], args: argparse.Namespace, out: Path) -> dict[tuple, str | None]:
    """Per run of the plan, the key of the warm start it shares (None: no SFT, or `--fresh-warm-starts`)."""
    keys: dict[tuple, str | None] = {}
    for item in plan:
        cfg = run_config(*item, args, out)
        keys[item] = warm_start_key(cfg) if cfg.sft_steps and not args.fresh_warm_starts else None
    return keys


def run_all(plan: list[tuple[str, str, int]], args: argparse.Namespace, out: Path,
            console: Console) -> list[RunOutcome]:
    """Every (env, estimator, seed) of `plan`, one at a time or `args.jobs` at once; outcomes in plan order.
    One warm start per distinct key (every estimator of one env and seed, with the shared CPU recipe); a
    run starts as soon as its own warm start is done, so with `--jobs` the first seed's runs overlap the
    other seeds' warm starts."""
    keys = warm_start_keys(plan, args, out)
    firsts: dict[str, tuple[str, str, int]] = {}
    for item, key in keys.items():
        if key is not None:
            firsts.setdefault(key, item)
    if firsts:
        console.print(f"{len(firsts)} shared warm start(s) for {len(plan)} runs")
    if args.jobs <= 1:
        return _one_at_a_time(plan, keys, firsts, args, out, console)
    console.print(f"{len(plan)} runs, {args.jobs} at once ({args.torch_threads} torch thread(s) each)")
    return _pipelined(plan, keys, firsts, args, out, console)


def _report_warm_start(console: Console, done: tuple[str, str, float]) -> None:
    """One line per warm start: its wall time (or where it was kept), and with a target, where SFT stopped."""
    line = f"warm start {done[0]}: " + (f"{done[2]:.0f} s" if done[2] else f"kept from {done[1]}")
    stats = Path(done[1]).parents[2] / "sft.json"  # RUN/checkpoints/sft/policy -> RUN/sft.json
    sft = json.loads(stats.read_text()) if stats.is_file() else {}
    if sft.get("checks"):
        steps, rate = sft["checks"][-1]
        line += (f"; SFT {'reached' if sft['target_reached'] else 'ended below'} its target after {int(steps)} "
                 f"steps ({rate:.2f} on the check tasks)")
    console.print(line)


def _report_run(console: Console, o: RunOutcome) -> None:
    console.print(f"[bold]{o.env} {o.estimator}[/] seed {o.seed}: held-out {[round(s, 2) for _, _, s in o.evals]}, "
                  f"final {o.final:.2f}, {o.wall_s:.0f} s ({o.stopped_by})")


def _one_at_a_time(plan: list[tuple[str, str, int]], keys: dict[tuple, str | None], firsts: dict[str, tuple],
                   args: argparse.Namespace, out: Path, console: Console) -> list[RunOutcome]:
    warm: dict[str, str] = {}
    outcomes = []
    for item in plan:
        key = keys[item]
        if key is not None and key not in warm:
            done = warm_start_one(*firsts[key], args, str(out))
            warm[key] = done[1]
            _report_warm_start(console, done)
        console.print(f"[bold]{item[0]} {item[1]}[/] seed {item[2]}: {args.updates} updates ...")
        outcomes.append(run_one(*item, args, out, console, warm if key is not None else None))
        _report_run(console, outcomes[-1])
    return outcomes


class RunFailed(RuntimeError):
    """A warm start or run of the benchmark raised; the others were stopped."""


def _pipelined(plan: list[tuple[str, str, int]], keys: dict[tuple, str | None], firsts: dict[str, tuple],
               args: argparse.Namespace, out: Path, console: Console) -> list[RunOutcome]:
    """`args.jobs` fresh processes at once. A free worker takes a run whose warm start is done (in plan order,
    seed-major) before the next warm start, so the first seeds' outcomes come while later seeds warm up. The
    first job that raises stops the benchmark at once (queued work cancelled, running workers ended) with an
    error that names it; finished runs keep their outcomes in the runs directory."""
    spawn = multiprocessing.get_context("spawn")  # no forked torch state, each run a fresh process
    done: dict[tuple, RunOutcome] = {}
    pool = concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=spawn, max_tasks_per_child=1,
                                                  initializer=die_with_parent, initargs=(os.getpid(),))
    warm_starts = list(firsts.values())  #: not started yet, in plan order
    ready: list[tuple] = [item for item in plan if keys[item] is None]  #: runs whose warm start is done
    policies: dict[str, str] = {}
    pending: dict[concurrent.futures.Future, tuple] = {}

    def fill() -> None:
        while len(pending) < args.jobs and (ready or warm_starts):
            if ready:
                item = ready.pop(0)
                key = keys[item]
                warm = {key: policies[key]} if key is not None else None
                pending[pool.submit(run_isolated, *item, args, str(out), warm)] = ("run", item)
            else:
                item = warm_starts.pop(0)
                pending[pool.submit(warm_start_one, *item, args, str(out))] = ("warm start", item)

    try:
        fill()
        while pending:
            finished, _ = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                kind, item = pending.pop(future)
                try:
                    result = future.result()
                except Exception as exc:
                    raise RunFailed(f"the {kind} of {item[0]} {item[1]} seed {item[2]} failed: "
                                    f"{type(exc).__name__}: {exc}") from exc
                if kind == "warm start":
                    _report_warm_start(console, result)
                    policies[result[0]] = result[1]
                    ready.extend(i for i in plan if keys[i] == result[0])
                    ready.sort(key=plan.index)
                else:
                    done[item] = result
                    _report_run(console, result)
            fill()
    except BaseException:
        _stop_workers(pool)
        raise
    pool.shutdown()
    return [done[item] for item in plan]


def _stop_workers(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Cancel what is queued and end the running workers now (shutdown alone would wait for them)."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.join(timeout=30)


def auto_jobs(torch_threads: int, runs: int) -> int:
    """Runs at once when `--jobs` is left at 0: the cores this process may use, `torch_threads` to a run."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(runs, cores // torch_threads))


def parse_sets(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, object]:
    try:
        return parse_overrides(items)
    except ConfigError as exc:
        parser.error(str(exc))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--estimators", default=",".join(ESTIMATORS), help="comma-separated; an estimator with "
                        "parameters over its recipe's ends at ';': 'grpo,gigpo:gamma=0.8,omega=0.5;gigpo'")
    parser.add_argument("--envs", default=",".join(ENV_SECTIONS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed .. first-seed + seeds - 1")
    parser.add_argument("--jobs", type=int, default=0, help="runs at once, each in a process of its own (default 0: "
                        "as many as the cores this process may use hold --torch-threads each, at most the runs)")
    parser.add_argument("--runs-dir", default=None, help="keep every run's directory (metrics.jsonl, store) here "
                        "instead of a temporary directory")
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="print the table (and PNG) of shards' --json "
                        "outputs instead of running")
    parser.add_argument("--read-every", type=int, default=None, metavar="N", help="with --merge: read every shard "
                        "as if evaluated every N updates (a multiple of its spacing), so that shards evaluated "
                        "more often merge with the others")
    parser.add_argument("--updates", type=int, default=None, help="updates per run: the equal budget (default 40; "
                        "with --env-steps or --wall-s, a cap)")
    parser.add_argument("--env-steps", type=int, default=None, help="budget: every run stops once it has collected "
                        "this many env steps (turns)")
    parser.add_argument("--wall-s", type=float, default=None, help="budget: every run trains for this many seconds "
                        "(give each run the same cores: --jobs x --torch-threads <= cores)")
    parser.add_argument("--eval-every", type=int, default=2, help="held-out evaluation every N updates")
    parser.add_argument("--eval-tasks", type=int, default=64, help="held-out tasks per evaluation")
    parser.add_argument("--eval-temperature", type=float, default=0.0, help="held-out episodes sampled at this "
                        "temperature (0: greedy, the default; GiGPO's reference code validates at 0.4)")
    parser.add_argument("--eval-samples", type=int, default=1, help="episodes per held-out task (with "
                        "--eval-temperature > 0)")
    parser.add_argument("--time-limit", type=float, default=None, help="guard: seconds per run (reported if it cuts)")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch threads per run (one run per core "
                        "trains fastest on CPU: measured on 2 cores)")
    parser.add_argument("--plot", default="learning.png", help="PNG with every run's held-out curve")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a run config key for every run (YAML value), e.g. --set group_size=4")
    parser.add_argument("--fresh-warm-starts", action="store_true", help="every run does its own SFT warm start "
                        "(default: one per env and seed, shared by the estimators, which then start alike)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    stream = sys.stderr if args.json else sys.stdout
    console = Console(stderr=args.json, width=None if stream.isatty() else 200)  # a table piped to a file stays whole
    if args.read_every is not None and not args.merge:
        parser.error("--read-every reads shards given to --merge; a run evaluates every --eval-every updates")
    if args.merge:
        data = merge(args.merge, args.read_every)
        if args.plot:
            plot(outcomes_of(data), Path(args.plot), describe_eval(data))
        finish(data, console, args)
        return
    if args.jobs < 0 or args.seeds < 1 or args.torch_threads < 1:
        parser.error("--jobs must be >= 0 (0: one run per --torch-threads cores), --seeds and --torch-threads >= 1")
    args.overrides = parse_sets(parser, args.set)
    if args.wall_s is not None and args.time_limit is not None:
        parser.error("--wall-s is the runs' budget and --time-limit a guard on it: give one")
    if any(v is not None and v <= 0 for v in (args.updates, args.env_steps, args.wall_s)):
        parser.error("--updates, --env-steps and --wall-s must be > 0")
    if args.eval_temperature < 0 or args.eval_samples < 1:
        parser.error("--eval-temperature must be >= 0 and --eval-samples >= 1")
    if args.eval_samples > 1 and args.eval_temperature == 0:
        parser.error("--eval-samples > 1 needs --eval-temperature > 0 (e.g. 0.4): greedy episodes of one task repeat")
    if args.updates is None:
        args.updates = UPDATE_CAP if (args.env_steps or args.wall_s) else DEFAULT_UPDATES
    if args.wall_s is not None:
        args.time_limit = args.wall_s
    args.eval_every = min(args.eval_every, args.updates)
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    unknown = [e for e in envs if e not in ENV_SECTIONS]
    if unknown:
        parser.error(f"unknown benchmark env(s) {unknown}; choose from {sorted(ENV_SECTIONS)}")
    names = split_specs(args.estimators)
    for spec in names:  # a typo fails here, before any run, not after an hour of others
        try:
            name, _ = parse_spec(spec)
            if not (ROOT / "configs" / f"{name}.yaml").exists():
                parser.error(f"no recipe configs/{name}.yaml for estimator {name!r}; choose from {list(ESTIMATORS)}")
            for env_id in envs:  # the parameters, against the estimator registry
                run_config(env_id, spec, args.first_seed, args, Path(tempfile.gettempdir()))
        except ConfigError as exc:
            parser.error(f"--estimators {spec!r}: {exc}")
    if len(set(names)) < len(names):
        parser.error(f"--estimators names an estimator twice: {names}")
    # seed-major: the estimators of one seed run side by side, so a benchmark cut short leaves whole pairs
    plan = [(env_id, name, seed) for env_id in envs for seed in range(args.first_seed, args.first_seed + args.seeds)
            for name in names]
    if args.jobs == 0:
        args.jobs = auto_jobs(args.torch_threads, len(plan))
    args.commit = checkout_commit()  # the code as the runs start (a checkout edited meanwhile is not what ran)
    if args.runs_dir:
        Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
        outcomes = run_all(plan, args, Path(args.runs_dir), console)
    else:
        with tempfile.TemporaryDirectory(prefix="agentgym-learning-") as tmp:
            outcomes = run_all(plan, args, Path(tmp), console)
    data = as_json(outcomes, args)
    if args.plot:
        plot(outcomes, Path(args.plot), describe_eval(data))
    finish(data, console, args)


if __name__ == "__main__":
    main()
