"""Soak: a real async training run under seeded, logged faults, then an accounting that must lose nothing.

    python bench/soak.py --minutes 30 --json      # the full soak (one JSON object on stdout)
    python bench/soak.py --short --json           # the CI size (6 updates, 2 trainer kills)
    python bench/soak.py --short --policy served --json   # the policy behind a faulty `agentgym serve`
    python bench/soak.py --short --runtime ray --json     # on the Ray runtime, with actor kills (bench/soak_ray.py)

What runs: ``agentgym train`` as a subprocess (the tiny model, ``mode: async``, the in-process hf
backend, or with ``--policy served`` `agentgym serve` behind a fault proxy, bench/soak_policy.py) on
``soak_env:SoakMaze-v0`` (bench/soak_env.py), an env that is not thread-safe, so every instance runs in a worker process (`agentgym.runtime.ProcessEnv`). Faults, all seeded by ``--seed``
and appended (fsynced) to ``faults.jsonl`` before they act:

- ``worker_kill``: the env worker SIGKILLs itself mid-episode (``--kill-rate`` per step);
- ``step_hang``: an env step sleeps past the run's ``turn_timeout_s`` (``--hang-rate`` per step);
- ``disk_fill``: an env step fills its sandbox's workspace until the filesystem refuses (``--disk-rate`` per step;
  every env instance holds a real sandbox, bench/soak_workspace.py), so the step's own write fails: the episode
  must end as a ``sandbox_disk_full`` infra failure and the next one on that worker must run normally;
- ``trainer_kill``: the driver SIGKILLs the trainer twice, at seeded times, and resumes it with ``--resume``;
- ``store_disconnect``: with a PostgreSQL ``--store``, the driver terminates the run's store connections
  (``pg_terminate_backend``) every ``--pg-every-s`` seconds;
- ``policy_500`` / ``policy_drop`` / ``policy_stall`` (``--policy served``): the proxy answers a generation
  request with HTTP 500, drops its connection after the server answered, or stalls past the client's timeout;
  an isolated fault (``--policy-fault-rate``) must be absorbed by the client's retry, an outage
  (``--policy-outage-rate``: every request of the episode fails) must end the episode as an infra failure.

The accounting (keys of the JSON object) joins the env's start log and fault log with the store:
``episodes`` (by status/failure), ``faults_injected`` and ``infra_failures`` (by kind),
``faults_hit_stored_episodes`` (faults whose episode is in the store, by kind), ``fault_mismatches``
(a fault whose stored episode is not the matching infra failure, or an infra failure with no fault),
``lost`` (episodes that ended, so should be stored, but are not), ``in_flight_at_stop`` (started but
not stored because the trainer was SIGKILLed or stopped while they ran: by design never stored, the
data manager collects anew), ``duplicated``, ``infra_trained`` (infra-failed episodes in a trained
batch, from trained.jsonl and the stored turn_credit rows), ``updates`` (contiguous, none twice, per
resume the checkpoint it went back to), ``leaked`` (worker processes, temp files) and ``rss``
(per long-lived process: MB at the start of the measured window and at the end, growth %, slope MB/min),
``cost`` (the run's summed per-episode cost: env CPU s and peak MB of the env workers, wall s by stage, tokens);
served: ``policy_faults`` (isolated faults absorbed, outages that ended their episode) and ``weight_sync``
(the server ends with the last checkpoint's version and weights digest).
Counts only; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from soak_accounting import account  # noqa: E402
from soak_containers import ContainerKiller, container_settings, leaked_containers  # noqa: E402
from soak_env import append_record  # noqa: E402
from soak_policy import (  # noqa: E402
    PolicyFaultProxy,
    served_version,
    served_weights,
    start_policy_server,
    weight_sync_check,
)

ROOT = BENCH.parent
RUN_NAME = "soak"
SHORT_UPDATES = 6  #: updates of the short soak
TURN_TIMEOUT_S = 3.0  #: the run's turn limit: a hang (4x it) is caught fast
#: in env containers a plain reset once took past 3 s on a loaded 2-core machine (a resumed trainer starting and a
#: container's eight new env workers at once: an env_timeout no fault explained); the limit there leaves room
CONTAINER_TURN_TIMEOUT_S = 10.0
RSS_MIN_WINDOW_S = 60.0  #: a process measured from minute 5 must have lived this long past it
CACHE_DIRS = ("torchinductor_",)  #: TMPDIR entries that are caches by design (torch's compile cache), not leaks


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="training time over all trainer segments")
    parser.add_argument("--short", action="store_true", help=f"the CI size: {SHORT_UPDATES} updates of small "
                        "batches (counts, not minutes; about 3 minutes on an idle 2-core machine)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the fault plan and the trainer")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    parser.add_argument("--kill-rate", type=float, default=0.012, help="worker SIGKILL chance per env step")
    parser.add_argument("--hang-rate", type=float, default=0.006, help="hang-past-timeout chance per env step")
    parser.add_argument("--disk-rate", type=float, default=0.004, help="chance per env step that the step fills "
                        "its sandbox's disk (about 4%% of 10-turn episodes)")
    parser.add_argument("--turn-timeout-s", type=float, default=None,
                        help=f"the run's turn_timeout_s (default {TURN_TIMEOUT_S:g}; {CONTAINER_TURN_TIMEOUT_S:g} with "
                             "--envs containers)")
    parser.add_argument("--trainer-kills", type=int, default=2, help="SIGKILLs of the trainer (each resumed)")
    parser.add_argument("--store", default=None, help="store URL (default: SQLite in the run dir); "
                        "postgresql://... also injects store_disconnect faults")
    parser.add_argument("--pg-every-s", type=float, default=20.0, help="seconds between store disconnects")
    parser.add_argument("--workdir", default=None, help="where the run goes (default: a fresh temp dir)")
    parser.add_argument("--policy", choices=("inprocess", "served"), default="inprocess",
                        help="inprocess: the trainer's own hf backend; served: `agentgym serve` behind a proxy that "
                        "injects HTTP 500s, dropped connections and stalls (bench/soak_policy.py)")
    parser.add_argument("--policy-fault-rate", type=float, default=0.04,
                        help="served: chance per generation request of one fault the client's retry absorbs")
    parser.add_argument("--policy-outage-rate", type=float, default=0.005,
                        help="served: chance per generation request that every later request of its episode fails")
    parser.add_argument("--policy-timeout-s", type=float, default=10.0,
                        help="served: the client's timeout per request (backend_timeout_s); a stall lasts twice it")
    parser.add_argument("--policy-retries", type=int, default=2, help="served: the client's retries (backend_retries)")
    parser.add_argument("--weight-sync", choices=("save_reload", "process_group", "shared_memory"),
                        default="save_reload", help="served: how the trainer's weights reach the server")
    parser.add_argument("--runtime", choices=("local", "ray"), default="local",
                        help="ray: the run on the Ray runtime in a loopback-only namespace, with actor kills "
                        "(bench/soak_ray.py)")
    parser.add_argument("--actor-kills", type=int, default=2, help="ray: SIGKILLs of an env or rollout worker "
                        "actor's process (env and rollout workers in turn; Ray restarts them)")
    parser.add_argument("--rollout-workers", type=int, default=2, help="ray: rollout worker actors")
    parser.add_argument("--env-workers", type=int, default=1, help="ray: env worker actors")
    parser.add_argument("--envs", choices=("process", "containers"), default="process",
                        help="process: an env worker process per env; containers: env_cluster containers of the "
                        "agentgym/env image, one killed every --container-kill-every-s (bench/soak_containers.py)")
    parser.add_argument("--replicas", type=int, default=2, help="containers: env server replicas")
    parser.add_argument("--max-sessions", type=int, default=64, help="containers: sessions per replica (a step "
                        "that hangs past the turn timeout holds its session until the client's call timeout)")
    parser.add_argument("--container-kill-every-s", type=float, default=20.0,
                        help="containers: mean seconds between env container kills")
    args = parser.parse_args(argv)
    if args.turn_timeout_s is None:
        args.turn_timeout_s = CONTAINER_TURN_TIMEOUT_S if args.envs == "containers" else TURN_TIMEOUT_S
    if args.runtime == "ray" and args.policy != "inprocess":
        parser.error("--runtime ray runs the rollout workers' own policy replicas: leave out --policy served")
    if args.short and args.trainer_kills > SHORT_UPDATES - 2:
        parser.error(f"--short runs {SHORT_UPDATES} updates: at most {SHORT_UPDATES - 2} --trainer-kills")
    if args.minutes <= 0 or args.trainer_kills < 0:
        parser.error("--minutes must be > 0 and --trainer-kills >= 0")
    if not 0 <= args.kill_rate + args.hang_rate + args.disk_rate <= 1 or min(args.kill_rate, args.hang_rate,
                                                                              args.disk_rate) < 0:
        parser.error("--kill-rate, --hang-rate and --disk-rate are chances per step: each >= 0, their sum <= 1")
    if args.policy_retries < 1:
        parser.error("--policy-retries must be >= 1: the client's retry is what absorbs an isolated fault")
    return args


def write_config(args: argparse.Namespace, work: Path, backend_url: str | None = None) -> Path:
    small = args.short
    config = {
        "include": [str(ROOT / "configs/base/cpu-tiny.yaml")], "name": RUN_NAME, "output_dir": str(work / "runs"),
        "seed": args.seed, "env": "soak_env:SoakMaze-v0", "mode": "async",
        "updates": SHORT_UPDATES if small else 100000, "time_limit_s": None if small else args.minutes * 60,
        "env_kwargs": {"difficulty": "open", "max_turns": 10, "fault_log": str(work / "faults.jsonl"),
                       "start_log": str(work / "starts.jsonl"), "plan_seed": args.seed,
                       "kill_rate": args.kill_rate, "hang_rate": args.hang_rate, "hang_s": 4 * args.turn_timeout_s,
                       "disk_rate": args.disk_rate, "sandbox": True},
        "groups_per_batch": 2 if small else 4, "group_size": 4, "concurrency": 8 if small else 16,
        "sft_steps": 0, "eval_tasks": 0, "eval_every": 0, "checkpoint_every": 1, "keep_checkpoints": 2,
        "turn_timeout_s": args.turn_timeout_s, "drop_zero_variance": False, "stop_without_signal": None,
        "tensorboard": False, "plot": False, "log_episode_ids": True,
    }
    if args.store:
        config["store"] = args.store
    if args.envs == "containers":  # the same env, served from containers (its logs in a directory bound into each)
        cluster, env_kwargs = container_settings(work, args.replicas, args.max_sessions)
        config["env_cluster"] = cluster
        config["env_kwargs"].update(env_kwargs)
    if backend_url is not None:  # the served policy, through the fault proxy
        config.update(backend="openai", backend_url=f"{backend_url}/v1", backend_timeout_s=args.policy_timeout_s,
                      backend_retries=args.policy_retries, weight_sync=args.weight_sync)
    path = work / "soak.yaml"
    path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    return path


class RssSampler(threading.Thread):
    """Samples the RSS of the driver, the trainer and its env workers (``worker-PID``) every `every_s` seconds."""

    def __init__(self, every_s: float = 2.0):
        super().__init__(daemon=True)
        self.every_s, self.samples, self.trainer, self.segment = every_s, {}, None, 0
        self.others: dict[str, psutil.Process] = {}  #: other long-lived processes by name (the policy server)
        self.worker_pids: set[int] = set()
        self._halt = threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        while not self._halt.wait(self.every_s):
            self._sample("driver", me)
            for name, proc in list(self.others.items()):
                self._sample(name, proc)
            trainer = self.trainer
            if trainer is None:
                continue
            try:
                self._sample(f"trainer-{self.segment}", trainer)
                children = trainer.children()
            except psutil.Error:
                continue
            for child in children:
                self.worker_pids.add(child.pid)
                self._sample(f"worker-{child.pid}", child)

    def _sample(self, name: str, proc: psutil.Process) -> None:
        try:
            rss = proc.memory_info().rss
        except psutil.Error:
            return
        if rss:  # 0: a killed process not yet reaped (a zombie), not a measurement
            self.samples.setdefault(name, []).append((time.monotonic(), rss / 2**20))

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


class StoreDisconnector(threading.Thread):
    """Terminates the run's PostgreSQL connections every `every_s` seconds, logging each before it acts."""

    def __init__(self, url: str, fault_log: Path, every_s: float):
        super().__init__(daemon=True)
        import sqlalchemy as sa

        from agentgym.store import normalise_url

        self.engine = sa.create_engine(normalise_url(url))
        self.fault_log, self.every_s, self._halt = fault_log, every_s, threading.Event()

    def run(self) -> None:
        import sqlalchemy as sa

        query = sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
        while not self._halt.wait(self.every_s):
            append_record(str(self.fault_log), {"kind": "store_disconnect", "time": time.time()})
            try:
                with self.engine.begin() as conn:
                    conn.execute(query)
            except Exception as exc:  # the soak reports it; the run goes on
                append_record(str(self.fault_log), {"kind": "store_disconnect_failed", "error": str(exc)[:200],
                                                    "time": time.time()})

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)
        self.engine.dispose()


def checkpoint_update(run_dir: Path) -> int:
    latest = run_dir / "checkpoints" / "latest"
    return int(latest.read_text().strip().rsplit("-", 1)[1]) if latest.exists() else 0


def logged_updates(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [int(json.loads(line)["update"]) for line in path.read_text().splitlines() if line.strip()]


def kill_plan(args: argparse.Namespace) -> list[dict[str, float]]:
    """When to SIGKILL the trainer, seeded: the full soak at random times between 20% and 80% of its minutes;
    the short one (a fixed number of updates, so counts do not depend on the machine's load) a random 0-3 s
    after it has checkpointed a random update. Every kill also waits for a checkpoint newer than the resume."""
    rng = random.Random(args.seed)
    if args.short:
        kill_updates = sorted(rng.sample(range(1, SHORT_UPDATES - 1), args.trainer_kills))
        return [{"after_update": u, "delay_s": rng.uniform(0, 3), "after_s": 0.0} for u in kill_updates]
    times = sorted(rng.uniform(0.2, 0.8) * args.minutes * 60 for _ in range(args.trainer_kills))
    return [{"after_update": 0, "delay_s": 0.0, "after_s": t} for t in times]


def run_segments(args: argparse.Namespace, work: Path, config: Path, sampler: RssSampler,
                 served: tuple[PolicyFaultProxy, str] | None = None) -> dict[str, Any]:
    """Run the trainer to its end, SIGKILLing it by the seeded plan and resuming it with ``--resume`` (noting, with
    a served policy, the version the server had when the resume began)."""
    plan = kill_plan(args)
    run_dir = work / "runs" / RUN_NAME
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")]),
           "TMPDIR": str(work / "tmp"), "AGENTGYM_SOAK_TAG": work.name}
    began, segments, resumes = time.monotonic(), [], []
    for segment in range(len(plan) + 1):
        cmd = [sys.executable, "-m", "agentgym", "train", str(config)]
        if segment:
            resumes.append({"checkpoint_update": checkpoint_update(run_dir), "logged_before_kill": max(
                logged_updates(run_dir), default=0)})
            if served is not None:
                resumes[-1]["served_version_at_resume"] = served_version(served[1])
            cmd.append("--resume")
        with (work / f"trainer-{segment}.log").open("w") as log:
            proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    preexec_fn=_die_with_parent)
            sampler.trainer, sampler.segment = psutil.Process(proc.pid), segment
            kill = plan[segment] if segment < len(plan) else None
            # served: the first kill aims between a weight push and its checkpoint, so the resume sends the server
            # a lower version than it serves
            aim = served if segment == 0 and served is not None else None
            code = wait_or_kill(proc, kill, began, work / "faults.jsonl", segment, run_dir, aim)
        sampler.trainer = None
        segments.append({"segment": segment, "pid": proc.pid, "exit": code, "ended": time.time()})
        check_segment_exit("trainer", segment, kill, code, work)
    return {"segments": segments, "resumes": resumes, "kill_plan": plan}


def check_segment_exit(what: str, segment: int, kill: dict[str, float] | None, code: int, work: Path) -> None:
    """A segment must end as planned: exit 0 without a planned kill, killed (a signal) with one."""
    if kill is None and code != 0:
        problem = f"exited with {code}"
    elif kill is not None and code >= 0:
        problem = f"ended (exit {code}) before its planned kill {kill}"
    else:
        return
    log = work / f"trainer-{segment}.log"
    raise RuntimeError(f"{what} segment {segment} {problem}; see {log}, which ends:\n{log_tail(log)}")


def log_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a segment's log (the failure's cause, where a test shows only the error)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(unreadable: {exc})"


_LIBC = ctypes.CDLL(None)  #: loaded here: the child between fork and exec only calls into it


def _die_with_parent() -> None:
    """In the trainer's child process: SIGKILL it when the driver dies (a killed soak leaves no trainer behind)."""
    _LIBC.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG (Linux)


def wait_or_kill(proc: subprocess.Popen, kill: dict[str, float] | None, began: float, fault_log: Path,
                 segment: int, run_dir: Path, aim: tuple[PolicyFaultProxy, str] | None = None) -> int:
    """Wait for the trainer; with a planned `kill`, SIGKILL it (logged first) once the plan's time has passed
    and it has checkpointed the plan's update and one of its own (so every resume has progress to lose).

    With `aim` (the policy proxy and the server's URL), kill it instead while the server serves weights newer than
    the last checkpoint: the proxy holds the answer to the trainer's next weight push (`hold_next_load`), so the
    trainer cannot checkpoint that update, and the resume must send the server a lower version."""
    if kill is None:
        return proc.wait(timeout=None)
    first, due, window, held = checkpoint_update(run_dir), None, None, None
    while proc.poll() is None:
        ready = checkpoint_update(run_dir) >= max(kill["after_update"], first + 1)
        if due is None and ready and time.monotonic() - began >= kill["after_s"]:
            if aim is None:
                due = time.monotonic() + kill["delay_s"]
            elif held is None:
                held = aim[0].hold_next_load()
        if held is not None and due is None and held.is_set():
            due, window = time.monotonic(), {"served_version": served_version(aim[1]),
                                             "checkpoint_update": checkpoint_update(run_dir)}
        if due is not None and time.monotonic() >= due:
            append_record(str(fault_log), {"kind": "trainer_kill", "pid": proc.pid, "segment": segment,
                                           "between_push_and_checkpoint": window, "time": time.time()})
            proc.send_signal(signal.SIGKILL)
            return proc.wait()
        time.sleep(0.2)
    return proc.returncode


def leaked(work: Path, worker_pids: set[int], shm_before: set[str]) -> dict[str, Any]:
    """Processes of this run still alive (tagged by environment or seen as workers), files left in its TMPDIR, and
    shared-memory segments in /dev/shm that were not there before the run (weight_sync: shared_memory)."""
    time.sleep(2.0)  # let the kernel deliver the workers' parent-death signals
    alive = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            tagged = proc.environ().get("AGENTGYM_SOAK_TAG") == work.name
        except psutil.Error:
            tagged = False
        if tagged or (proc.pid in worker_pids and "agentgym.runtime.worker" in " ".join(proc.info["cmdline"] or [])):
            alive.append(proc.pid)
    tmp = work / "tmp"
    entries = sorted(p.name for p in tmp.iterdir()) if tmp.exists() else []
    caches = [name for name in entries if name.startswith(CACHE_DIRS)]  # kept on purpose, reused by the next run
    left = [name for name in entries if name not in caches]
    shm = sorted(shm_segments() - shm_before)  # another process's new segment would show here too: look at names
    return {"processes": len(alive), "process_ids": alive, "temp_entries": len(left), "temp_names": left[:20],
            "temp_caches": caches, "shm_segments": len(shm), "shm_names": shm[:20]}


def shm_segments() -> set[str]:
    """The Python shared-memory segments (``psm_*``, as `weight_sync: shared_memory` makes them) in /dev/shm now."""
    shm = Path("/dev/shm")
    return {p.name for p in shm.glob("psm_*")} if shm.is_dir() else set()


def rss_report(samples: dict[str, list[tuple[float, float]]], skip_s: float | None,
               min_life_s: float = 0.0) -> dict[str, Any]:
    """Per process that lived `min_life_s` or more: MB at the start of the measured window (`skip_s` into its life
    when it lived a minute past that, else a third of its life) and at its end, growth % and slope."""
    report = {}
    for name, series in samples.items():
        life = series[-1][0] - series[0][0] if series else 0.0
        if len(series) < 4 or life < min_life_s:
            continue
        start_t = series[0][0] + (skip_s if skip_s is not None and life >= skip_s + RSS_MIN_WINDOW_S else life / 3)
        window = [(t, mb) for t, mb in series if t >= start_t]
        ts, ms = [t for t, _ in window], [mb for _, mb in window]
        mean_t, mean_m = sum(ts) / len(ts), sum(ms) / len(ms)
        var = sum((t - mean_t) ** 2 for t in ts) or 1.0
        slope = sum((t - mean_t) * (m - mean_m) for t, m in zip(ts, ms, strict=True)) / var * 60
        report[name] = {"samples": len(window), "window_s": round(ts[-1] - ts[0], 1), "mb_start": round(ms[0], 1),
                        "mb_end": round(ms[-1], 1), "growth_pct": round(100 * (ms[-1] - ms[0]) / ms[0], 2),
                        "slope_mb_per_min": round(slope, 3)}
    return report


def run_costs(store: str) -> dict[str, float]:
    """What the run's episodes cost in all (agentgym.cost: env CPU and peak memory, wall time by stage, tokens)."""
    from agentgym.store import TrajectoryStore

    with TrajectoryStore(store, create=False) as opened:
        return opened.run_costs(RUN_NAME)


def served_model_dir(config: Path) -> str:
    """The directory of the run's starting model (what `agentgym serve` loads before the first weight sync)."""
    from agentgym.trainer.components import model_spec
    from agentgym.trainer.model import model_path

    from agentgym.config import load_train_config

    return model_path(model_spec(load_train_config(config)))


def start_served_policy(args: argparse.Namespace, work: Path, sampler: RssSampler) -> tuple[Any, PolicyFaultProxy]:
    """`agentgym serve` on the run's model and the fault proxy in front of it (bench/soak_policy.py)."""
    server = start_policy_server(served_model_dir(write_config(args, work)), work, work.name)
    sampler.others["policy_server"] = psutil.Process(server.proc.pid)
    proxy = PolicyFaultProxy(int(server.url.rsplit(":", 1)[1]), work / "faults.jsonl", seed=args.seed,
                             fault_rate=args.policy_fault_rate, outage_rate=args.policy_outage_rate,
                             stall_s=2 * args.policy_timeout_s)
    return server, proxy


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.runtime == "ray":
        import soak_ray

        return soak_ray.main(args)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="agentgym-soak-")).resolve()
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    sampler, shm_before = RssSampler(), shm_segments()
    server = proxy = disconnector = killer = None
    try:
        if args.policy == "served":
            server, proxy = start_served_policy(args, work, sampler)
        config = write_config(args, work, proxy.start() if proxy is not None else None)
        sampler.start()
        if args.store and args.store.startswith("postgresql"):
            disconnector = StoreDisconnector(args.store, work / "faults.jsonl", args.pg_every_s)
            disconnector.start()
        if args.envs == "containers":
            killer = ContainerKiller(work / "faults.jsonl", lambda: getattr(sampler.trainer, "pid", None),
                                     seed=args.seed, every_s=args.container_kill_every_s)
            killer.start()
        run = run_segments(args, work, config, sampler, (proxy, server.url) if server is not None else None)
        served = served_weights(server.url) if server is not None else None
    finally:
        for part in (killer, disconnector, sampler, proxy, server):
            if part is not None and (not isinstance(part, threading.Thread) or part.is_alive()):
                part.stop()
    store = args.store or f"sqlite:///{work / 'runs' / RUN_NAME / 'episodes.db'}"
    (work / "run.json").write_text(json.dumps(run))  # the segments, so the accounting can be run again
    result = account(work, store, RUN_NAME, run, args.turn_timeout_s)
    result["cost"] = run_costs(store)
    if served is not None:
        result["weight_sync"] = weight_sync_check(work / "runs" / RUN_NAME, served)
        # resumes that sent the server a lower version than it had (the kill fell between a push and its checkpoint)
        result["weight_sync"]["rewound_at_resume"] = sum(
            r["served_version_at_resume"] > r["checkpoint_update"] for r in run["resumes"])
    # the measured window starts at minute 5 of the full soak (a third of the way in the short one)
    samples = sampler.samples
    (work / "rss.json").write_text(json.dumps(samples))  # the raw samples, for a second look
    long_lived = {k: v for k, v in samples.items() if not k.startswith("worker-")}
    workers = {k: v for k, v in samples.items() if k.startswith("worker-")}
    skip = None if args.short else 300.0  # from minute 5 of each process's life (a third of a shorter one)
    result["rss"] = rss_report(long_lived, skip)
    result["rss_workers"] = rss_report(workers, skip, min_life_s=600.0)  # env workers that lived 10 minutes
    result["leaked"] = leaked(work, sampler.worker_pids, shm_before)
    if args.envs == "containers":  # the env containers of every trainer segment, killed or not, must be gone
        left = leaked_containers({seg["pid"] for seg in run["segments"]})
        result["leaked"].update(containers=len(left), container_ids=left)
    result.update(minutes=None if args.short else args.minutes, seed=args.seed, policy=args.policy, envs=args.envs,
                  workdir=str(work))
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
