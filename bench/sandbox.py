"""Sandbox latency and capacity, side by side in one run.

    python bench/sandbox.py            # a table
    python bench/sandbox.py --json     # one JSON object (keys below)
    python bench/sandbox.py --quick    # fewer iterations, for a smoke run

Measures: cold start (open until the agent answers) p50/p99; warm acquire
from a Pool p50/p99; a trivial exec round trip (`true` through /bin/sh) on a
warm sandbox p50/p99; the same command as `docker run --rm` per call and as
`docker exec` through the SDK; execs/s with 16 sandboxes driven concurrently;
and the most sandboxes it could hold alive at once (each answering an exec),
with the host memory (PSS) an idle sandbox costs.
Needs the Docker engine and the base image (bash scripts/docker.sh). Prints
figures only; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentgym.sandboxes import Limits, Pool  # noqa: E402

from agentgym import sandboxes  # noqa: E402

IMAGE = sandboxes.BASE_IMAGE
BENCH_LIMITS = Limits(cpus=0.5, memory_bytes=64 * 1024 * 1024, pids=64, disk_bytes=16 * 1024 * 1024)


def percentiles(samples_s: list[float]) -> tuple[float, float]:
    """(p50, p99) in milliseconds."""
    ms = sorted(s * 1000 for s in samples_s)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return statistics.median(ms), p99


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def cold_start(backend: str, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        sb = sandboxes.open(IMAGE, backend=backend, limits=BENCH_LIMITS)
        samples.append(time.perf_counter() - start)
        sb.close()
    return samples


def warm_acquire(backend: str, n: int) -> list[float]:
    samples = []
    with Pool(IMAGE, size=4, limits=BENCH_LIMITS, backend=backend) as pool:
        for _ in range(n):
            start = time.perf_counter()
            sb = pool.acquire()
            samples.append(time.perf_counter() - start)
            sb.exec("touch /work/used")
            pool.release(sb)
            while pool.idle < 4:  # measure a warm pool, not one still resetting
                time.sleep(0.001)
    return samples


def warm_exec(backend: str, n: int) -> list[float]:
    with sandboxes.open(IMAGE, backend=backend, limits=BENCH_LIMITS) as sb:
        for _ in range(20):
            sb.exec("true")
        return timed(lambda: sb.exec("true"), n)


def docker_run(n: int) -> list[float]:
    argv = ["docker", "run", "--rm", "--network", "none", "--log-driver", "none", IMAGE, "/bin/sh", "-c", "true"]
    subprocess.run(argv, check=True, capture_output=True)
    return timed(lambda: subprocess.run(argv, check=True, capture_output=True), n)


def docker_exec(n: int) -> list[float]:
    from agentgym.sandboxes import docker

    with sandboxes.open(IMAGE, backend="docker", limits=BENCH_LIMITS) as sb:
        api = docker.client().api

        def once() -> None:
            exec_id = api.exec_create(sb.id, ["/bin/sh", "-c", "true"], user="1000:1000")["Id"]
            api.exec_start(exec_id)

        once()
        return timed(once, n)


def throughput(backend: str, concurrency: int, seconds: float) -> float:
    opened = list(ThreadPoolExecutor(4).map(
        lambda _: sandboxes.open(IMAGE, backend=backend, limits=BENCH_LIMITS), range(concurrency)))
    counts = [0] * concurrency
    stop = threading.Event()

    def drive(i: int) -> None:
        while not stop.is_set():
            opened[i].exec("true")
            counts[i] += 1

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    for sb in opened:
        sb.close()
    return sum(counts) / elapsed


def tree_pss_mb(root: int) -> float:
    """Proportional set size of a process and all its descendants, in MiB."""
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += sum(int(line.split()[1]) for line in f if line.startswith("Pss:")) / 1024
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return total


def sandbox_mem_mb(sb: sandboxes.Sandbox) -> float:
    """Host memory (PSS) of one sandbox: for Docker its containerd shim, init, agent and children."""
    if sb.backend == "local":
        return tree_pss_mb(sb.handle.proc.pid)  # type: ignore[attr-defined]
    from agentgym.sandboxes import docker

    init = docker.client().api.inspect_container(sb.id)["State"]["Pid"]
    with open(f"/proc/{init}/stat") as f:
        shim = int(f.read().rsplit(")", 1)[1].split()[1])
    return tree_pss_mb(shim)


def max_concurrent(backend: str, ceiling: int) -> tuple[int, str, float]:
    """Open sandboxes until `ceiling` or the first failure; count those that still answer.

    Also returns the mean host memory (PSS) of a live idle sandbox, from a sample of eight.
    """
    opened: list[sandboxes.Sandbox] = []
    lock, stop_reason = threading.Lock(), ["reached the ceiling"]

    def one(_: int) -> None:
        if stop_reason[0] != "reached the ceiling":
            return
        try:
            sb = sandboxes.open(IMAGE, backend=backend, limits=BENCH_LIMITS)
        except Exception as exc:
            stop_reason[0] = f"open failed: {exc}"
            return
        with lock:
            opened.append(sb)

    try:
        list(ThreadPoolExecutor(4).map(one, range(ceiling)))
        answering = sum(1 for sb in opened if sb.exec("echo ok").stdout == "ok\n")
        sample = opened[:: max(1, len(opened) // 8)][:8]
        per_sandbox = statistics.mean(sandbox_mem_mb(sb) for sb in sample) if sample else 0.0
    finally:
        list(ThreadPoolExecutor(8).map(lambda sb: sb.close(), opened))
    return answering, stop_reason[0], per_sandbox


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["docker", "local"], default="docker")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--max-sandboxes", type=int, default=96, help="ceiling for the concurrency probe")
    args = parser.parse_args()
    scale = 0.25 if args.quick else 1.0

    # Latency first, while the engine is quiet (closing containers keeps dockerd busy for a while).
    warm = percentiles(warm_exec(args.backend, max(50, int(500 * scale))))
    dexec = percentiles(docker_exec(max(10, int(50 * scale)))) if args.backend == "docker" else (None, None)
    run = percentiles(docker_run(max(5, int(20 * scale))))
    cold = percentiles(cold_start(args.backend, max(5, int(20 * scale))))
    acquire = percentiles(warm_acquire(args.backend, max(10, int(100 * scale))))
    rate = throughput(args.backend, 16, 5.0 * scale if args.quick else 5.0)
    most, why, mem_mb = max_concurrent(args.backend, args.max_sandboxes)

    result = {
        "backend": args.backend,
        "cold_start_p50_ms": round(cold[0], 2),
        "cold_start_p99_ms": round(cold[1], 2),
        "warm_acquire_p50_ms": round(acquire[0], 3),
        "warm_acquire_p99_ms": round(acquire[1], 3),
        "warm_exec_p50_ms": round(warm[0], 3),
        "warm_exec_p99_ms": round(warm[1], 3),
        "docker_run_p50_ms": round(run[0], 2),
        "docker_run_p99_ms": round(run[1], 2),
        "docker_exec_sdk_p50_ms": None if dexec[0] is None else round(dexec[0], 2),
        "speedup_vs_docker_run": round(run[0] / warm[0], 1),
        "execs_per_s_16": round(rate, 1),
        "max_concurrent": most,
        "max_concurrent_ceiling": args.max_sandboxes,
        "max_concurrent_stop": why,
        "host_mem_per_sandbox_mb": round(mem_mb, 1),
    }
    if args.json:
        print(json.dumps(result))
        return
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
