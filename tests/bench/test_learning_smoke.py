"""bench/learning.py at toy scale: it runs the real loop and prints the documented JSON shape."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_learning_bench_prints_its_json_shape_and_ends_each_run_at_its_env_step_budget(tmp_path):
    """A budget of 1 env step ends every run after its first update, which is evaluated though off the grid."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "learning.py"), "--estimators", "gigpo",
                           "--envs", "Maze-v0,KeyDoor-v0", "--env-steps", "1", "--seeds", "1", "--eval-tasks", "4",
                           "--plot", str(tmp_path / "curves.png"), "--set", "sft_steps=2", "--set", "sft_episodes=2",
                           "--set", "groups_per_batch=2", "--set", "group_size=4", "--set", "concurrency=8",
                           "--eval-temperature", "0.4", "--eval-samples", "2", "--jobs", "1", "--json"],
                          capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert set(data["envs"]) == {"Maze-v0", "KeyDoor-v0"}
    assert data["budget"] == {"updates": 100_000, "env_steps": 1, "wall_s": None}
    assert data["eval"] == {"temperature": 0.4, "samples": 2, "tasks": 4, "every": 2}
    sys.path.insert(0, str(ROOT))
    from bench.learning_report import checkout_commit

    commit = checkout_commit()  # the shard names the code it ran (none outside a git checkout)
    assert data["commits"] == ([commit] if commit else [])
    for per in data["envs"].values():
        assert set(per) == {"gigpo"}
        for e in per.values():
            for key in ("updates_to_0.5", "updates_to_0.8", "final_success", "collapsed"):
                assert len(e[key]) == 1, key
            assert e["updates_to_0.5"][0] in (None, 0, 1) and 0.0 <= e["final_success"][0] <= 1.0
            # the warm start is evaluated as update 0: where every estimator of the seed starts from
            assert [u for u, _, _ in e["curve"][0]] == [0, 1] and e["start_success"] == [e["curve"][0][0][2]]
            assert e["collapsed"] == [False] and e["stopped_by"] == ["env_steps"] and len(e["wall_s"]) == 1
            assert len(e["train_success"]) == 1 and len(e["train_success"][0]) == 1
            # the weights RL started from, so that shards pair runs by what they started from
            assert len(e["warm_start"]) == 1 and re.fullmatch(r"[0-9a-f]{12}", e["warm_start"][0])
    assert (tmp_path / "curves.png").stat().st_size > 1000


@pytest.mark.parametrize(("extra", "words"), [
    (["--wall-s", "60", "--time-limit", "90"], "give one"),
    (["--env-steps", "0"], "must be > 0"),
    (["--eval-samples", "3"], "needs --eval-temperature > 0"),
])
def test_conflicting_or_empty_budgets_are_refused(extra, words):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "learning.py"), "--estimators", "grpo", *extra],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and words in done.stderr, done.stderr[-2000:]


def test_the_paired_gap_compares_the_last_half_of_the_same_seeds_updates():
    sys.path.insert(0, str(ROOT))
    from bench.learning_report import paired_gap

    grpo = {"seed": [0, 1], "train_success": [[0.2, 0.3, 0.4, 0.5], [0.5, 0.5, 0.5, 0.5]]}
    other = {"seed": [1, 0, 7], "train_success": [[0.5, 0.5, 0.6, 0.7], [0.9, 0.9, 0.5, 0.5], [1.0] * 4]}
    # seed 1: (0.6 - 0.5 + 0.7 - 0.5) / 2; seed 0: (0.5 - 0.4 + 0.5 - 0.5) / 2; seed 7 has no baseline run
    assert paired_gap(other, grpo) == pytest.approx([0.15, 0.05])


def test_the_race_to_a_threshold_counts_seeds_ahead_level_and_behind_the_baseline():
    sys.path.insert(0, str(ROOT))
    from bench.learning_report import race

    grpo = {"seed": [0, 1, 2, 3, 4], "updates_to_0.8": [2, None, 0, 5, None]}
    other = {"seed": [4, 3, 2, 1, 0, 9], "updates_to_0.8": [None, 3, 0, 7, 2, 1]}
    # seed 4 never/never: level; 3: 3 < 5 ahead; 2: 0 = 0 level; 1: 7 < never ahead; 0: level; 9: no baseline
    assert race(other, grpo) == (2, 3, 0)
    assert race(grpo, other) == (0, 3, 2)
    assert race({"seed": [5], "updates_to_0.8": [1]}, grpo) is None


def test_the_race_column_carries_the_sign_test_of_ahead_against_behind():
    sys.path.insert(0, str(ROOT))
    from bench.learning_report import describe_race, sign_test

    assert sign_test(5, 0) == pytest.approx(2 / 32)  # the best a five-seed race can show
    assert sign_test(4, 1) == pytest.approx(2 * 6 / 32)
    assert sign_test(1, 4) == sign_test(4, 1)
    assert sign_test(15, 1) == pytest.approx(2 * 17 / 2 ** 16)  # level seeds do not count
    assert sign_test(2, 2) == 1.0 and sign_test(0, 0) == 1.0
    assert describe_race((4, 0, 1)) == "4/0/1 (p 0.38)"
    assert describe_race(None) == "-"


def test_the_mean_updates_to_a_threshold_also_counts_the_seeds_that_never_reached_it_as_the_budget():
    """Over reaching seeds only, an estimator that reaches 0.8 on its two easiest seeds looks faster than one that
    reaches it on all five; the table also prints the mean over every seed with a never as the budget."""
    sys.path.insert(0, str(ROOT))
    from bench.learning_report import mean_updates

    assert mean_updates([None, 14, None, 10, None], 40) == "12.0 (2/5); all >= 28.8"
    assert mean_updates([20, 16, 36, 6, 16], 40) == "18.8 (5/5)"
    assert mean_updates([None, None], 40) == "- (0/2)"
    assert mean_updates([None, 4], None) == "4.0 (1/2)"  # a budget of env steps or seconds: no update count


@pytest.mark.extended
def test_the_estimators_of_one_seed_share_one_warm_start_that_is_the_runs_own_bit_for_bit(tmp_path):
    """The benchmark does the SFT once per env and seed (`warm_start_only`) and starts every estimator from it:
    the policy is exactly the one a run's own warm start leaves (same model init, same demonstrations)."""
    import torch
    from agentgym.trainer.sft import warm_start_only
    from agentgym.trainer.train import train
    from safetensors.torch import load_file

    from agentgym.config import load_train_config

    base = {"updates": 1, "groups_per_batch": 2, "group_size": 4, "sft_steps": 3, "sft_episodes": 4, "eval_tasks": 0,
            "eval_every": 0, "checkpoint_every": 0, "torch_threads": 1, "tensorboard": False, "plot": False,
            "drop_zero_variance": False, "concurrency": 8}
    own = load_train_config(ROOT / "configs" / "keydoor.yaml", {**base, "output_dir": str(tmp_path / "own")})
    train(own)
    shared = warm_start_only(load_train_config(ROOT / "configs" / "grpo.yaml", {
        **base, "env": "KeyDoor-v0", "env_kwargs": {"difficulty": "medium"}, "keep_turns": 0,
        "output_dir": str(tmp_path / "shared")}))
    a = load_file(str(own.run_dir / "checkpoints" / "sft" / "policy" / "model.safetensors"))
    b = load_file(str(shared / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    # two runs at once (the warm start first, then both runs), GiGPO with a parameter over its recipe's
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "learning.py"), "--estimators",
                           "grpo,gigpo:gamma=0.8", "--envs", "KeyDoor-v0", "--updates", "1", "--seeds", "1",
                           "--jobs", "2", "--torch-threads", "1", "--eval-tasks", "2", "--plot", "",
                           "--runs-dir", str(tmp_path / "runs"), "--set", "sft_steps=2", "--set", "sft_episodes=2",
                           "--set", "groups_per_batch=2", "--set", "group_size=4", "--set", "concurrency=8",
                           "--eval-temperature", "0.4", "--eval-samples", "2", "--jobs", "1", "--json"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 shared warm start(s) for 2 runs" in done.stderr
    assert set(json.loads(done.stdout)["envs"]["KeyDoor-v0"]) == {"grpo", "gigpo:gamma=0.8"}
    configs = {p.parent.name: json.loads(p.read_text())
               for p in (tmp_path / "runs").glob("KeyDoor-v0-*-s0/run_config.json")}
    assert sorted(configs) == ["KeyDoor-v0-gigpo-gamma_0.8-s0", "KeyDoor-v0-grpo-s0"]
    # the spec's parameter over the recipe's (configs/gigpo.yaml: omega 1.0, gamma 0.95)
    assert configs["KeyDoor-v0-gigpo-gamma_0.8-s0"]["estimator_params"] == {"omega": 1.0, "gamma": 0.8}
    assert all(c["sft_steps"] == 0 and c["model"].endswith("checkpoints/sft/policy") for c in configs.values())
    assert len({c["model"] for c in configs.values()}) == 1
    # every estimator runs KeyDoor-v0 as the env's recipe does (configs/keydoor.yaml): its level and prompt window
    assert all(c["env_kwargs"] == {"difficulty": "medium"} and c["keep_turns"] == 0 for c in configs.values())

    # a later benchmark on the same runs directory lends the kept warm start again, does not run again what
    # finished there under the same config (GRPO), and runs afresh what did not finish (RLOO, killed before)
    unfinished = tmp_path / "runs" / "KeyDoor-v0-rloo-s0"
    unfinished.mkdir()
    (unfinished / "episodes.db").write_text("what a killed run left")
    again = subprocess.run([*done.args[:3], "grpo,rloo", *done.args[4:]], capture_output=True, text=True,
                           timeout=600, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("kept from") == 2 and "replacing" in again.stderr  # the warm start, GRPO; RLOO
    first, second = (json.loads(d.stdout)["envs"]["KeyDoor-v0"] for d in (done, again))
    assert second["grpo"] == first["grpo"] and set(second) == {"grpo", "rloo"}
    rloo = json.loads((tmp_path / "runs" / "KeyDoor-v0-rloo-s0" / "run_config.json").read_text())
    assert rloo["model"] == configs["KeyDoor-v0-grpo-s0"]["model"]


@pytest.mark.parametrize(("spec", "words"), [
    ("gigpo:gama=0.8", "gama"),  # a typo in a parameter: the estimator registry names what it takes
    ("gigpo:gamma", "key=value"),
    ("gigpoo", "configs/gigpoo.yaml"),
    ("grpo,grpo", "twice"),
])
def test_a_bad_estimator_spec_is_refused_before_any_run(tmp_path, spec, words):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "learning.py"), "--estimators", spec, "--envs",
                           "KeyDoor-v0", "--runs-dir", str(tmp_path / "runs"), "--json"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and words in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "runs").exists()


def test_estimator_specs_split_at_commas_unless_they_carry_parameters():
    sys.path.insert(0, str(ROOT))
    from bench.estimator_specs import parse_spec, split_specs

    assert split_specs("grpo, gigpo:omega=0.5,gamma=0.8;rloo,gae") == ["grpo", "gigpo:omega=0.5,gamma=0.8", "rloo", "gae"]
    assert parse_spec("gigpo:omega=0.5,gamma=0.8") == ("gigpo", {"omega": 0.5, "gamma": 0.8})
    assert parse_spec("trace:allocation=uniform") == ("trace", {"allocation": "uniform"})


@pytest.mark.timeout(480)
def test_a_run_that_fails_stops_the_benchmark_at_once_and_is_named(tmp_path):
    """With --jobs, the first run that raises ends the benchmark now (not after the other runs) and names itself."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "Maze-v0-rloo-s0").write_text("a file where the run's directory goes: this run fails at once")
    bench = subprocess.Popen([sys.executable, str(ROOT / "bench" / "learning.py"), "--estimators", "grpo,rloo",
                              "--envs", "Maze-v0", "--updates", "200", "--seeds", "1", "--jobs", "2",
                              "--torch-threads", "1", "--eval-tasks", "4", "--runs-dir", str(runs),
                              "--fresh-warm-starts", "--set", "sft_steps=0", "--set", "groups_per_batch=2",
                              "--set", "group_size=4", "--set", "concurrency=8"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        _, err = bench.communicate(timeout=300)  # GRPO alone would take far longer: 200 updates
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode != 0
    assert "RunFailed: the run of Maze-v0 rloo seed 0 failed" in err, err[-3000:]
    assert not (runs / "Maze-v0-grpo-s0" / "bench_outcome.json").exists()  # stopped, not run to its end


def _children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.extended
@pytest.mark.timeout(480)
def test_a_killed_benchmark_leaves_no_run_behind(tmp_path):
    """`--jobs` workers end with the benchmark (SIGKILL included), so none keeps writing into --runs-dir."""
    import signal
    import time

    bench = subprocess.Popen([sys.executable, str(ROOT / "bench" / "learning.py"), "--estimators", "grpo",
                              "--envs", "Maze-v0", "--updates", "50", "--seeds", "2", "--jobs", "2",
                              "--torch-threads", "1", "--eval-tasks", "4", "--runs-dir", str(tmp_path / "runs"),
                              "--set", "sft_steps=2", "--set", "sft_episodes=2", "--set", "groups_per_batch=2",
                              "--set", "group_size=4", "--set", "concurrency=8"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        while not any((d / "metrics.jsonl").exists() for d in (tmp_path / "runs").glob("*")):
            assert bench.poll() is None, "the benchmark ended before any run started"
            time.sleep(1)  # a run that never starts meets the test's timeout
        workers = [p for p in _children(bench.pid) if _alive(p)]
        assert workers
        bench.send_signal(signal.SIGKILL)
        bench.wait(timeout=30)
        deadline = time.monotonic() + 60
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not [p for p in workers if _alive(p)]
    finally:
        if bench.poll() is None:
            bench.kill()


def test_shards_evaluated_differently_are_not_merged(tmp_path):
    sys.path.insert(0, str(ROOT))
    from bench.learning_report import merge

    def shard(name: str, evaluation: dict | None) -> str:
        data = {"envs": {}, "updates": 4, "seeds": 1, "budget": {"updates": 4, "env_steps": None, "wall_s": None}}
        if evaluation is not None:
            data["eval"] = evaluation
        (tmp_path / name).write_text(json.dumps(data))
        return str(tmp_path / name)

    greedy = shard("a.json", None)  # an object from before the eval key: greedy
    assert merge([greedy, shard("b.json", {"temperature": 0.0, "samples": 1})])["eval"]["temperature"] == 0.0
    with pytest.raises(SystemExit, match="must evaluate alike"):
        merge([greedy, shard("c.json", {"temperature": 0.4, "samples": 4})])
    new = {"temperature": 0.0, "samples": 1, "tasks": 64, "every": 2}  # a shard that says how many tasks, how often
    assert merge([greedy, shard("d.json", new)])["eval"] == new  # an older shard is compared on what it says
    for other in ({**new, "tasks": 128}, {**new, "every": 5}):
        with pytest.raises(SystemExit, match="must evaluate alike"):
            merge([shard("d.json", new), shard("e.json", other)])


def test_merged_shards_list_the_commits_they_came_from(tmp_path):
    sys.path.insert(0, str(ROOT))
    from bench.learning_report import merge

    paths = []
    for name, commits in (("a", ["abc"]), ("b", ["abc"]), ("c", ["def-dirty"]), ("d", None)):
        data = {"envs": {}, "updates": 4, "seeds": 1, "budget": {"updates": 4, "env_steps": None, "wall_s": None}}
        if commits is not None:
            data["commits"] = commits
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
        paths.append(str(tmp_path / f"{name}.json"))
    assert merge(paths)["commits"] == ["abc", "def-dirty"]


def test_a_seed_run_twice_is_not_merged_twice(tmp_path):
    """Races and paired gaps pair estimators by seed: two runs of one seed (a rerun after a fix, kept beside the
    old shard) must not both count; the merge names both files and says what to do."""
    sys.path.insert(0, str(ROOT))
    from bench.learning_report import merge

    def shard(name: str, per: dict[str, list[int]]) -> str:
        envs = {"KeyDoor-v0": {est: {"seed": seeds, "final_success": [0.5] * len(seeds)} for est, seeds in per.items()}}
        data = {"envs": envs, "updates": 4, "seeds": 1, "budget": {"updates": 4, "env_steps": None, "wall_s": None}}
        (tmp_path / name).write_text(json.dumps(data))
        return str(tmp_path / name)

    old = shard("old.json", {"grpo": [0, 1], "oprl": [0, 1]})
    merged = merge([old, shard("more.json", {"grpo": [2], "oprl": [2]}), shard("other.json", {"gigpo": [0]})])
    assert merged["envs"]["KeyDoor-v0"]["oprl"]["seed"] == [0, 1, 2] and merged["seeds"] == 3
    with pytest.raises(SystemExit, match=r"new.json: seed 1 of oprl on KeyDoor-v0 .*is also in .*old.json.*superseded"):
        merge([old, shard("new.json", {"oprl": [1, 2]})])


def test_runs_pair_by_seed_and_machine(tmp_path):
    """One seed's warm start differs between machines (KeyDoor-v0 seed 0: 0.28 on one, 0.45 on another), so a
    race or a paired gap compares an estimator's run with the baseline's of the same seed on the same machine;
    the same seed from two machines is two runs, not a duplicate, and a merged object merges again alike."""
    sys.path.insert(0, str(ROOT))
    from bench.learning_report import machine_id, merge, paired_gap, race

    def shard(name: str, machine: str | None, per: dict[str, tuple[list[int], list[int | None]]]) -> str:
        envs = {"KeyDoor-v0": {est: {"seed": seeds, "updates_to_0.8": reached, "final_success": [0.5] * len(seeds),
                                     "train_success": [[0.5] * 4] * len(seeds)} for est, (seeds, reached) in per.items()}}
        data = {"envs": envs, "updates": 4, "seeds": 1, "budget": {"updates": 4, "env_steps": None, "wall_s": None}}
        if machine:
            data["machine"] = machine
        (tmp_path / name).write_text(json.dumps(data))
        return str(tmp_path / name)

    a = shard("a.json", None, {"grpo": ([0], [10]), "gigpo": ([0], [8])})  # before the key: "unrecorded"
    b = shard("b.json", "x86_64-beef", {"grpo": ([0], [None]), "oprl": ([0], [12])})
    merged = merge([a, b])
    per = merged["envs"]["KeyDoor-v0"]
    assert per["grpo"]["machine"] == ["unrecorded", "x86_64-beef"] and per["grpo"]["seed"] == [0, 0]
    assert race(per["gigpo"], per["grpo"]) == (1, 0, 0)  # against a's GRPO (10), not b's (never)
    assert race(per["oprl"], per["grpo"]) == (1, 0, 0)  # against b's GRPO: never
    assert len(paired_gap(per["oprl"], per["grpo"])) == 1
    (tmp_path / "m.json").write_text(json.dumps(merged))
    assert merge([str(tmp_path / "m.json")])["envs"]["KeyDoor-v0"]["grpo"]["machine"] == per["grpo"]["machine"]
    assert machine_id() == machine_id() and machine_id().count("-") == 1


def test_runs_pair_by_the_digest_of_the_weights_they_started_from_where_shards_record_it(tmp_path):
    """A warm-start digest pairs runs exactly: across machines where the weights were equal, not on one machine
    where they were not; a shard without digests (written before them) still pairs by machine."""
    sys.path.insert(0, str(ROOT))
    from bench.learning_report import merge, paired, paired_gap, race, weights_digest

    policy = tmp_path / "policy"
    policy.mkdir()
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        weights_digest(policy)
    (policy / "model.safetensors").write_bytes(b"weights")
    (policy / "config.json").write_text("{}")
    digest = weights_digest(policy)
    (policy / "config.json").write_text('{"changed": true}')  # not weights: the same digest
    assert weights_digest(policy) == digest and re.fullmatch(r"[0-9a-f]{12}", digest)
    (policy / "model.safetensors").write_bytes(b"other weights")
    assert weights_digest(policy) != digest

    def shard(name: str, machine: str, per: dict[str, tuple[list[int], list[int | None], list[str | None]]]) -> str:
        envs = {"KeyDoor-v0": {est: {"seed": seeds, "updates_to_0.8": reached, "warm_start": warm,
                                     "final_success": [0.5] * len(seeds), "train_success": [[0.5] * 4] * len(seeds)}
                               for est, (seeds, reached, warm) in per.items()}}
        data = {"envs": envs, "updates": 4, "seeds": 1, "machine": machine,
                "budget": {"updates": 4, "env_steps": None, "wall_s": None}}
        (tmp_path / name).write_text(json.dumps(data))
        return str(tmp_path / name)

    a = shard("a.json", "x86_64-aaaa", {"grpo": ([0, 1], [10, 4], ["d0", "d1"])})
    b = shard("b.json", "x86_64-bbbb", {"gigpo": ([0, 1], [8, 2], ["d0", "e1"])})  # seed 1 from other weights
    c = shard("c.json", "x86_64-aaaa", {"oprl": ([0, 1], [None, 2], [None, None])})  # no digests: by machine
    per = merge([a, b, c])["envs"]["KeyDoor-v0"]
    assert race(per["gigpo"], per["grpo"]) == (1, 0, 0)  # seed 0 only: same weights on another machine
    assert len(paired_gap(per["gigpo"], per["grpo"])) == 1
    assert race(per["oprl"], per["grpo"]) == (1, 0, 1)  # both seeds, paired by machine

    # two machine types with equal warm starts, each racing both estimators: each run meets its own machine's
    d = shard("d.json", "x86_64-aaaa", {"grpo": ([2], [10], ["d2"]), "gigpo": ([2], [8], ["d2"])})
    e = shard("e.json", "x86_64-bbbb", {"grpo": ([2], [4], ["d2"]), "gigpo": ([2], [6], ["d2"])})
    for order in ([d, e], [e, d]):
        per = merge(order)["envs"]["KeyDoor-v0"]
        assert race(per["gigpo"], per["grpo"]) == (1, 0, 1)
    f = shard("f.json", "x86_64-cccc", {"spa": ([2], [9], ["d2"])})
    g = shard("g.json", "x86_64-dddd", {"spa": ([2], [12], ["d2"])})
    per = merge([d, f, g])["envs"]["KeyDoor-v0"]
    assert race(per["spa"], per["grpo"]) == (1, 0, 1)  # one baseline run: both pair with it, none left out
    # a run from a third machine listed first does not take the baseline run of a machine that raced there too
    base = {"seed": [2, 2], "machine": ["a", "b"], "warm_start": ["d2", "d2"], "k": [10, 4]}
    runs = {"seed": [2, 2], "machine": ["c", "a"], "warm_start": ["d2", "d2"], "k": [1, 2]}
    assert paired(runs, base, "k") == [(1, 4), (2, 10)]


def test_a_shard_evaluated_every_update_is_read_every_two_as_if_evaluated_that_often(tmp_path):
    """`--merge --read-every 2`: the kept points are the even updates and the last; the first update at each
    threshold, and a collapse, are read from those alone; a spacing that is not a multiple is refused."""
    sys.path.insert(0, str(ROOT))
    from bench.learning_report import merge

    curve = [[0, 0, 0.4], [1, 10, 0.82], [2, 20, 0.6], [3, 30, 0.7], [4, 40, 0.81], [5, 50, 0.55]]
    e = {"seed": [0], "curve": [curve], "final_success": [0.55], "collapsed": [True],
         "updates_to_0.5": [1], "updates_to_0.8": [1], "env_steps_to_0.5": [10], "env_steps_to_0.8": [10]}
    data = {"envs": {"KeyDoor-v0": {"gigpo": e}}, "updates": 5, "seeds": 1, "machine": "x86_64-aaaa",
            "budget": {"updates": 5, "env_steps": None, "wall_s": None},
            "eval": {"temperature": 0.0, "samples": 1, "tasks": 64, "every": 1}}
    (tmp_path / "a.json").write_text(json.dumps(data))
    read = merge([str(tmp_path / "a.json")], every=2)
    g = read["envs"]["KeyDoor-v0"]["gigpo"]
    assert [p[0] for p in g["curve"][0]] == [0, 2, 4, 5] and read["eval"]["every"] == 2
    assert g["updates_to_0.5"] == [2] and g["updates_to_0.8"] == [4] and g["env_steps_to_0.8"] == [40]
    assert g["collapsed"] == [True] and g["final_success"] == [0.55]  # 0.81 -> 0.55 is still a fall of 0.26
    assert merge([str(tmp_path / "a.json")])["envs"]["KeyDoor-v0"]["gigpo"]["updates_to_0.8"] == [1]
    with pytest.raises(SystemExit, match="give a number of updates >= 1"):
        merge([str(tmp_path / "a.json")], every=0)
    # a shard evaluated every 2 merges with one evaluated every update, read every 2
    data2 = {**data, "eval": {**data["eval"], "every": 2}, "envs": {"KeyDoor-v0": {"grpo": {
        **e, "curve": [[p for p in curve if p[0] % 2 == 0 or p[0] == 5]]}}}}
    (tmp_path / "b.json").write_text(json.dumps(data2))
    with pytest.raises(SystemExit, match="must evaluate alike"):
        merge([str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    both = merge([str(tmp_path / "a.json"), str(tmp_path / "b.json")], every=2)["envs"]["KeyDoor-v0"]
    assert both["grpo"]["updates_to_0.8"] == both["gigpo"]["updates_to_0.8"] == [4]
    with pytest.raises(SystemExit, match="grpo seed 0 on KeyDoor-v0 was not evaluated at update.*3.*every 3"):
        merge([str(tmp_path / "b.json")], every=3)


def test_jobs_left_out_fill_the_cores_with_one_run_per_torch_threads():
    sys.path.insert(0, str(ROOT))
    from bench.learning import auto_jobs

    cores = len(os.sched_getaffinity(0))
    assert auto_jobs(1, 1000) == cores
    assert auto_jobs(1, 1) == 1  # never more processes than runs
    assert auto_jobs(cores + 1, 1000) == 1  # threads above the cores: still one run


def test_a_warm_start_target_is_part_of_the_warm_start_key_and_its_check_settings_only_with_a_target():
    """`--set sft_target_success=...` gives another warm start than the fixed steps; without a target the checks'
    settings do not change the key, so the warm starts kept in a runs directory before they existed stay valid."""
    import argparse
    import tempfile

    sys.path.insert(0, str(ROOT))
    from bench.learning import run_config, warm_start_key

    def key(**overrides) -> str:
        args = argparse.Namespace(updates=2, eval_tasks=4, eval_every=2, time_limit=None, env_steps=None,
                                  torch_threads=1, eval_temperature=0.0, eval_samples=1, overrides=overrides)
        return warm_start_key(run_config("KeyDoor-v0", "grpo", 0, args, Path(tempfile.gettempdir())))

    plain = key()
    assert key(sft_check_every=5, sft_check_tasks=8) == plain
    target = key(sft_target_success=0.5)
    assert target != plain and key(sft_target_success=0.5, sft_check_every=5) != target


def test_a_benchmark_with_a_warm_start_target_reports_where_sft_stopped_and_runs_from_it(tmp_path):
    """`--set sft_target_success=...`: the shared warm start stops at the target and says so, and the runs start
    RL from it (they do no SFT of their own, so the target is not theirs to check)."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "learning.py"), "--estimators", "grpo",
                           "--envs", "Maze-v0", "--updates", "1", "--seeds", "1", "--jobs", "1", "--eval-tasks", "2",
                           "--plot", "", "--runs-dir", str(tmp_path / "runs"), "--set", "sft_steps=6",
                           "--set", "sft_episodes=4", "--set", "sft_target_success=0.01", "--set", "sft_check_every=2",
                           "--set", "sft_check_tasks=4", "--set", "groups_per_batch=2", "--set", "group_size=2",
                           "--set", "concurrency=8", "--json"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"SFT (reached|ended below) its target after \d+ steps", done.stderr)
    run = json.loads((tmp_path / "runs" / "Maze-v0-grpo-s0" / "run_config.json").read_text())
    assert run["sft_steps"] == 0 and run["sft_target_success"] is None
