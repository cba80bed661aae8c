"""Run a training config on Ray and print a summary: ``python -m agentgym.trainer.ray_runtime [CONFIG] [--set k=v ...]``.

    scripts/ray-netns.sh .venv/bin/python -m agentgym.trainer.ray_runtime configs/quickstart.yaml \\
        --set runtime=ray --set mode=async --rollout-workers 2 --json

The summary (``--json``: one JSON object on the last line) holds the run
result and the processes this one still has as children after Ray shut down
(none is the expected answer).
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentgym.trainer.ray_runtime", description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", help="YAML run config (default: every key at its default)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key (a YAML value); repeatable")
    parser.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    parser.add_argument("--rollout-workers", type=int, default=1)
    parser.add_argument("--env-workers", type=int, default=1)
    parser.add_argument("--actor-restarts", type=int, default=3,
                        help="times Ray restarts a rollout or env worker whose process died (-1: without limit)")
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local cluster started here")
    parser.add_argument("--temp-dir", default=None, help="Ray session directory root of the local cluster")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    args = parser.parse_args(argv)

    from agentgym.trainer.ray_runtime import RaySettings, run_on_ray

    from agentgym.config import load_train_config, parse_overrides
    from agentgym.errors import ConfigError

    try:
        overrides = parse_overrides(args.overrides)
    except ConfigError as exc:
        parser.error(str(exc))
    cfg = load_train_config(args.config, overrides)
    settings = RaySettings(rollout_workers=args.rollout_workers, env_workers=args.env_workers,
                           actor_restarts=args.actor_restarts, num_cpus=args.num_cpus, temp_dir=args.temp_dir)
    result = run_on_ray(cfg, resume=args.resume, settings=settings)
    summary = {"updates": result.updates, "policy_version": result.policy_version, "stopped_by": result.stopped_by,
               "rows": len(result.rows), "leftover_processes": leftover_processes()}
    print(json.dumps(summary) if args.json else summary)
    return 0


def leftover_processes() -> list[str]:
    """Command lines of this process's live descendants."""
    import psutil

    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                out.append(" ".join(child.cmdline())[:200])
        except psutil.NoSuchProcess:
            continue
    return out


if __name__ == "__main__":
    sys.exit(main())
