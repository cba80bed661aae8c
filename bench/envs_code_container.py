"""Code-v0 from its own container vs Code-v0 on host-driven Docker sandboxes, side by side (bench/envs.py --code-container).

    python bench/envs_code_container.py [--quick] [--json]

- ``code_image_build_cold_s``: building the Code-v0 image (docker/code/) when only its parent, the generic env
  server image, is there (a fresh machine also pays for the parent: wheels fetched on the host, then its build);
- ``code_image_build_cached_s``: the same call again (a content-hash check, no build);
- ``code_parent_image_build_s``: making sure the parent is up to date first (a build when agentgym's sources
  changed since the last one, else a hash check);
- ``sre_env_image_build_cold_s`` / ``_cached_s``: SRE-v0's image (docker/sre-env/) the same way: the wheels of
  agentgym fetched on the host and installed on top of the SRE system image (built already);
- ``code_{docker,container}_start_ms_p50`` / ``_p90``: `reset` (task chosen, workspace written) on a warm
  pool: host-driven Docker sandboxes vs inline slots inside one served replica (through its unix socket);
- ``code_{docker,container}_steps_per_s``: solver-driven steps (write, visible tests, submit + grading) per
  second of wall time inside reset/step, one episode after another;
- ``code_container_cluster_up_s``: one replica started and healthy.

The solver is the env's built-in one (scripted). Figures only; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import agentgym  # noqa: E402


def image_build() -> dict[str, float | None]:
    from agentgym.sandboxes.docker import client

    from agentgym.runtime import images

    api = client().api
    start = time.perf_counter()
    images.ensure_image("env")  # the parent, built here when agentgym's sources changed since its last build
    results: dict[str, float | None] = {"code_parent_image_build_s": time.perf_counter() - start}
    for family in ("code", "sre-env"):
        for image in api.images(name=f"agentgym/{family}"):
            api.remove_image(image["Id"], force=True)
        start = time.perf_counter()
        images.ensure_image(family)
        results[f"{family.replace('-', '_')}_image_build_cold_s"] = time.perf_counter() - start
        start = time.perf_counter()
        images.ensure_image(family)
        results[f"{family.replace('-', '_')}_image_build_cached_s"] = time.perf_counter() - start
    return results


def _bench_envs() -> Any:
    """bench/envs.py as a module (the name `envs` is the repository's env package)."""
    spec = importlib.util.spec_from_file_location("bench_envs", Path(__file__).with_name("envs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def figures(name: str, env: Any, steps: int) -> dict[str, float]:
    steps_per_second = _bench_envs().steps_per_second

    steps_per_second(env, 6)  # warm-up: the pools' first sandboxes
    resets: list[float] = []
    rate = steps_per_second(env, steps, resets)
    return {f"code_{name}_start_ms_p50": statistics.median(resets),
            f"code_{name}_start_ms_p90": statistics.quantiles(resets, n=10)[-1],
            f"code_{name}_steps_per_s": rate}


def measure(quick: bool) -> dict[str, Any]:
    from agentgym.runtime import RemoteEnv
    from agentgym.runtime.cluster import EnvCluster

    steps = 15 if quick else 60
    results: dict[str, Any] = image_build()
    env = agentgym.make("Code-v0")
    try:
        results.update(figures("docker", env, steps))
    finally:
        env.close()
    start = time.perf_counter()
    with EnvCluster("Code-v0", replicas=1, max_sessions=8) as cluster:
        results["code_container_cluster_up_s"] = time.perf_counter() - start
        remote = RemoteEnv(cluster.endpoints[0])
        try:
            results.update(figures("container", remote, steps))
        finally:
            remote.close()
    docker, container = results["code_docker_steps_per_s"], results["code_container_steps_per_s"]
    results["code_container_to_docker_steps_ratio"] = container / docker
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="15 steps per side instead of 60")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    results = measure(args.quick)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for key, value in results.items():
            print(f"{key:42s} {'n/a' if value is None else f'{value:,.3f}'}")


if __name__ == "__main__":
    main()
