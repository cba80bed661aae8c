"""`agentgym eval`: score a policy on envs (k attempts per task, pass@k), compare two evals, re-score one.

    agentgym eval Maze-v0 SQL-v0 --policy hf:runs/quickstart@latest -k 4 --store evals.db
    agentgym eval --file evals.yaml --store evals.db
    agentgym eval compare RUN_A RUN_B --store evals.db
    agentgym eval reverify RUN --store evals.db [--write]
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from agentgym.cli.common import console, err_console, fail, guarded, open_store, parse_json_option, print_json
from agentgym.cli.policy_options import POLICY_HELP, PolicyFlags, with_policy_flags
from agentgym.eval import EnvEntry, EvalPlan, EvalResult, compare_runs, load_env_file, load_plan, resolve_env
from agentgym.eval.compare import Comparison
from agentgym.eval.metrics import EnvSummary
from agentgym.eval.plan import check_k
from agentgym.eval.reverify import reverify_run
from agentgym.eval.runner import run_eval
from agentgym.policy.loading import OpenedPolicy, PolicyOptions, open_policy
from agentgym.policy.spec import parse_policy
from agentgym.trajectory import new_id

if TYPE_CHECKING:  # the store (SQLAlchemy) is imported where it is used: the CLI starts faster
    from agentgym.store import TrajectoryStore

WIDE = 120  #: tables are printed at least this wide (rather than truncating numbers in a narrow pipe)


class _EvalGroup(TyperGroup):
    """`agentgym eval ENV...` runs an eval; `compare` and `reverify` are subcommands."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_EvalGroup, no_args_is_help=True,
                  help="Score a policy on envs: every task k times, pass@k, resumable; compare and re-score evals.")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="eval")


@app.command("run")
@guarded
@with_policy_flags()
def run(
    env_ids: list[str] = typer.Argument(None, help="Env ids to evaluate (or use --file)."),
    policy: str = typer.Option(None, "--policy", help=POLICY_HELP),
    tasks: str = typer.Option("eval", "--tasks", help="eval (the env's eval split or the run's held-out tasks), "
                                                      "N (the first N tasks) or ID,ID,..."),
    k: int = typer.Option(1, "-k", help="Attempts per task (pass@k needs k of them)."),
    store: str = typer.Option("agentgym.db", "--store", help="Store URL: a SQLite path or postgresql://..."),
    file: str = typer.Option(None, "--file", "-f", help="YAML file listing envs (with kwargs, tasks, max_turns)."),
    env_kwargs: str = typer.Option(None, "--env-kwargs", help="JSON kwargs for make() of every env on the command line."),
    max_turns: int = typer.Option(None, "--max-turns", min=1, help="Turn limit (default: the run's, else the env's)."),
    run_id: str = typer.Option(None, "--run", help="Eval run id (default: a new one)."),
    resume: bool = typer.Option(False, "--resume", help="Finish the eval run --run without redoing stored attempts."),
    success_reward: float = typer.Option(None, "--success-reward",
                                         help="Total reward that counts as success (default: the run's, else 1)."),
    max_infra_retries: int = typer.Option(2, "--max-infra-retries", min=0,
                                          help="Rounds that retry attempts lost to infrastructure failures."),
    concurrency: int = typer.Option(32, "--concurrency", min=1, help="Episodes in flight at once."),
    seed: int = typer.Option(0, "--seed", help="Seed of task i's env is seed + i; also seeds sampling."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as one JSON object (no progress bars)."),
    *,
    flags: PolicyFlags,
) -> None:
    """Evaluate a policy: every task k times through the collector, a per-env table, stored as an eval run."""
    check_k(k)
    db = open_store(store)
    stored = _stored_plan(db, run_id, resume)
    if stored is not None and not env_ids and not file:
        plan_args = _resumed(stored, policy)
    else:
        plan_args = _requested(env_ids, file, env_kwargs, policy, tasks, k, success_reward)
        plan_args["context"] = flags.context()
    options = flags.options(seed)
    if isinstance(plan_args, EvalPlan) and plan_args.options:
        options = PolicyOptions(**plan_args.options)  # a resume samples exactly as the interrupted eval did
    run_id = run_id or f"eval-{new_id()[:8]}"
    result, opened_record = asyncio.run(_run(db, plan_args, stored, options, max_turns, seed, max_infra_retries,
                                             run_id, concurrency, not as_json))
    _report(result, opened_record, db, as_json)
    if not result.complete:
        raise typer.Exit(3)


def _stored_plan(db: TrajectoryStore, run_id: str | None, resume: bool) -> EvalPlan | None:
    if resume and not run_id:
        fail("--resume needs --run RUN_ID: the eval run to finish")
    if not run_id:
        return None
    exists = any(r["id"] == run_id for r in db.runs())
    if exists and not resume:
        fail(f"run {run_id!r} already exists in {db.display_url}; pass --resume to finish it, or choose another --run")
    if resume and not exists:
        fail(f"cannot resume {run_id!r}: no such run in {db.display_url}")
    return load_plan(db, run_id) if resume else None


def _resumed(stored: EvalPlan, policy: str | None) -> EvalPlan:
    """The stored plan, with the policy spec replaced when --policy names the same model elsewhere (a moved endpoint)."""
    if not policy or policy == stored.policy:
        return stored
    new, old = parse_policy(policy), parse_policy(stored.policy)
    if new.kind != old.kind:
        fail(f"--resume: the eval ran with a {old.kind} policy ({stored.policy}); --policy {policy} is another kind")
    err_console.print(f"[yellow]note[/]: resuming with --policy {policy} in place of the stored {stored.policy} "
                      "(it must serve the same model)", highlight=False)
    return dataclasses.replace(stored, policy=policy)


def _requested(env_ids: list[str] | None, file: str | None, env_kwargs: str | None, policy: str | None,
               tasks: str, k: int, success_reward: float | None) -> dict[str, Any]:
    kwargs = parse_json_option(env_kwargs, "--env-kwargs")
    entries = [EnvEntry(e, dict(kwargs)) for e in env_ids or []]
    defaults: dict[str, Any] = {}
    if file:
        file_entries, defaults = load_env_file(file)
        entries += file_entries
    if not entries:
        fail("name at least one env id (agentgym eval Maze-v0 ...) or pass --file envs.yaml")
    policy = policy or defaults.get("policy")
    if not policy:
        fail("--policy is required (or 'policy:' in the --file); e.g. --policy hf:runs/quickstart@latest")
    parse_policy(policy)  # a grammar error before anything loads
    k = int(defaults.get("k", k))
    check_k(k)
    return {"entries": entries, "policy": policy, "tasks": str(defaults.get("tasks", tasks)), "k": k,
            "success_reward": defaults.get("success_reward", success_reward)}


async def _run(db: TrajectoryStore, requested: Any, stored: EvalPlan | None, options: PolicyOptions,
               max_turns: int | None, seed: int, retries: int, run_id: str, concurrency: int,
               progress: bool) -> tuple[EvalResult, dict[str, Any]]:
    policy = requested.policy if isinstance(requested, EvalPlan) else requested["policy"]
    opened = await open_policy(policy, options)
    try:
        plan = (requested if isinstance(requested, EvalPlan)
                else _plan(requested, opened, options, max_turns, seed, retries))
        if stored is not None and not isinstance(requested, EvalPlan) and (diffs := stored.same_work(plan)):
            fail(f"--resume {run_id}: this command asks for another eval than the stored one ({'; '.join(diffs)}); "
                 "rerun with the same arguments, or just: agentgym eval --resume --run RUN --store URL "
                 "[--policy SPEC, when the endpoint moved]")
        if stored is None:
            db.log_run(run_id, plan.to_config(opened.record()))
        result = await run_eval(plan, opened, db, run_id, concurrency=concurrency, progress=progress)
        return result, {**opened.record(), "k": plan.k}
    finally:
        await opened.aclose()


def _plan(requested: dict[str, Any], opened: OpenedPolicy, options: PolicyOptions, max_turns: int | None, seed: int,
          retries: int) -> EvalPlan:
    profile = opened.profile
    envs = [resolve_env(e, requested["tasks"], profile, max_turns) for e in requested["entries"]]
    success = requested["success_reward"]
    if success is None:
        success = profile.success_reward if profile is not None else 1.0
    return EvalPlan(policy=requested["policy"], k=requested["k"], envs=envs, seed=seed,
                    success_reward=float(success), max_infra_retries=retries,
                    options={k: v for k, v in dataclasses.asdict(options).items() if k != "api_key"},
                    context={k: v for k, v in requested["context"].items() if v is not None})


# ---- output ---------------------------------------------------------------------------

def _wide(table: Table) -> None:
    """Print `table` at least `WIDE` columns wide (a narrow pipe would truncate its numbers)."""
    Console(width=max(console.width, WIDE), force_terminal=console.is_terminal).print(table)


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def summary_table(title: str, summaries: list[EnvSummary], k: int) -> Table:
    table = Table(title=title)
    for col in ("env", "tasks", "eps", "success", "reward ±95%", "pass@1", f"pass@{k}", "turns", "tok in/out",
                "capped", "windowed", "infra"):
        table.add_column(col, justify="left" if col == "env" else "right", no_wrap=col in ("env", "reward ±95%"))
    for s in summaries:
        table.add_row(s.env_id, str(s.tasks), str(s.episodes), _fmt(s.success, ".1%"),
                      f"{_fmt(s.reward_mean, '.2f')}±{_fmt(s.reward_ci95, '.2f')}", _fmt(s.pass_at_1),
                      _fmt(s.pass_at_k) + (f" ({s.tasks_short} short)" if s.tasks_short else ""),
                      _fmt(s.turns_mean, ".1f"), f"{_fmt(s.tokens_in_mean, '.0f')}/{_fmt(s.tokens_out_mean, '.0f')}",
                      str(s.capped_turns), f"{s.windowed_turns} (-{s.dropped_tokens} tok)" if s.windowed_turns else "0",
                      str(s.infra_failures))
    return table


def _report(result: EvalResult, policy: dict[str, Any], db: TrajectoryStore, as_json: bool) -> None:
    if as_json:
        print_json({"run_id": result.run_id, "store": db.display_url, "policy": policy["spec"], "k": policy["k"],
                    "policy_version": policy["version"], "complete": result.complete, "missing": result.missing,
                    "episodes_run": result.episodes_run, "infra_retried": result.infra_retried,
                    "seconds": result.seconds, "envs": {s.env_id: s.to_dict() for s in result.summaries}})
    else:
        _wide(summary_table(f"eval {result.run_id}: {policy['spec']} (policy v{policy['version']}, "
                            f"k={policy['k']}) -> {db.display_url}", result.summaries, policy["k"]))
        console.print(f"{result.episodes_run} episodes rolled out in {result.seconds:.1f} s"
                      + (f", {result.infra_retried} attempts retried after infrastructure failures"
                         if result.infra_retried else ""), highlight=False)
    if not result.complete:
        missing = ", ".join(f"{env}: {n}" for env, n in result.missing.items() if n)
        err_console.print(f"[yellow]incomplete[/]: attempts still missing after infrastructure failures ({missing}); "
                          f"finish with: agentgym eval --resume --run {result.run_id} --store {db.display_url}",
                          highlight=False, soft_wrap=True)


@app.command("compare")
@guarded
def compare(
    run_a: str = typer.Argument(..., help="The baseline eval run."),
    run_b: str = typer.Argument(..., help="The eval run compared with it."),
    store: str = typer.Option("agentgym.db", "--store", help="Store URL holding both runs."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as one JSON object."),
) -> None:
    """Which tasks flipped between two eval runs (solved: at least half of a task's attempts succeeded)."""
    db = open_store(store, create=False)
    comparison = compare_runs(db, run_a, run_b)
    if as_json:
        print_json(comparison.to_dict())
        return
    _print_comparison(comparison)


def _print_comparison(c: Comparison) -> None:
    table = Table(title=f"A = {c.run_a} ({c.policy_a})   B = {c.run_b} ({c.policy_b})")
    for col in ("env", "pass@1 A", "pass@1 B", "Δ", "gained", "lost", "both", "neither", "only A/B"):
        table.add_column(col, justify="left" if col == "env" else "right", no_wrap=col == "env")
    for e in c.envs:
        pa, pb = (e.a.pass_at_1 if e.a else None), (e.b.pass_at_1 if e.b else None)
        delta = pb - pa if pa is not None and pb is not None else None
        table.add_row(e.env_id, _fmt(pa), _fmt(pb), _fmt(delta, "+.3f"), f"[green]{len(e.gained)}[/]",
                      f"[red]{len(e.lost)}[/]", str(e.both_solved), str(e.neither_solved), f"{e.only_a}/{e.only_b}")
    _wide(table)
    for e in c.envs:
        for label, flips, colour in (("gained in B", e.gained, "green"), ("lost in B", e.lost, "red")):
            if flips:
                tasks = ", ".join(f"{f.task_id} ({f.rate_a:.0%}→{f.rate_b:.0%})" for f in flips)
                console.print(f"[{colour}]{escape(e.env_id)} {label}[/]: {escape(tasks)}", highlight=False)


@app.command("reverify")
@guarded
def reverify(
    run: str = typer.Argument(..., help="The eval run whose stored episodes are re-scored."),
    store: str = typer.Option("agentgym.db", "--store", help="Store URL holding the run."),
    write: bool = typer.Option(False, "--write", help="Store the new rewards (the old total is kept in metadata)."),
    as_json: bool = typer.Option(False, "--json", help="Print the changes as one JSON object."),
) -> None:
    """Re-score a run's stored episodes with the env's current reward code and list what changed."""
    db = open_store(store, create=False)
    checked, changes = reverify_run(db, run, write=write)
    if as_json:
        print_json({"run_id": run, "checked": checked, "written": write,
                    "changed": [c.__dict__ for c in changes]})
        return
    table = Table(title=f"reverify {run}: {checked} episodes replayed, {len(changes)} changed")
    for col in ("episode", "env", "task", "old reward", "new reward", "success", "note"):
        table.add_column(col)
    for c in changes:
        success = "-" if c.new_success is None else f"{c.old_success} → {c.new_success}"
        note = f"replay diverged at turn {c.diverged_at}: not re-scored" if c.diverged_at is not None else ""
        table.add_row(c.episode_id, c.env_id, c.task_id, f"{c.old_reward:g}", _fmt(c.new_reward, "g"), success, note)
    console.print(table)
    if changes and not write:
        console.print("nothing was written; pass --write to store the new rewards", highlight=False)
