"""`agentgym train CONFIG`: run a training recipe (see configs/).

The trainer adds this command to the `agentgym` CLI through the `agentgym.cli` entry point
(pyproject.toml), so the core CLI never imports the trainer package.
"""

from __future__ import annotations

import typer

from agentgym.cli.common import console, fail, guarded, parse_json_option
from agentgym.config import config_help, load_train_config, parse_overrides
from agentgym.env_facts import resolve_run_env


def register(app: typer.Typer) -> None:
    """Entry point of the `agentgym.cli` group: add `agentgym train` to `app`."""
    app.command("train")(train)


@guarded
def train(
    config: str = typer.Argument(None, help="YAML run config, e.g. configs/quickstart.yaml."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the run's latest checkpoint."),
    set_: list[str] = typer.Option([], "--set", help="Override a config key: --set updates=20 (repeatable)."),
    env: str = typer.Option(None, "--env", help="Train on this env instead of the recipe's (an id or "
                            "module:Name-v0); the recipe's env_kwargs are dropped."),
    env_kwargs: str = typer.Option(None, "--env-kwargs", help="JSON object of the env's arguments, e.g. '{\"size\": 7}'."),
    help_config: bool = typer.Option(False, "--help-config", help="List every config key with its default."),
) -> None:
    """Train a policy with RL: collect, assign credit, update, sync weights; progress as a table."""
    if help_config:
        console.print(config_help(), highlight=False)
        return
    if config is None:
        fail("give a config file, e.g. agentgym train configs/quickstart.yaml (or --help-config for the keys)")
    overrides = parse_overrides(set_)
    if env is not None:
        overrides["env"] = env
    if env_kwargs is not None:
        overrides["env_kwargs"] = parse_json_option(env_kwargs, "--env-kwargs")
    cfg = load_train_config(config, overrides)
    cfg, facts = resolve_run_env(cfg)  # makes one env: a bad id or bad arguments stop here, before any model
    from agentgym.trainer.train import train as run_training
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the run prints its own table; weight-loading bars would break it up

    result = run_training(cfg, resume=resume, facts=facts)
    if result.stopped_by == "leader":  # a follower rank of a ddp/fsdp2 run: rank 0 reports
        return
    rows = result.rows
    last = rows[-1] if rows else {}
    if result.stopped_by == "time_limit":
        console.print(f"[yellow]warning[/]: time_limit_s={cfg.time_limit_s:g} stopped the run after {result.updates} "
                      f"of {cfg.updates} updates; its figures are not comparable with runs that used their whole "
                      "budget (resume with --resume, or raise time_limit_s)")
    if result.stopped_by == "env_steps":
        console.print(f"max_env_steps={cfg.max_env_steps} reached after {result.updates} updates "
                      f"({last.get('env_steps', 0):.0f} env steps)")
    evals = [r for r in rows if "eval_success_rate" in r]
    if len(evals) > 1 and evals[0]["update"] == 0:
        console.print(f"held-out success: {evals[0]['eval_success_rate']:.2f} at the start, "
                      f"{evals[-1]['eval_success_rate']:.2f} after update {evals[-1]['update']:.0f}")
    console.print(f"[bold]done[/]: {result.updates} updates ({result.stopped_by}), policy version "
                  f"{result.policy_version}; last success {last.get('success_rate', float('nan')):.2f}; "
                  f"outputs in {cfg.run_dir}/ (metrics.jsonl, tensorboard/, curve.png, checkpoints/)")
