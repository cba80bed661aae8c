"""strategy: ddp | fsdp2 on CPU with gloo, 2 ranks launched by torchrun in a loopback-only network namespace.

The parity tests run `bench/trainer_ranks.py` (the trainer's own `build_policy_side` and update on a seeded
synthetic global batch) with 1 process and with 2 ranks: the objective of every update must agree to 1e-5
(relative) and the weights after 3 updates to 1e-4, for ddp and fsdp2, with GRPO and with a critic (GAE) after
an SFT warm start, and with a learned credit model (OPRL) under fsdp2; a sharded checkpoint saved with one
world size resumes with the other and lands on the uninterrupted run's weights. Two torchrun agents of one
rank each, started as if on two nodes (static and c10d rendezvous on 127.0.0.1), give the same numbers as one
process, and so do 2 fsdp2 ranks training a LoRA adapter (whose sharded checkpoint resumes on 1 rank).
The end-to-end test trains
the tiny model on Maze-v0 with `torchrun -m agentgym train`, kills rank 1 mid-run, and resumes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from agentgym.config import load_train_config
from agentgym.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
NETNS = ROOT / "scripts" / "ray-netns.sh"
RANKS = ROOT / "bench" / "trainer_ranks.py"
#: torchrun through this interpreter (a console script copied between venvs may name another one)
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]

#: make test runs these alone, after the parallel pass: the c10d rendezvous (it once aborted with SIGABRT beside
#: other tests) and the killed rank (its run must reach update 2 and end within a time limit). The other torchrun
#: process groups compare numbers and files, which load cannot change: they run in the parallel pass, each in a
#: loopback-only network namespace of its own (so their fixed master port is never shared)
torchrun_alone = pytest.mark.serial

needs_netns = pytest.mark.skipif(not (shutil.which("unshare") and shutil.which("ip")),
                                 reason="needs unshare (util-linux) and ip (iproute2): run scripts/apt.sh")


def torchrun(nproc: int, *args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node nproc ARGS` inside a fresh loopback-only network namespace."""
    cmd = [str(NETNS), *TORCHRUN, f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1", "--master-port=29500",
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def ranks(tmp: Path, name: str, world: int, *extra: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """Run the fixed-batch worker with `world` ranks (1: a plain process); (result, full weights)."""
    out, weights = tmp / f"{name}.json", tmp / f"{name}.pt"
    args = [str(RANKS), "--out", str(out), "--weights", str(weights), *extra]
    if world == 1:
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300)
    else:
        done = torchrun(world, *args)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text()), torch.load(weights)


def assert_same(a: tuple[dict, dict], b: tuple[dict, dict], *, losses: bool = True) -> None:
    if losses:
        for x, y in zip(a[0]["losses"], b[0]["losses"], strict=True):
            assert abs(x - y) <= 1e-5 * max(abs(x), abs(y)), (a[0]["losses"], b[0]["losses"])
    assert a[1].keys() == b[1].keys()
    for key in a[1]:
        assert torch.allclose(a[1][key].float(), b[1][key].float(), rtol=0, atol=1e-4), key


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> tuple[dict, dict]:
    return ranks(tmp_path_factory.mktemp("single"), "single", 1, "--strategy", "single", "--updates", "3")


#: a critic estimator (GAE) after an SFT warm start: the leader's critic, every rank's share of SFT
CRITIC_SFT = ("--updates", "3", "--sft-steps", "2", "--set", "estimator=gae")


@pytest.fixture(scope="module")
def one_process_critic_sft(tmp_path_factory) -> tuple[dict, dict]:
    return ranks(tmp_path_factory.mktemp("single-gae"), "single", 1, "--strategy", "single", *CRITIC_SFT)


def test_config_refuses_more_ranks_than_devices_and_unsupported_combinations():
    with pytest.raises(ConfigError, match="lower world_size"):
        load_train_config(None, {"strategy": "ddp", "world_size": (os.cpu_count() or 1) + 1, "device": "cpu"})
    with pytest.raises(ConfigError, match="strategy: single runs one process"):
        load_train_config(None, {"world_size": 2})
    with pytest.raises(ConfigError, match="set strategy: ddp or fsdp2"):
        load_train_config(None, {"world_size": 2})
    load_train_config(None, {"strategy": "fsdp2", "world_size": 1, "lora_rank": 4})  # LoRA shards like the rest
    for estimator in ("gae", "spa", "oprl"):  # critic and learned credit models: on the leader
        load_train_config(None, {"strategy": "fsdp2", "world_size": 1, "estimator": estimator, "sft_steps": 2})


@needs_netns
# fsdp2 ranks' numbers: the two torchrun nodes (fsdp2, 3 updates) and the sharded checkpoint saved by 2 ranks
@pytest.mark.parametrize("strategy", ["ddp", pytest.param("fsdp2", marks=pytest.mark.extended)])
def test_two_ranks_give_the_one_process_losses_and_weights(tmp_path, one_process, strategy):
    two = ranks(tmp_path, strategy, 2, "--strategy", strategy, "--updates", "3")
    assert two[0]["world_size"] == 2 and len(two[0]["losses"]) == 3
    assert_same(one_process, two)


@needs_netns
@pytest.mark.parametrize("strategy", [pytest.param("ddp", marks=pytest.mark.extended), "fsdp2"])  # ddp ranks: above
def test_two_ranks_match_one_process_with_a_critic_after_an_sft_warm_start(tmp_path, one_process_critic_sft,
                                                                            strategy):
    two = ranks(tmp_path, strategy, 2, "--strategy", strategy, *CRITIC_SFT)
    assert two[0]["critic_losses"] == pytest.approx(one_process_critic_sft[0]["critic_losses"], rel=1e-5)
    assert two[0]["sft_losses"] == pytest.approx(one_process_critic_sft[0]["sft_losses"], rel=1e-5)
    assert_same(one_process_critic_sft, two)


@pytest.mark.slow
@needs_netns
def test_two_fsdp2_ranks_match_one_process_with_a_learned_credit_model(tmp_path):
    # OPRL's implicit PRM lives on the leader, copied from the gathered (unsharded) policy weights
    learned = ("--updates", "3", "--set", "estimator=oprl")
    one = ranks(tmp_path, "single", 1, "--strategy", "single", *learned)
    assert_same(one, ranks(tmp_path, "fsdp2", 2, "--strategy", "fsdp2", *learned))


#: `nodes` torchrun agents started side by side in one loopback-only namespace; NODE_RANK in an argument
#: becomes each agent's node rank. Exits with the last failing agent's status.
NODES_SCRIPT = """
pids=()
for n in $(seq 0 $((NODES - 1))); do "${@/NODE_RANK/$n}" > "$LOGS/node$n.log" 2>&1 & pids+=($!); done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
"""

RENDEZVOUS = {  # the two ways docs/distributed.md launches several nodes
    "static": ["--master-addr=127.0.0.1", "--master-port=29500", "--node-rank=NODE_RANK"],
    "c10d": ["--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:29400", "--rdzv-id=agentgym-test",
             "--local-addr=127.0.0.1"],
}


@torchrun_alone
@needs_netns
@pytest.mark.parametrize("rendezvous", [pytest.param("static", marks=pytest.mark.extended), "c10d"])
def test_two_torchrun_nodes_give_the_one_process_losses_and_weights(tmp_path, one_process, rendezvous):
    # two torchrun agents, one rank each, as on two hosts: they meet only through the rendezvous on 127.0.0.1
    out, weights = tmp_path / "nodes.json", tmp_path / "nodes.pt"
    agent = [*TORCHRUN, "--nnodes=2", "--nproc-per-node=1", *RENDEZVOUS[rendezvous], str(RANKS),
             "--strategy", "fsdp2", "--updates", "3", "--set", "nodes=2", "--out", str(out), "--weights", str(weights)]
    done = subprocess.run([str(NETNS), "bash", "-c", NODES_SCRIPT, "nodes", *agent], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), "NODES": "2",
                                                       "LOGS": str(tmp_path)})
    logs = "\n".join((tmp_path / f"node{n}.log").read_text()[-2000:] for n in range(2))
    assert done.returncode == 0, logs
    result = json.loads(out.read_text())
    assert result["world_size"] == 2  # one rank from each agent: the two formed one group
    assert_same(one_process, (result, torch.load(weights)))


def test_a_lora_models_own_state_merges_into_the_base_models_weights():
    from agentgym.trainer.model import ModelSpec, build_model, merge_lora_state, merged_state_dict

    from agentgym.policy.models import TinyModelSpec

    model, _ = build_model(ModelSpec(tiny=TinyModelSpec(hidden_size=32, num_layers=1, intermediate_size=64,
                                                        num_heads=2, num_kv_heads=2), device="cpu", lora_rank=4))
    with torch.no_grad():  # a trained adapter (PEFT starts lora_B at zero, which would merge to the base)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_()
    merged, expected = merge_lora_state(model, model.state_dict()), merged_state_dict(model)
    assert merged.keys() == expected.keys() and not any("lora" in k or "base_layer" in k for k in merged)
    for key in merged:
        assert torch.allclose(merged[key], expected[key], atol=1e-6), key


#: a LoRA adapter on the tiny model (PEFT), 3 updates
LORA = ("--updates", "3", "--set", "lora_rank=4")


@pytest.fixture(scope="module")
def one_process_lora(tmp_path_factory) -> tuple[dict, dict]:
    tmp = tmp_path_factory.mktemp("single-lora")
    result = ranks(tmp, "single", 1, "--strategy", "single", *LORA, "--adapter", str(tmp / "adapter.pt"))
    return result[0] | {"adapter": torch.load(tmp / "adapter.pt")}, result[1]


@pytest.mark.extended  # the LoRA resume below: two fsdp2 ranks' updates then one process's equal the one process's
@needs_netns
def test_two_fsdp2_ranks_train_a_lora_adapter_like_one_process(tmp_path, one_process_lora):
    # PEFT's frozen base and trainable adapter sharded by fully_shard; an adapter-only sync gathers the adapter
    # whole on the leader (the follower joins), the full weights come out merged in the base model's names
    two = ranks(tmp_path, "fsdp2", 2, "--strategy", "fsdp2", *LORA, "--adapter", str(tmp_path / "two.adapter"),
                "--save", str(tmp_path / "run"))
    assert_same(one_process_lora, two)
    assert not any("lora" in k for k in two[1])
    (a, scale_a), (b, scale_b) = one_process_lora[0]["adapter"], torch.load(tmp_path / "two.adapter")
    assert scale_a == scale_b and a.keys() == b.keys() and len(a) > 0
    assert all(torch.allclose(a[k], b[k], atol=1e-4) for k in a)
    from safetensors.torch import load_file  # the checkpoint's policy/ is a plain model of the merged weights

    saved = load_file(next((tmp_path / "run" / "checkpoints").glob("update-*/policy/model.safetensors")))
    assert saved.keys() == two[1].keys()


@needs_netns
def test_a_lora_checkpoint_of_two_fsdp2_ranks_resumes_on_one(tmp_path, one_process_lora):
    ranks(tmp_path, "a", 2, "--strategy", "fsdp2", "--updates", "2", "--set", "lora_rank=4",
          "--save", str(tmp_path / "two"))
    resumed = ranks(tmp_path, "b", 1, "--strategy", "fsdp2", "--updates", "1", "--set", "lora_rank=4",
                    "--load", str(tmp_path / "two"))
    assert_same(one_process_lora, resumed, losses=False)
    assert resumed[0]["losses"][0] == pytest.approx(one_process_lora[0]["losses"][2], rel=1e-5)


@needs_netns
def test_a_sharded_checkpoint_of_two_ranks_resumes_on_one(tmp_path, one_process):
    # saved by 2 fsdp2 ranks after 2 updates, resumed by 1 process for the 3rd: the uninterrupted run's weights
    ranks(tmp_path, "a", 2, "--strategy", "fsdp2", "--updates", "2", "--save", str(tmp_path / "two"))
    assert len(list((tmp_path / "two" / "checkpoints").glob("update-000002/shards/*.distcp"))) == 2
    resumed = ranks(tmp_path, "b", 1, "--strategy", "fsdp2", "--updates", "1", "--load", str(tmp_path / "two"))
    assert_same(one_process, resumed, losses=False)
    assert resumed[0]["losses"][0] == pytest.approx(one_process[0]["losses"][2], rel=1e-5)


@pytest.mark.extended  # the same resharding of the same checkpoint format, the other way (above)
@needs_netns
def test_a_one_process_sharded_checkpoint_resumes_on_two_ranks(tmp_path, one_process):
    ranks(tmp_path, "c", 1, "--strategy", "fsdp2", "--updates", "2", "--save", str(tmp_path / "one"))
    resumed = ranks(tmp_path, "d", 2, "--strategy", "fsdp2", "--updates", "1", "--load", str(tmp_path / "one"))
    assert_same(one_process, resumed, losses=False)


TOY = dict(env="Maze-v0", env_kwargs={"difficulty": "open"}, max_turns=3, chat_tools=False, torch_threads=1,
           groups_per_batch=2, group_size=4, concurrency=8, max_new_tokens=4, drop_zero_variance=False,
           tensorboard=False, plot=False, train_tasks=20, checkpoint_every=1, device="cpu", name="toy",
           strategy="ddp", world_size=2, dist_timeout_s=60)


def kill_rank_1_after_two_updates(proc: subprocess.Popen, run_dir: Path, is_rank_1, *, reach_s: float,
                                  exit_s: float) -> str:
    """SIGKILL the process under `proc` that `is_rank_1(psutil.Process)` picks once the run has done 2 updates;
    the run must then end on its own within `exit_s` (no hang). Returns its stderr."""
    import psutil

    try:
        deadline = time.monotonic() + reach_s
        while len(metric_rows(run_dir)) < 2:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the 2-rank run did not reach update 2: {proc.communicate()[1][-3000:]}")
            time.sleep(0.5)
        victims = []
        for child in psutil.Process(proc.pid).children(recursive=True):
            try:
                victims += [child.pid] if is_rank_1(child) else []
            except psutil.Error:
                continue
        assert victims, "no rank-1 process found"
        os.kill(victims[0], signal.SIGKILL)
        return proc.communicate(timeout=exit_s)[1]
    finally:
        if proc.poll() is None:
            proc.kill()


def metric_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


@torchrun_alone
@needs_netns
def test_killed_rank_ends_the_run_with_an_error_and_resume_continues(tmp_path):
    config = tmp_path / "toy.yaml"
    config.write_text(json.dumps({**TOY, "output_dir": str(tmp_path), "updates": 40}))
    run_dir = tmp_path / "toy"
    cmd = [str(NETNS), *TORCHRUN, "--nproc-per-node=2", "--master-addr=127.0.0.1", "--master-port=29500",
           "-m", "agentgym", "train", str(config)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    err = kill_rank_1_after_two_updates(proc, run_dir, lambda p: p.environ().get("RANK") == "1"
                                        and "agentgym" in " ".join(p.cmdline()), reach_s=240, exit_s=120)
    assert proc.returncode != 0
    assert "rank" in err.lower() and ("failed" in err.lower() or "RankFailure" in err), err[-3000:]
    done = max(r["update"] for r in metric_rows(run_dir))
    assert done < 40
    config.write_text(json.dumps({**TOY, "output_dir": str(tmp_path), "updates": done + 2}))
    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "resumed toy from update-" in resumed.stdout
    rows = metric_rows(run_dir)
    assert [r["update"] for r in rows][-2:] == [done + 1, done + 2]
    assert rows[-1]["policy_version"] == done + 2


# ---- through Ray: trainer ranks as actors forming one process group --------------------------------

@pytest.mark.extended  # Ray rank actors: the disaggregated fsdp2 run below; two ranks' numerics: the torchrun tests
@pytest.mark.ray
@needs_netns
def test_two_ray_rank_actors_give_the_one_process_losses_and_weights(tmp_path, one_process):
    pytest.importorskip("ray", reason="install the ray extra: pip install -e '.[ray]'")
    out, weights = tmp_path / "ray.json", tmp_path / "ray.pt"
    done = subprocess.run([str(NETNS), sys.executable, str(RANKS), "--ray", "2", "--strategy", "ddp", "--updates", "3",
                           "--out", str(out), "--weights", str(weights)], capture_output=True, text=True, timeout=480,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    assert_same(one_process, (result, torch.load(weights)))


@pytest.mark.extended  # torchrun's critic test and the Ray runtime's fsdp2 rank actors below cover its parts
@pytest.mark.ray
@needs_netns
def test_two_ray_fsdp2_ranks_match_one_process_with_a_critic_after_an_sft_warm_start(tmp_path,
                                                                                      one_process_critic_sft):
    pytest.importorskip("ray", reason="install the ray extra: pip install -e '.[ray]'")
    out, weights = tmp_path / "ray.json", tmp_path / "ray.pt"
    done = subprocess.run([str(NETNS), sys.executable, str(RANKS), "--ray", "2", "--strategy", "fsdp2", *CRITIC_SFT,
                           "--out", str(out), "--weights", str(weights)], capture_output=True, text=True, timeout=480,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["critic_losses"] == pytest.approx(one_process_critic_sft[0]["critic_losses"], rel=1e-5)
    assert_same(one_process_critic_sft, (result, torch.load(weights)))


@pytest.mark.ray
@needs_netns
def test_ray_runtime_trains_with_two_fsdp2_rank_actors_disaggregated(tmp_path):
    pytest.importorskip("ray", reason="install the ray extra: pip install -e '.[ray]'")
    from tests.trainer.test_ray_runtime import TINY

    overrides = {**TINY, "mode": "sync", "updates": 1, "checkpoint_every": 1, "strategy": "fsdp2", "world_size": 2,
                 "placement": "disaggregated", "device": "cpu"}
    session_root = tempfile.mkdtemp(prefix="agr-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    cmd = [str(NETNS), sys.executable, "-m", "agentgym.trainer.ray_runtime", "--json", "--num-cpus", "2",
           "--temp-dir", session_root, "--env-workers", "0",
           *[f"--set={key}={json.dumps(value)}" for key, value in overrides.items()]]
    try:
        done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        shutil.rmtree(session_root, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert (summary["updates"], summary["policy_version"], summary["stopped_by"]) == (1, 1, "updates")
    assert summary["leftover_processes"] == []
    shards = tmp_path / "runs" / "ray-run" / "checkpoints" / "update-000001" / "shards"
    assert sorted(p.name for p in shards.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]


def test_memory_plan_shards_with_fsdp2_and_refuses_what_cannot_fit():
    from agentgym.trainer.components import memory_plan, model_spec
    from agentgym.trainer.distributed.group import RankGroup

    def plan(**overrides):
        cfg = load_train_config(None, {"device": "cpu", **overrides})
        return memory_plan(cfg, model_spec(cfg), RankGroup())

    one = plan(tiny_hidden_size=128)
    assert {"parameters", "gradients", "optimizer (AdamW)", "activations / micro-batch"} <= set(one.items)
    assert one.items["optimizer (AdamW)"] == 2 * one.items["gradients"]
    sharded = plan(tiny_hidden_size=128, strategy="fsdp2", world_size=2)
    assert sharded.items["parameters"] == pytest.approx(one.items["parameters"] / 2)
    assert "total" in one.table() and one.total < one.capacity
    too_big = plan(tiny_hidden_size=128, micro_batch_tokens=500_000, memory_limit_gib=0.5)
    with pytest.raises(ConfigError, match="lower micro_batch_tokens"):
        too_big.check()


@pytest.mark.extended
@pytest.mark.slow
@pytest.mark.ray
@needs_netns
def test_killed_ray_rank_ends_the_run_with_an_error_and_resume_continues(tmp_path):
    pytest.importorskip("ray", reason="install the ray extra: pip install -e '.[ray]'")
    from tests.trainer.test_ray_runtime import TINY

    session_root = tempfile.mkdtemp(prefix="agr-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes

    def command(updates: int, *extra: str) -> list[str]:
        overrides = {**TINY, "mode": "sync", "updates": updates, "checkpoint_every": 1, "strategy": "ddp",
                     "world_size": 2, "device": "cpu", "dist_timeout_s": 120}
        return [str(NETNS), sys.executable, "-m", "agentgym.trainer.ray_runtime", "--json", "--num-cpus", "2",
                "--temp-dir", session_root, "--env-workers", "0",
                *[f"--set={key}={json.dumps(value)}" for key, value in overrides.items()], *extra]

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run_dir = tmp_path / "runs" / "ray-run"
    proc = subprocess.Popen(command(40), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    err = kill_rank_1_after_two_updates(proc, run_dir, lambda p: "FollowerRank" in " ".join(p.cmdline()),
                                        reach_s=400, exit_s=240)  # the driver sees the dead actor: no hang
    assert proc.returncode != 0
    assert "trainer rank 1 of 2 died" in err and "--resume" in err, err[-3000:]
    done = max(r["update"] for r in metric_rows(run_dir))
    assert done < 40
    try:
        resumed = subprocess.run(command(done + 2, "--resume"), cwd=tmp_path, capture_output=True, text=True,
                                 timeout=600, env=env)
    finally:
        shutil.rmtree(session_root, ignore_errors=True)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert (summary["updates"], summary["policy_version"]) == (done + 2, done + 2)
    rows = metric_rows(run_dir)
    assert [r["update"] for r in rows][-2:] == [done + 1, done + 2]
