"""The soak's accounting: the env's start and fault logs (ground truth) joined with the store and the ledger.

Every episode the soak env starts names itself (``[soak ep-PID-N]``) at the end of its first observation,
which the store keeps as turn 0's observation (and, for an episode stored in flight or ended without a turn, as
``metadata["reset_observation"]``), so each start can be matched with its stored episode.
"""

from __future__ import annotations

import json
import re
import socket
from collections import Counter
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from soak_workspace import DISK_FULL

from agentgym.store import IN_FLIGHT_AT_END, IN_FLIGHT_AT_RESUME, normalise_url

TOKEN = re.compile(r"\[soak (ep-[\w.]+-\d+)\]")  #: ep-PID-N, or ep-HOST.PID-N from an env container
#: the infra failure kind each env fault must produce (from the ProcessEnv error text)
EXPECTED = {"worker_kill": "env_worker_died", "step_hang": "env_timeout", "disk_fill": "sandbox_disk_full"}
DISK_FILL, DISK_FULL_KIND = "disk_fill", "sandbox_disk_full"
#: infra failures of episodes in flight when the trainer was killed (ended on resume) or when the run ended
TRAINER_STOPPED, RUN_ENDED = "trainer_stopped", "run_ended"
#: the infra failure of an episode whose env server went (Ray: its env worker died; containers: its container was
#: killed, the connection lost or refused before the cluster replaced it), and the container fault behind it
CONNECTION_LOST_KIND, CONTAINER_KILL = "env_connection_lost", "container_kill"
#: logged once the engine has killed the container (the kill's own record is written before it is carried out)
KILL_DONE = "container_kill_done"
#: where the soak's env logs when it runs in env containers (a directory bound into each; see bench/soak.py)
ENV_LOG_DIR = "envlog"
#: the infra failure a policy server outage must produce (the client's retries ran out), and the fault kinds
POLICY_FAILED = "policy_failed"
POLICY_KINDS = ("policy_500", "policy_drop", "policy_stall")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def infra_kind(error: str | None) -> str:
    text = error or ""
    if text == IN_FLIGHT_AT_RESUME:
        return TRAINER_STOPPED
    if text == IN_FLIGHT_AT_END:
        return RUN_ENDED
    if text.startswith("policy failed"):
        return POLICY_FAILED
    if DISK_FULL in text:  # the soak env's step could not write into its sandbox's full workspace
        return DISK_FULL_KIND
    if text.startswith("env.reset did not answer"):  # Ray: the reset waited for a restarting env worker
        return "env_reset_timeout"
    if "did not answer" in text:
        return "env_timeout"
    if "died during" in text:
        return "env_worker_died"
    if text.startswith("in flight when its rollout worker died"):  # Ray: the rollout worker was restarted
        return "rollout_worker_lost"
    if "connection to the env server" in text and ("was lost during" in text or "broke during" in text):
        return CONNECTION_LOST_KIND  # Ray: the env worker holding the session died; containers: the container
    if any(lost in text for lost in CONNECTION_LOST):
        return CONNECTION_LOST_KIND  # containers: refused by a killed replica not yet replaced
    return "other"


#: what `RemoteEnv` says when its env server went away (agentgym/runtime/remote.py)
CONNECTION_LOST = ("the connection to the env server at", "cannot connect to the env server at",
                   "cannot open the WebSocket of session", "no open session at")


def stored_episodes(store: str, run_id: str) -> list[dict[str, Any]]:
    """(id, status, failure, error, token) of every stored episode of the run."""
    engine = sa.create_engine(normalise_url(store))
    query = sa.text('SELECT e.id, e.status, e.failure, e.error, t.observation, e.metadata FROM episodes e '
                    'LEFT JOIN turns t ON t.episode_id = e.id AND t."index" = 0 WHERE e.run_id = :run')
    try:
        with engine.connect() as conn:
            rows = conn.execute(query, {"run": run_id}).all()
            credit = conn.execute(sa.text("SELECT episode_id, dropped FROM turn_credit WHERE run_id = :run"),
                                  {"run": run_id}).all()
    finally:
        engine.dispose()
    episodes = []
    for ep_id, status, failure, error, observation, meta in rows:
        meta = json.loads(meta) if isinstance(meta, str) else meta or {}
        match = TOKEN.search(observation or meta.get("reset_observation") or "")
        episodes.append({"id": ep_id, "status": status, "failure": failure, "error": error,
                         "token": match.group(1) if match else None})
    trained_by_credit = {ep_id for ep_id, dropped in credit if not dropped}
    return episodes, trained_by_credit


def account(work: Path, store: str, run_id: str, run: dict[str, Any], turn_timeout_s: float,
            explain: Any = None) -> dict[str, Any]:
    """The accounting; `explain(episode, kind)` names the fault kind behind an infra failure the env and trainer
    faults do not explain (bench/soak_ray.py: actor kills), or None."""
    # the trainer itself makes and resets one env in process when it starts (its config check): not episodes
    # (on Ray: every actor process does, `config_check_pids`; its host is this one, container pids repeat)
    trainer_pids, here = {seg["pid"] for seg in run["segments"]} | set(run.get("config_check_pids", [])), \
        socket.gethostname()
    starts = [s for s in read_jsonl(work / "starts.jsonl") + read_jsonl(work / ENV_LOG_DIR / "starts.jsonl")
              if not (s["pid"] in trainer_pids and s.get("host") in (None, here))]
    # the driver's faults, and (envs in containers) those the env logged in the directory bound into each
    faults = sorted(read_jsonl(work / "faults.jsonl") + read_jsonl(work / ENV_LOG_DIR / "faults.jsonl"),
                    key=lambda f: f.get("time", 0.0))
    if explain is None and any(f["kind"] == CONTAINER_KILL for f in faults):
        explain = container_explainer(faults, starts)
    episodes, trained_by_credit = stored_episodes(store, run_id)
    by_token: dict[str, list[dict[str, Any]]] = {}
    for ep in episodes:
        by_token.setdefault(ep["token"], []).append(ep)
    infra = [ep for ep in episodes if ep["failure"] == "infra"]
    result: dict[str, Any] = {
        "episodes": {"started": len(starts), "stored": len(episodes),
                     "by_status": dict(Counter(f"{e['status']}/{e['failure'] or '-'}" for e in episodes)),
                     "not_terminal": sum(e["status"] == "partial" for e in episodes)},
        "faults_injected": dict(Counter(f["kind"] for f in faults if f["kind"] != KILL_DONE)),
        "infra_failures": dict(Counter(infra_kind(e["error"]) for e in infra)),
        "duplicated": sum(len(v) - 1 for k, v in by_token.items() if k) + len(episodes) - len({e["id"] for e in episodes}),
        "unnamed_episodes": len(by_token.get(None, [])),
    }
    result.update(fault_match(faults, by_token, infra, {s["token"]: s["time"] for s in starts}, explain))
    result.update(policy_fault_match(faults, episodes))
    policy = result["policy_faults"]
    if policy["outages_ended_episode"]:
        result["faults_hit_stored_episodes"]["policy_outage"] = policy["outages_ended_episode"]
    result["fault_mismatches"] += policy["mismatches"]
    result.update(disk_fault_match(faults, by_token, starts))
    result.update(container_fault_match(faults, episodes, starts))
    result["unnamed_episodes"] -= result["container_faults"]["refused"]  # ended before their env reset: no token
    result.update(lost_and_in_flight(starts, faults, by_token, run["segments"], turn_timeout_s))
    result["infra_trained"] = infra_trained(work / "runs" / run_id / "trained.jsonl", infra, trained_by_credit)
    result["updates"] = update_accounting(work / "runs" / run_id, run["resumes"])
    return result


def fault_match(faults: list[dict[str, Any]], by_token: dict, infra: list[dict[str, Any]],
                start_time: dict[str, float], explain: Any = None) -> dict[str, Any]:
    """Each infra failure must be explained by one fault, and each env fault whose episode is stored must have
    made it an infra failure:

    - ``env_worker_died`` / ``env_timeout``: the env fault logged with the episode's token, of the matching kind;
    - ``trainer_stopped``: a ``trainer_kill`` after the episode started (it was in flight at the kill, so an env
      fault it met just before is pre-empted by the kill: not a mismatch);
    - ``run_ended``: no fault: in flight when the last trainer segment finished (reported, never a fault hit; an
      env fault it met just before is pre-empted by the end, as by a kill);
    - any other kind: the fault `explain` names (Ray's actor kills), which pre-empts an env fault as a kill does.
    """
    kills = [f["time"] for f in faults if f["kind"] == "trainer_kill"]
    env_faults = {f["token"]: f for f in faults if f["kind"] in EXPECTED}
    outages = {f["episode_id"] for f in faults if f["kind"] in POLICY_KINDS and f["outage"]}
    hit: Counter[str] = Counter()
    mismatches = []
    for fault in env_faults.values():
        for ep in by_token.get(fault["token"], []):
            kind = infra_kind(ep["error"]) if ep["failure"] == "infra" else None
            if kind == EXPECTED[fault["kind"]]:
                hit[fault["kind"]] += 1
            elif kind not in (TRAINER_STOPPED, RUN_ENDED) and not (explain and kind and explain(ep, kind)):
                mismatches.append({"fault": fault, "episode": ep["id"], "status": ep["status"],
                                   "failure": ep["failure"], "error": (ep["error"] or "")[:200]})
    for ep in infra:
        kind = infra_kind(ep["error"])
        if kind == TRAINER_STOPPED and any(k >= start_time.get(ep["token"], float("inf")) for k in kills):
            hit["trainer_kill"] += 1
        elif explain is not None and kind not in EXPECTED.values() and (by := explain(ep, kind)):
            hit[by] += 1
        elif not (kind == RUN_ENDED or (kind in EXPECTED.values() and ep["token"] in env_faults)
                  or (kind == POLICY_FAILED and ep["id"] in outages)):
            mismatches.append({"fault": None, "episode": ep["id"], "error": (ep["error"] or "")[:200]})
    return {"faults_hit_stored_episodes": dict(hit), "fault_mismatches": len(mismatches),
            "fault_mismatch_examples": mismatches[:5]}


def policy_fault_match(faults: list[dict[str, Any]], episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The policy server's faults (bench/soak_policy.py), matched by episode id with the stored episodes.

    An **outage** (every request of the episode failed) must end its episode as ``policy_failed`` with the fault's
    reason as the client's last error, unless a trainer kill or the run's end pre-empted it; an **isolated** fault
    must be absorbed by the client's retry: its episode is never ``policy_failed``. The counts land in
    ``faults_hit_stored_episodes["policy_outage"]`` (outages that ended a stored episode) and ``policy_faults``.
    Mismatches are added to ``fault_mismatches`` by the caller's sum (``policy_faults["mismatches"]``).
    """
    policy = [f for f in faults if f["kind"] in POLICY_KINDS]
    by_id = {ep["id"]: ep for ep in episodes}
    outage_kind = {f["episode_id"]: f["kind"] for f in policy if f["outage"]}
    isolated = [f for f in policy if not f["outage"]]
    report: dict[str, Any] = {"requests_faulted": dict(Counter(f["kind"] for f in policy)),
                              "isolated": len(isolated), "absorbed_by_retry": {}, "isolated_not_stored": 0,
                              "outages": dict(Counter(outage_kind.values())), "outages_ended_episode": 0,
                              "outages_preempted": 0, "outages_not_stored": 0, "mismatches": []}
    absorbed: Counter[str] = Counter()
    for fault in isolated:
        ep = by_id.get(fault["episode_id"])
        if ep is None:
            report["isolated_not_stored"] += 1  # in flight at a trainer stop (an infra failure of its own, or none)
        elif infra_kind(ep["error"]) == POLICY_FAILED and ep["failure"] == "infra" and ep["id"] not in outage_kind:
            report["mismatches"].append({"fault": fault, "episode": ep["id"], "error": (ep["error"] or "")[:200]})
        else:
            absorbed[fault["kind"]] += 1
    for episode_id, kind in outage_kind.items():
        ep = by_id.get(episode_id)
        if ep is None:
            report["outages_not_stored"] += 1
            continue
        got = infra_kind(ep["error"]) if ep["failure"] == "infra" else None
        if got == POLICY_FAILED and any(reason in (ep["error"] or "") for reason in POLICY_REASON[kind]):
            report["outages_ended_episode"] += 1
        elif got in (TRAINER_STOPPED, RUN_ENDED):
            report["outages_preempted"] += 1
        else:
            report["mismatches"].append({"fault": kind, "episode": episode_id, "status": ep["status"],
                                         "failure": ep["failure"], "error": (ep["error"] or "")[:200]})
    report["absorbed_by_retry"] = dict(absorbed)
    mismatches = report.pop("mismatches")
    return {"policy_faults": {**report, "mismatches": len(mismatches), "mismatch_examples": mismatches[:5]}}


def disk_fault_match(faults: list[dict[str, Any]], by_token: dict, starts: list[dict[str, Any]]) -> dict[str, Any]:
    """Per ``disk_fill`` (the step filled its sandbox's workspace, bench/soak_workspace.py): its stored episode by
    token, ``ended_episode`` (stored as ``sandbox_disk_full``), ``preempted`` (a trainer kill, the run's end or an env
    container kill came first) or ``not_stored``; the match itself (mismatches, hits) is `fault_match`'s.

    No poisoning: the episodes started later on the fill's worker (host, pid: ``later_on_worker``) or in its
    workspace's storage (an inline slot's tmpfs, which a later session's sandbox reuses: ``later_on_workspace``)
    must not fail of a full disk without a fill of their own (``poisoned``, must be 0); ``next_normal`` counts fills
    whose next such episode did not end as an infra failure at all. The collector closes an env after any infra
    failure, so in process mode nothing runs on a filled worker or its sandbox again (both counts are 0 there)."""
    fills = [f for f in faults if f["kind"] == DISK_FILL]
    filled = {f["token"] for f in fills}
    ended = preempted = not_stored = next_normal = 0
    on_worker, on_workspace, poisoned = set(), set(), []
    for fill in fills:
        kinds = [infra_kind(ep["error"]) if ep["failure"] == "infra" else None for ep in by_token.get(fill["token"], [])]
        ended += DISK_FULL_KIND in kinds
        preempted += DISK_FULL_KIND not in kinds and bool({TRAINER_STOPPED, RUN_ENDED, CONNECTION_LOST_KIND} & set(kinds))
        not_stored += not kinds
        worker, place = (fill.get("host"), fill["pid"]), (fill.get("host"), fill.get("workspace"))
        later = sorted((s for s in starts if s["time"] > fill["time"] and s["token"] in by_token
                        and ((s.get("host"), s["pid"]) == worker
                             or (place[1] is not None and (s.get("host"), s.get("workspace")) == place))),
                       key=lambda s: s["time"])
        for i, start in enumerate(later):
            same_pid = (start.get("host"), start["pid"]) == worker
            for ep in by_token[start["token"]]:
                (on_worker if same_pid else on_workspace).add(ep["id"])
                next_normal += i == 0 and ep["failure"] != "infra"
                if ep["failure"] == "infra" and infra_kind(ep["error"]) == DISK_FULL_KIND \
                        and start["token"] not in filled:
                    poisoned.append({"episode": ep["id"], "token": start["token"], "after_fill": fill["token"]})
    return {"disk_faults": {"fills": len(fills), "ended_episode": ended, "preempted": preempted,
                            "not_stored": not_stored, "later_on_worker": len(on_worker),
                            "later_on_workspace": len(on_workspace), "next_normal": next_normal,
                            "poisoned": len(poisoned), "poisoned_examples": poisoned[:5]}}


def container_explainer(faults: list[dict[str, Any]], starts: list[dict[str, Any]]) -> Any:
    """The explainer (`account`'s ``explain``) of the driver's env container kills (``container_kill``: the
    container's short id, its socket directory and the sessions its server held, logged before the kill): an
    ``env_connection_lost`` episode is explained by a kill of the container its token names (it reset there), or,
    without a token (it asked the dead replica for a session before the cluster replaced it), of the socket directory
    its error names."""
    kills = [f for f in faults if f["kind"] == CONTAINER_KILL]
    killed, directories = {k["container"] for k in kills}, [k["directory"] for k in kills]
    host_of = {s["token"]: s.get("host") for s in starts}

    def explain(ep: dict[str, Any], kind: str) -> str | None:
        if kind != CONNECTION_LOST_KIND:
            return None
        if host_of.get(ep["token"]) in killed:
            return CONTAINER_KILL
        if ep["token"] is None and any(d in (ep["error"] or "") for d in directories):
            return CONTAINER_KILL
        return None

    return explain


def container_fault_match(faults: list[dict[str, Any]], episodes: list[dict[str, Any]],
                          starts: list[dict[str, Any]]) -> dict[str, Any]:
    """Per container kill: the sessions its server held and the episodes it ended mid-way (by the container in their
    token); ``refused``: episodes without a token that name a killed replica's socket directory (they asked it for a
    session). A kill cannot end more episodes mid-way than its server held sessions when the killer read them, plus
    the episodes begun there between that reading and the engine's kill (``begun_after_read``, up to the
    ``container_kill_done`` record; under load a session may open in between): ``over_sessions`` counts kills that
    did. It may end fewer, since a session stays open between its episodes. The match itself (mismatches, hits) is
    `fault_match`'s, through `container_explainer`."""
    kills = [f for f in faults if f["kind"] == CONTAINER_KILL]
    done = {f["container"]: f["time"] for f in faults if f["kind"] == KILL_DONE}
    host_of = {s["token"]: s.get("host") for s in starts}
    ended: Counter[str] = Counter()
    refused = 0
    for ep in episodes:
        if ep["failure"] != "infra" or infra_kind(ep["error"]) != CONNECTION_LOST_KIND:
            continue
        host = host_of.get(ep["token"])
        if host in {k["container"] for k in kills}:
            ended[host] += 1
        elif ep["token"] is None and any(k["directory"] in (ep["error"] or "") for k in kills):
            refused += 1
    per_kill = [{"container": k["container"], "sessions": k["sessions"], "episodes_ended": ended[k["container"]],
                 "begun_after_read": sum(s.get("host") == k["container"] and k.get("sessions_read_at", k["time"])
                                         <= s["time"] <= done.get(k["container"], k["time"]) for s in starts)}
                for k in kills]
    return {"container_faults": {
        "kills": len(kills), "sessions_at_kill": sum(k["sessions"] for k in kills),
        "episodes_ended": sum(ended.values()), "refused": refused,
        "over_sessions": sum(k["episodes_ended"] > k["sessions"] + k["begun_after_read"] for k in per_kill),
        "kills_missed": sum(f["kind"] == "container_kill_missed" for f in faults), "per_kill": per_kill}}


#: what the client's last error may say after an outage of each kind (httpx's error in the backend's BackendError)
POLICY_REASON = {"policy_500": ("HTTP 500",), "policy_drop": ("RemoteProtocolError", "ReadError"),
                 "policy_stall": ("ReadTimeout",)}


def lost_and_in_flight(starts: list[dict[str, Any]], faults: list[dict[str, Any]], by_token: dict,
                       segments: list[dict[str, Any]], turn_timeout_s: float) -> dict[str, Any]:
    """Unstored starts, classified. An episode provably ended when its worker started another later, or its fault
    came long enough (turn timeout + 30 s) before its trainer segment stopped for the collector to handle it.

    The collector stores every episode once its env has reset and again as it ends, so all of these should be 0:

    - ``in_flight_at_stop``: still running when the trainer was SIGKILLed or stopped, and not even stored as in
      flight (the kill fell between the env's reset and the collector's first write);
    - ``finished_unstored_at_stop``: ended while a group-mate (same task, same segment) was still running when the
      trainer stopped, and not stored;
    - ``lost``: ended, and nothing of its group was still running: it should be in the store.
    """
    later_start: dict[tuple[str | None, int], float] = {}  # by (container or None, pid): container pids repeat
    for start in starts:
        worker = (start.get("host"), start["pid"])
        later_start[worker] = max(later_start.get(worker, 0.0), start["time"])
    fault_time = {f["token"]: f["time"] for f in faults if "token" in f}
    ends = sorted(seg["ended"] for seg in segments)
    ended, running, in_flight = [], set(), 0
    for start in starts:
        if start["token"] in by_token:
            continue
        segment_end = next((end for end in ends if end >= start["time"]), ends[-1] if ends else start["time"])
        moved_on = later_start[(start.get("host"), start["pid"])] > start["time"]
        stale_fault = start["token"] in fault_time and fault_time[start["token"]] + turn_timeout_s + 30 < segment_end
        if moved_on or stale_fault:
            ended.append((start, segment_end))
        else:
            running.add((start["task_id"], segment_end))
            in_flight += 1
    lost = [s["token"] for s, end in ended if (s["task_id"], end) not in running]
    return {"lost": len(lost), "lost_tokens": lost[:20], "in_flight_at_stop": in_flight,
            "finished_unstored_at_stop": len(ended) - len(lost)}


def infra_trained(ledger: Path, infra: list[dict[str, Any]], trained_by_credit: set[str]) -> dict[str, Any]:
    """Infra-failed episodes in a trained batch: by trained.jsonl and by the store's turn_credit rows."""
    infra_ids = {ep["id"] for ep in infra}
    entries = read_jsonl(ledger)
    trained = Counter(ep_id for entry in entries for ep_id in entry.get("episode_ids") or [])
    return {"by_ledger": len(infra_ids & set(trained)), "by_turn_credit": len(infra_ids & trained_by_credit),
            "episodes_trained": len(trained), "trained_twice": sum(1 for n in trained.values() if n > 1)}


def update_accounting(run_dir: Path, resumes: list[dict[str, Any]]) -> dict[str, Any]:
    """Updates 1..N each logged once across the resumes; per resume, the checkpoint it went back to."""
    updates = [int(row["update"]) for row in read_jsonl(run_dir / "metrics.jsonl")]
    counts = Counter(updates)
    final = max(updates, default=0)
    return {"final": final, "applied_twice": sum(1 for n in counts.values() if n > 1),
            "skipped": sum(1 for u in range(1, final + 1) if u not in counts),
            "resumes": len(resumes), "per_resume": resumes,
            "redone_after_kill": sum(r["logged_before_kill"] - r["checkpoint_update"] for r in resumes)}
