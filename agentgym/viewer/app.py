"""The trajectory viewer web app (FastAPI, server-rendered Jinja2 pages, no build step).

    app = create_app(TrajectoryStore("runs/demo.db"))

Pages: runs -> envs -> tasks -> groups -> episodes; an episode page (turns,
screenshots, token view, replay-from-turn form); a group page (side by side,
GiGPO anchor states); a tree page (branched episodes); a run page (training
curves). Bad input gives an HTML page with the reason and HTTP 400/404, never
a stack trace.

Needs the `serve` extra (fastapi, uvicorn) and jinja2; `agentgym view` checks
for them first and names the extra to install.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentgym.branching import BranchError, BranchPlan, branch_episode
from agentgym.errors import AgentGymError, ConfigError, StoreError, UnknownEnvError, require
from agentgym.registration import registry
from agentgym.store import EpisodeFilter, TrajectoryStore
from agentgym.viewer import charts, queries
from agentgym.viewer.groups import build_tree, find_anchors, step_groups
from agentgym.viewer.media import find_images, media_file
from agentgym.viewer.params import ListParams, ViewerInputError, parse_list_params, parse_replay_form
from agentgym.viewer.token_view import find_decoder, model_dir_of, token_view

HERE = Path(__file__).parent
log = logging.getLogger("agentgym.viewer")
COLOUR_MODES = ("logprob", "advantage", "loss")


class Cached:
    """A value recomputed at most every `ttl` seconds (the filter dropdowns: distinct envs and runs)."""

    def __init__(self, compute: Any, ttl: float = 10.0):
        self._compute, self._ttl = compute, ttl
        self._value: Any = None
        self._at = float("-inf")

    def get(self) -> Any:
        if time.monotonic() - self._at > self._ttl:
            self._value, self._at = self._compute(), time.monotonic()
        return self._value


class NotFound(AgentGymError):
    """A page names something the store does not hold (HTTP 404)."""


#: metric prefixes drawn in the run page's credit section: the estimators' diagnostics and TRACE's allocation
CREDIT = ("credit/", "trace/")


def _templates() -> Any:
    jinja2 = require("jinja2", extra="serve", what="the trajectory viewer")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                             autoescape=jinja2.select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
    env.filters["reward"] = lambda v: "" if v is None else f"{float(v):.3f}"
    env.filters["pct"] = lambda v: "" if v is None else f"{100 * float(v):.0f}%"
    env.filters["when"] = lambda v: "" if v is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v))
    env.filters["short"] = lambda v, n=10: "" if v is None else (str(v) if len(str(v)) <= n else str(v)[:n] + "…")
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
    env.filters["seconds"] = lambda v: f"{float(v) * 1000:.1f} ms" if float(v) < 1 else f"{float(v):.2f} s"
    env.filters["count"] = lambda n, word: f"{n} {word}" + ("" if n == 1 else "s")
    env.filters["num"] = lambda v: "" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))
    return env


def create_app(store: TrajectoryStore) -> Any:
    """The FastAPI app serving `store`."""
    app = FastAPI(title="agentgym viewer", docs_url=None, redoc_url=None, openapi_url=None)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    jinja = _templates()
    store_label = store.display_url
    choices = Cached(lambda: (queries.env_ids(store), queries.run_ids(store)))
    overview = Cached(lambda: (queries.runs_overview(store), {r["id"]: r for r in store.runs()},
                               queries.envs_overview(store, None), store.count()), ttl=5.0)

    def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = jinja.get_template(name).render(store_url=store_label, **context)
        return HTMLResponse(html, status_code=status)

    def error_page(status: int, title: str, message: str) -> HTMLResponse:
        return page("error.html", status=status, title=title, message=message, code=status)

    # ---- errors: a page with the reason, never a stack trace --------------
    @app.exception_handler(NotFound)
    def _not_found(_request: Any, exc: NotFound) -> HTMLResponse:
        return error_page(404, "Not found", str(exc))

    @app.exception_handler(AgentGymError)
    def _bad_input(_request: Any, exc: AgentGymError) -> HTMLResponse:
        title = "Store error" if isinstance(exc, StoreError) else "Cannot do that"
        return error_page(400, title, str(exc))

    @app.exception_handler(StarletteHTTPException)
    def _http(_request: Any, exc: StarletteHTTPException) -> HTMLResponse:
        message = "There is no page at this address." if exc.status_code == 404 else str(exc.detail)
        return error_page(exc.status_code, "Not found" if exc.status_code == 404 else "Error", message)

    @app.exception_handler(RequestValidationError)
    def _invalid(_request: Any, exc: RequestValidationError) -> HTMLResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in exc.errors())
        return error_page(400, "Bad request", f"The address has parameters the viewer cannot use: {problems}")

    @app.exception_handler(Exception)
    def _internal(request: Any, exc: Exception) -> HTMLResponse:
        log.exception("viewer error on %s", request.url.path)
        return error_page(500, "Internal error",
                          f"The viewer failed on {request.url.path}: {type(exc).__name__}: {exc}")

    # ---- runs -> envs -> tasks -> groups -> episodes ---------------------
    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        runs, configs, envs, total = overview.get()
        evals = [(rid, c["config"]) for rid, c in configs.items() if (c.get("config") or {}).get("kind") == "eval"]
        return page("index.html", runs=runs, configs=configs, envs=envs, total=total, evals=evals)

    @app.get("/runs/{run_id:path}", response_class=HTMLResponse)
    def run_page(run_id: str) -> HTMLResponse:
        config = queries.run_config(store, run_id)
        envs = queries.envs_overview(store, run_id)
        if config is None and not envs:
            raise NotFound(f"no run '{run_id}' in store {store_label}: it logged no config and has no episodes")
        metrics = store.metrics(run_id)
        series = charts.series_from_metrics(metrics)
        versions = queries.version_curve(store, run_id)
        version_series = [charts.Series(name, [float(v["version"]) for v in versions],
                                        [float(v[key] or 0.0) for v in versions])
                          for name, key in (("mean reward per policy version", "mean_reward"),
                                            ("success rate per policy version", "success_rate"))]
        return page("run.html", run_id=run_id, config=config, envs=envs, metric_steps=len(metrics),
                    costs=store.run_costs(run_id),
                    charts=[charts.line_chart(s) for s in series if not s.name.startswith(CREDIT + ("cost/",))],
                    credit_charts=[charts.line_chart(s) for s in series if s.name.startswith(CREDIT)],
                    version_charts=[charts.line_chart(s) for s in version_series] if len(versions) > 1 else [])

    # ---- evals ---------------------------------------------------------------
    @app.get("/evals/compare", response_class=HTMLResponse)
    def eval_compare(a: str, b: str) -> HTMLResponse:
        from agentgym.eval import compare_runs

        return page("eval_compare.html", c=compare_runs(store, a, b))

    @app.get("/evals/{run_id:path}", response_class=HTMLResponse)
    def eval_page(run_id: str) -> HTMLResponse:
        from agentgym.eval import load_plan, score_run

        plan = load_plan(store, run_id)
        config = queries.run_config(store, run_id) or {}
        others = [r for r in queries.eval_run_ids(store) if r != run_id]
        return page("eval.html", run_id=run_id, plan=plan, summaries=score_run(store, plan, run_id),
                    record=config.get("policy_record") or {}, config=config, others=others)

    @app.get("/tasks", response_class=HTMLResponse)
    def tasks(request: Request) -> HTMLResponse:
        params = parse_list_params(request.query_params)
        rows, total = queries.tasks_page(store, params.filter(), params.page, params.size)
        return page("tasks.html", params=params, rows=rows, total=total, pages=max(1, -(-total // params.size)))

    @app.get("/groups", response_class=HTMLResponse)
    def groups(request: Request) -> HTMLResponse:
        params = parse_list_params(request.query_params)
        rows, total = queries.groups_page(store, params.filter(), params.page, params.size)
        return page("groups.html", params=params, rows=rows, total=total, pages=max(1, -(-total // params.size)))

    @app.get("/episodes", response_class=HTMLResponse)
    def episodes(request: Request) -> HTMLResponse:
        params = parse_list_params(request.query_params)
        result = queries.episodes_page(store, params.filter(), sort=params.sort, descending=params.descending,
                                       page=params.page, page_size=params.size)
        env_ids, run_ids = choices.get()
        return page("episodes.html", params=params, result=result, env_ids=env_ids,
                    run_ids=run_ids, statuses=queries.STATUSES, failures=queries.FAILURES,
                    columns=queries.SORTABLE)

    # ---- one episode -------------------------------------------------------
    @app.get("/episodes/{episode_id}", response_class=HTMLResponse)
    def episode_page(episode_id: str, view: str = "turns", colour: str = "logprob",
                     branch_turn: str = "") -> HTMLResponse:
        episode = _episode(store, episode_id)
        if view not in ("turns", "tokens"):
            raise ViewerInputError(f"view={view!r} must be 'turns' or 'tokens'")
        if colour not in COLOUR_MODES:
            raise ViewerInputError(f"colour={colour!r} must be one of {', '.join(COLOUR_MODES)}")
        config = queries.run_config(store, episode.run_id)
        tokens = None
        if view == "tokens":
            decoder, note = find_decoder(model_dir_of(episode, config))
            tokens = token_view(episode, decoder, note)
        parent = queries.episode_row(store, episode.parent_id) if episode.parent_id else None
        return page("episode.html", ep=episode, view=view, colour=colour, tokens=tokens, parent=parent,
                    children=queries.children(store, episode.id), env_problem=_env_problem(episode.env_id),
                    images={t.index: find_images(t.info) for t in episode.turns},
                    has_tokens=any(t.action_ids for t in episode.turns), colour_modes=COLOUR_MODES,
                    branch_turn=int(branch_turn) if branch_turn.isdigit() else None,
                    policies=("random", "solver", "scripted"))

    @app.post("/episodes/{episode_id}/replay")
    async def replay(episode_id: str, request: Request) -> RedirectResponse:
        form = dict(parse_qsl((await request.body()).decode("utf-8"), keep_blank_values=True))
        row = queries.episode_row(store, episode_id)
        if row is None:
            raise NotFound(_missing(episode_id, store_label))
        choice = parse_replay_form(form, row["num_turns"])
        request_ = BranchPlan(episode_id=episode_id, from_turn=choice.from_turn, policy=choice.policy,
                                 seed=choice.seed)
        try:
            child = await run_in_threadpool(branch_episode, store, request_)
        except UnknownEnvError as exc:
            raise BranchError(f"cannot replay episode {episode_id}: {exc} The env may have been "
                              "renamed or its package uninstalled; install it to branch this episode.") from None
        except ConfigError as exc:
            raise BranchError(f"cannot replay with policy {choice.policy!r}: {exc}") from None
        return RedirectResponse(f"/episodes/{child.id}", status_code=303)

    @app.get("/episodes/{episode_id}/tree", response_class=HTMLResponse)
    def tree(episode_id: str) -> HTMLResponse:
        if queries.episode_row(store, episode_id) is None:
            raise NotFound(_missing(episode_id, store_label))
        root_id, rows = queries.tree_rows(store, episode_id)
        turns = queries.turn_actions(store, [r["id"] for r in rows])
        return page("tree.html", root=build_tree(root_id, rows, turns), focus=episode_id, size=len(rows))

    @app.get("/episodes/{episode_id}/media/{turn}/{key}")
    def media(episode_id: str, turn: int, key: str) -> FileResponse:
        episode = _episode(store, episode_id)
        if not 0 <= turn < episode.num_turns:
            raise NotFound(f"episode {episode_id} has no turn {turn}")
        found = media_file(episode.turns[turn].info, key)
        if found is None:
            raise NotFound(f"turn {turn} of episode {episode_id} names no image file '{key}' on this machine")
        return FileResponse(found[0], media_type=found[1])

    # ---- groups ------------------------------------------------------------
    @app.get("/group/{group_id:path}", response_class=HTMLResponse)
    def group_page(group_id: str) -> HTMLResponse:
        rows = store.summaries(EpisodeFilter(group_id=group_id), order_by="created_at", limit=64)
        if not rows:
            raise NotFound(f"no episodes in group '{group_id}' in store {store_label}")
        turns = queries.turn_actions(store, [r["id"] for r in rows])
        credit = store.credit([r["id"] for r in rows])
        anchors = find_anchors(turns)
        depth = max((len(t) for t in turns.values()), default=0)
        rewards = [r["total_reward"] for r in rows]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((x - mean) ** 2 for x in rewards) / len(rewards))
        return page("group.html", group_id=group_id, rows=rows, turns=turns, anchors=anchors, depth=depth,
                    mean=mean, std=std, total=store.count(EpisodeFilter(group_id=group_id)),
                    credit={eid: {c["index"]: c for c in cs} for eid, cs in credit.items()},
                    step_groups=step_groups(turns, credit, anchors))

    return app


def _missing(episode_id: str, where: str) -> str:
    return (f"no episode with id '{episode_id}' in store {where}. It may have been deleted, or the link "
            "points at another store; search the episode list for it.")


def _episode(store: TrajectoryStore, episode_id: str) -> Any:
    found = store.get_many([episode_id])
    if not found:
        raise NotFound(_missing(episode_id, store.display_url))
    return found[0]


def _env_problem(env_id: str) -> str | None:
    """Why the episode's env cannot be made here (None when it is registered)."""
    try:
        registry.canonical(env_id)
    except UnknownEnvError as exc:
        return f"{exc} The turns below are shown from the store; replaying needs the env installed."
    return None


__all__ = ["ListParams", "create_app"]
