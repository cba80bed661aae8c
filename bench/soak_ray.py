"""Soak, Ray mode (``bench/soak.py --runtime ray``): the soak's training run on the Ray runtime under faults.

    python bench/soak.py --runtime ray --short --trainer-kills 1 --json   # the CI size (8 updates)
    python bench/soak.py --runtime ray --minutes 30 --json     # the long soak on Ray

What runs: ``python -m agentgym.trainer.ray_runtime`` (``runtime: ray``, async) in a loopback-only network
namespace (``scripts/ray-netns.sh``) with a local cluster of its own (its session directory a fresh
``/tmp/agr-*``): the data manager actor, the trainer actor, ``--rollout-workers`` rollout workers and
``--env-workers`` env workers, whose env server runs each ``soak_env:SoakMaze-v0`` session in a worker
process. The faults, logged (fsynced) to ``faults.jsonl`` before they act, as in the local mode:

- ``worker_kill`` / ``step_hang``: the env's own faults (bench/soak_env.py), in the env worker's processes;
  a hang lasts past the collector's limit for a remote env (``turn_timeout_s`` + 10 s of grace);
- ``actor_kill``: SIGKILL of a rollout worker's or an env worker's process (``--actor-kills``, alternating,
  at seeded points); Ray restarts it. A dead env worker's in-flight episodes end as infra failures (their
  connections drop: ``env_connection_lost``) and new episodes go to its restarted server; a dead rollout
  worker's in-flight episodes are ended by the trainer actor when the restarted worker rejoins
  (``rollout_worker_lost``), and its groups are completed by retries;
- ``trainer_kill``: SIGKILL of the Ray driver process (the run's entry point; its local cluster dies with it),
  then ``--resume``; the episodes in flight end as ``trainer_stopped`` when the resumed run starts.

The accounting is the local mode's (bench/soak_accounting.py), with the Ray kinds explained by the actor
kills: a ``rollout_worker_lost`` episode by the kill of the rollout worker process that ran it (its stored
``metadata["rollout_worker"]`` names the process), an ``env_connection_lost`` episode by the kill of the env
worker whose session process ran it. ``actors`` reports the kills and the restarts seen; ``leaked`` also
checks that no process of the Ray session and no session directory is left.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from agentgym.trainer.ray_runtime.env_worker import RESTART_WAIT_S
from soak import (
    BENCH,
    RUN_NAME,
    SHORT_UPDATES,
    RssSampler,
    _die_with_parent,
    check_segment_exit,
    checkpoint_update,
    leaked,
    logged_updates,
    rss_report,
    run_costs,
    shm_segments,
    write_config,
)
from soak_accounting import TRAINER_STOPPED, account, read_jsonl
from soak_env import append_record

ROOT = BENCH.parent
NETNS = ROOT / "scripts" / "ray-netns.sh"
GRACE_S = 10.0  #: the collector's extra wait for a remote env beyond turn_timeout_s (collector._PROXY_GRACE_S)
#: an episode is made (its `created_at`) a moment before its reset is sent: queueing for an env slot, making the env
RESET_SLACK_S = 5.0
ACTORS = ("EnvWorker", "RolloutWorker")  #: the actors the injector kills, in turn
#: the infra failure kinds of the Ray faults (from the stored error or the episode's metadata)
ROLLOUT_LOST, ENV_LOST, RESET_TIMEOUT = "rollout_worker_lost", "env_connection_lost", "env_reset_timeout"


def ray_config(args: argparse.Namespace, work: Path) -> Path:
    """The local soak's config, on Ray: a hang outlasts the collector's limit for a remote env."""
    path = write_config(args, work)
    config = json.loads(path.read_text())
    config["runtime"] = "ray"
    if args.short:  # two more updates than the local short soak: a restarted rollout worker has time to rejoin
        config["updates"] = SHORT_UPDATES + 2
    # the env workers' servers now end a call at the run's turn limit; Ray's processes on a small machine make a
    # plain step slower than 3 s at times (a false env_timeout), so the limit on Ray is the one its remote envs had
    # before (turn_timeout_s + the collector's grace), and a hang lasts twice that
    config["turn_timeout_s"] = args.turn_timeout_s + GRACE_S
    config["env_kwargs"]["hang_s"] = 2 * (args.turn_timeout_s + GRACE_S)
    # no sandbox (so no disk_fill) on Ray yet: the env workers' sessions have not been soaked with one
    config["env_kwargs"].update(sandbox=False, disk_rate=0.0)
    path.write_text(json.dumps(config, indent=1))
    return path


def actor_plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Which actor to kill when, seeded: the short soak in its last segment (after the trainer kills), one kill per
    checkpoint that segment makes (counts, not times: the restarted worker has updates left to rejoin); the full
    soak at random times between 10% and 90% of its minutes. Rollout and env workers in turn."""
    kinds = [ACTORS[(i + 1) % len(ACTORS)] for i in range(args.actor_kills)]  # a rollout worker first
    if args.short:
        return [{"actor": k, "segment": args.trainer_kills, "checkpoints": i + 1, "after_s": 0.0}
                for i, k in enumerate(kinds)]
    rng = random.Random(f"{args.seed}:actors")
    times = sorted(rng.uniform(0.1, 0.9) * args.minutes * 60 for _ in kinds)
    return [{"actor": k, "segment": None, "checkpoints": 0, "after_s": t} for k, t in zip(kinds, times, strict=True)]


class RaySampler(RssSampler):
    """`RssSampler` over every descendant of the Ray driver (the actors are the raylet's children, not its own)."""

    def run(self) -> None:
        me = psutil.Process()
        while not self._halt.wait(self.every_s):
            self._sample("driver", me)
            trainer = self.trainer
            if trainer is None:
                continue
            try:
                self._sample(f"trainer-{self.segment}", trainer)
                children = trainer.children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                self.worker_pids.add(child.pid)
                self._sample(f"worker-{child.pid}", child)


def actor_processes(root: psutil.Process, name: str) -> list[psutil.Process]:
    """The live processes of actor class `name` among `root`'s descendants (``ray::Name`` or ``ray::Name.method``)."""
    found = []
    for proc in root.children(recursive=True):
        try:
            title = " ".join(proc.cmdline())
            if (title.startswith(f"ray::{name}.") or title.split(" ")[0] == f"ray::{name}") \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


class ActorKiller(threading.Thread):
    """Kills the planned actors of the running segment (logged before it acts); see the module docstring."""

    def __init__(self, plan: list[dict[str, Any]], fault_log: Path, run_dir: Path, seed: int):
        super().__init__(daemon=True)
        self.plan, self.fault_log, self.run_dir = list(plan), fault_log, run_dir
        self.rng = random.Random(f"{seed}:victims")
        self.root: psutil.Process | None = None
        self.segment, self.began, self.segment_checkpoint = 0, time.monotonic(), 0
        self.actor_pids: dict[int, str] = {}  #: every actor process seen, its class (their env resets are config checks)
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.5):
            root = self.root
            if root is None:
                continue
            self._note_actors(root)
            if self.plan and self._due(self.plan[0]) and self._kill(root, self.plan[0]):
                self.plan.pop(0)

    def _note_actors(self, root: psutil.Process) -> None:
        try:
            for proc in root.children(recursive=True):
                title = " ".join(proc.cmdline())
                # an env worker's session process keeps its parent's title between fork and exec: not an actor
                if title.startswith("ray::") and self.actor_pids.get(proc.pid, "IDLE") == "IDLE" \
                        and not " ".join(getattr(proc.parent(), "cmdline", list)()).startswith("ray::"):
                    self.actor_pids[proc.pid] = title[5:].split(" ")[0].split(".")[0]  # IDLE until it hosts an actor
        except psutil.Error:
            pass

    def _due(self, kill: dict[str, Any]) -> bool:
        if kill["segment"] is not None and kill["segment"] != self.segment:
            return False
        return (checkpoint_update(self.run_dir) >= self.segment_checkpoint + kill["checkpoints"]
                and time.monotonic() - self.began >= kill["after_s"])

    def follow(self, root: psutil.Process, segment: int, checkpoint: int) -> None:
        """Watch the Ray driver `root` of `segment`, which began at `checkpoint`."""
        self.segment, self.segment_checkpoint, self.root = segment, checkpoint, root

    def _kill(self, root: psutil.Process, kill: dict[str, Any]) -> bool:
        """SIGKILL one process of the planned actor class (False while none is up, e.g. it is restarting)."""
        victims = sorted(actor_processes(root, kill["actor"]), key=lambda p: p.pid)
        if not victims:
            return False
        victim = self.rng.choice(victims)
        try:
            children = [c.pid for c in victim.children(recursive=True)]
        except psutil.Error:
            return False
        append_record(str(self.fault_log), {"kind": "actor_kill", "actor": kill["actor"], "pid": victim.pid,
                                            "children": children, "segment": self.segment, "time": time.time()})
        victim.send_signal(signal.SIGKILL)
        return True

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


def run_segments(args: argparse.Namespace, work: Path, config: Path, sampler: RssSampler, killer: ActorKiller,
                 session_root: str) -> dict[str, Any]:
    """Run the Ray entry point to its end in the netns, SIGKILLing it by the seeded plan and resuming it."""
    from soak import kill_plan

    plan = kill_plan(args)
    run_dir = work / "runs" / RUN_NAME
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH), str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "TMPDIR": str(work / "tmp"), "AGENTGYM_SOAK_TAG": work.name}
    began, segments, resumes = time.monotonic(), [], []
    for segment in range(len(plan) + 1):
        cmd = [str(NETNS), sys.executable, "-m", "agentgym.trainer.ray_runtime", str(config), "--json",
               "--num-cpus", "2", "--temp-dir", session_root, "--rollout-workers", str(args.rollout_workers),
               "--env-workers", str(args.env_workers)]
        if segment:
            resumes.append({"checkpoint_update": checkpoint_update(run_dir),
                            "logged_before_kill": max(logged_updates(run_dir), default=0)})
            cmd.append("--resume")
        with (work / f"trainer-{segment}.log").open("w") as log:
            proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    preexec_fn=_die_with_parent)
            sampler.trainer, sampler.segment = psutil.Process(proc.pid), segment
            killer.follow(psutil.Process(proc.pid), segment, checkpoint_update(run_dir))
            kill = plan[segment] if segment < len(plan) else None
            code = wait_or_kill(proc, kill, began, work / "faults.jsonl", segment, run_dir)
        killer.root = sampler.trainer = None
        left = stop_session(work.name)  # none, or what outlived the driver (reported as leaked)
        segments.append({"segment": segment, "pid": proc.pid, "exit": code, "ended": time.time(), "outlived": left})
        check_segment_exit("ray", segment, kill, code, work)
    return {"segments": segments, "resumes": resumes, "kill_plan": plan}


def wait_or_kill(proc: subprocess.Popen, kill: dict[str, float] | None, began: float, fault_log: Path,
                 segment: int, run_dir: Path) -> int:
    """Wait for the Ray driver; with a planned `kill`, SIGKILL it (logged first) once it has checkpointed the
    plan's update and one of its own, and the plan's time has passed."""
    if kill is None:
        return proc.wait(timeout=None)
    first, due = checkpoint_update(run_dir), None
    while proc.poll() is None:
        ready = checkpoint_update(run_dir) >= max(kill["after_update"], first + 1)
        if due is None and ready and time.monotonic() - began >= kill["after_s"]:
            due = time.monotonic() + kill["delay_s"]
        if due is not None and time.monotonic() >= due:
            append_record(str(fault_log), {"kind": "trainer_kill", "pid": proc.pid, "segment": segment,
                                           "time": time.time()})
            proc.send_signal(signal.SIGKILL)
            return proc.wait()
        time.sleep(0.2)
    return proc.returncode


def stop_session(tag: str, wait_s: float = 120.0) -> list[dict[str, Any]]:
    """After the driver ended: wait for its local cluster to go (Ray's processes share the driver's fate), then
    SIGKILL what is left of it (tagged with `tag`), so that the next segment starts clean; returns what was left
    (pid, parent pid, command line), so that a leak names its processes.

    `wait_s`: most of the cluster is gone within seconds of the driver's SIGKILL, but not Ray's dashboard agent:
    when its raylet dies unexpectedly it first reports the raylet's last log lines through the GCS
    (`ray._private.process_watcher.report_raylet_error_logs`), and the GCS died with the driver, so that call
    retries for Ray's GCS reconnect timeout (`gcs_rpc_server_reconnect_timeout_s`, 60 s) before the agent exits.
    In CI it was still there after a 60 s wait (named: `ray::DashboardAgent`, parent 1); twice that."""
    deadline = time.monotonic() + wait_s
    while (left := tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.5)
    described = []
    for proc in left:
        try:
            described.append({"pid": proc.pid, "ppid": proc.ppid(), "cmdline": " ".join(proc.cmdline())[:200]})
            proc.kill()
        except psutil.Error:
            pass
    return described


def tagged(tag: str) -> list[psutil.Process]:
    """Live processes of this soak (``AGENTGYM_SOAK_TAG`` in their environment), the driver itself left out."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid != os.getpid() and proc.environ().get("AGENTGYM_SOAK_TAG") == tag \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


class Explainer:
    """The explainer of the Ray infra kinds for `soak_accounting.account` (called as ``explainer(episode, kind)``):

    - ``rollout_worker_lost``: the kill of the rollout worker process named in the episode's metadata;
    - ``env_connection_lost``: the kill of the env worker whose session process ran the episode, or else a trainer
      kill after the episode started: the cluster dies with its driver, and a rollout worker that outlives its env
      worker by a moment stores the dropped connection (counted apart in `at_trainer_kill`);
    - ``env_reset_timeout``: an episode whose reset met the dead server of a killed env worker and waited for the
      restarted one past the collector's limit (`reset_limit_s`; under load a restart takes longer): begun within
      `RESTART_WAIT_S` after the kill, or before it with its reset still in flight at the kill (begun at most
      `reset_limit_s` + `RESET_SLACK_S` before it; a local run had four begun 6 s before the kill take 23 s); it never
      reached an env, so it names no soak token (`reset_at_env_restart`);
    - ``trainer_stopped`` of an episode begun just after a trainer kill's record: the cluster outlives its killed
      driver for a moment (fate sharing is not instant), and a rollout worker may start one more episode; a kill
      explains the episodes begun before its segment's processes were gone (`begun_after_kill_record`).
    """

    def __init__(self, faults: list[dict[str, Any]], starts: list[dict[str, Any]], owners: dict[str, str],
                 created: dict[str, float] | None = None, segments: list[dict[str, Any]] | None = None,
                 reset_limit_s: float = 0.0):
        self.created = created or {}
        self.reset_limit_s = reset_limit_s
        killed_segments = {f.get("segment") for f in faults if f["kind"] == "trainer_kill"}
        self.killed_ends = [seg["ended"] for seg in segments or [] if seg["segment"] in killed_segments]
        self.begun_after_kill_record: set[str] = set()
        self.env_kills = [f["time"] for f in faults if f["kind"] == "actor_kill" and f["actor"] == "EnvWorker"]
        self.reset_at_env_restart: set[str] = set()
        self.killed = {f["pid"]: f for f in faults if f["kind"] == "actor_kill"}
        self.env_children = {c for f in self.killed.values() if f["actor"] == "EnvWorker" for c in f["children"]}
        self.trainer_kills = [f["time"] for f in faults if f["kind"] == "trainer_kill"]
        self.start = {s["token"]: s for s in starts}
        self.owners = owners
        self.at_trainer_kill: set[str] = set()  #: episodes whose connection dropped as their cluster died

    def __call__(self, episode: dict[str, Any], kind: str) -> str | None:
        if kind == ROLLOUT_LOST:
            owner = self.owners.get(episode["id"], "")
            pid = int(owner.split("-")[2]) if owner.count("-") >= 3 else None
            return "actor_kill" if pid in self.killed and self.killed[pid]["actor"] == "RolloutWorker" else None
        if kind == TRAINER_STOPPED:
            began = self.start.get(episode["token"] or "", {}).get("time", float("inf"))
            if any(end >= began for end in self.killed_ends):
                self.begun_after_kill_record.add(episode["id"])
                return "trainer_kill"
            return None
        if kind == RESET_TIMEOUT:
            began = self.created.get(episode["id"], float("-inf"))
            in_flight = self.reset_limit_s + RESET_SLACK_S
            if episode["token"] is None and any(-in_flight <= began - k <= RESTART_WAIT_S for k in self.env_kills):
                self.reset_at_env_restart.add(episode["id"])
                return "actor_kill"
            return None
        if kind != ENV_LOST:
            return None
        start = self.start.get(episode["token"] or "", {})
        if start.get("pid") in self.env_children:
            return "actor_kill"
        if any(k >= start.get("time", float("inf")) for k in self.trainer_kills):
            self.at_trainer_kill.add(episode["id"])
            return "trainer_kill"
        return None


def episode_owners(store: str) -> tuple[dict[str, str], dict[str, float]]:
    """Episode id -> the rollout worker incarnation that stored it (``metadata["rollout_worker"]``), and -> when it
    was created."""
    from agentgym.store import TrajectoryStore

    with TrajectoryStore(store, create=False) as opened:
        episodes = list(opened.iter_episodes(run_id=RUN_NAME))
    return {e.id: e.metadata.get("rollout_worker", "") for e in episodes}, {e.id: e.created_at for e in episodes}


def session_leaks(session_root: str) -> list[str]:
    """Command lines of live processes that mention the Ray session directory."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if session_root in cmdline:
            found.append(cmdline[:200])
    return found


def main(args: argparse.Namespace) -> int:
    """Run the Ray soak with the parsed `bench/soak.py` arguments; prints the accounting (one JSON object)."""
    work = Path(args.workdir or tempfile.mkdtemp(prefix="agentgym-soak-")).resolve()
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    session_root = tempfile.mkdtemp(prefix="agr-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    config = ray_config(args, work)
    sampler, shm_before = RaySampler(), shm_segments()
    killer = ActorKiller(actor_plan(args), work / "faults.jsonl", work / "runs" / RUN_NAME, args.seed)
    try:
        sampler.start()
        killer.start()
        run = run_segments(args, work, config, sampler, killer, session_root)
    finally:
        killer.stop()
        sampler.stop()
        session_procs = session_leaks(session_root)
        shutil.rmtree(session_root, ignore_errors=True)
    run["config_check_pids"] = sorted(killer.actor_pids)
    store = args.store or f"sqlite:///{work / 'runs' / RUN_NAME / 'episodes.db'}"
    (work / "run.json").write_text(json.dumps(run))
    faults = read_jsonl(work / "faults.jsonl")
    starts = read_jsonl(work / "starts.jsonl")
    explainer = Explainer(faults, starts, *episode_owners(store), segments=run["segments"],
                          reset_limit_s=args.turn_timeout_s + 2 * GRACE_S)  # the Ray run's turn limit + the grace
    result = account(work, store, RUN_NAME, run, args.turn_timeout_s + GRACE_S, explain=explainer)
    result["env_lost_at_trainer_kill"] = len(explainer.at_trainer_kill)
    # resets that met a killed env worker name no soak token: explained by its kill, not unnamed mysteries; the env
    # may still have reset after the collector gave up (a start with no episode: `in_flight_at_stop`)
    result["reset_failed_at_env_restart"] = len(explainer.reset_at_env_restart)
    result["unnamed_episodes"] -= result["reset_failed_at_env_restart"]
    result["cost"] = run_costs(store)
    result["actors"] = actor_report(faults, work)
    samples = sampler.samples
    (work / "rss.json").write_text(json.dumps(samples))
    # the Ray actors (children of the driver) by class; other children (raylet, GCS, env sessions) as workers
    named = {f"worker-{pid}": f"{name}-{pid}" for pid, name in killer.actor_pids.items()}
    skip = None if args.short else 300.0
    result["rss"] = rss_report({named.get(k, k): v for k, v in samples.items()
                                if not k.startswith("worker-") or k in named}, skip)
    result["rss_workers"] = rss_report({k: v for k, v in samples.items() if k.startswith("worker-") and k not in named},
                                       skip, min_life_s=600.0)
    result["leaked"] = leaked(work, sampler.worker_pids, shm_before)
    result["leaked"]["ray_session_processes"] = session_procs
    result["leaked"]["outlived_their_driver"] = sum(len(seg["outlived"]) for seg in run["segments"])
    result["leaked"]["outlived"] = [dict(proc, segment=seg["segment"]) for seg in run["segments"]
                                    for proc in seg["outlived"]]
    result["leaked"]["ray_session_dir"] = os.path.exists(session_root)
    result.update(minutes=None if args.short else args.minutes, seed=args.seed, runtime="ray", workdir=str(work))
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    return 0


def actor_report(faults: list[dict[str, Any]], work: Path) -> dict[str, Any]:
    """The actor kills by actor class, and the rollout worker restarts the trainer actor logged."""
    kills = [f for f in faults if f["kind"] == "actor_kill"]
    rejoined = sum(1 for log in sorted(work.glob("trainer-*.log")) for line in log.read_text().splitlines()
                   if "rollout worker " in line and " restarted (" in line)
    return {"killed": {name: sum(f["actor"] == name for f in kills) for name in ACTORS},
            "rollout_workers_rejoined": rejoined}
