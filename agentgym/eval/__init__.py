"""`agentgym eval`: score a policy on envs with k attempts per task, pass@k, resumable and comparable.

- `plan`: which envs, kwargs, tasks and k (checked before any episode, stored with the run);
- `runner`: rolls out what the run still lacks through the collector, retrying infra failures;
- `metrics`: pass@k (unbiased estimator), mean reward with a 95% interval, per-env summaries;
- `compare`: tasks that flipped between two eval runs;
- `reverify`: re-score stored episodes with the env's current reward code.
"""

from agentgym.eval.compare import Comparison, compare_runs, load_plan
from agentgym.eval.metrics import EnvSummary, mean_ci95, pass_at_k, summarize
from agentgym.eval.plan import EnvEntry, EvalEnv, EvalPlan, load_env_file, resolve_env
from agentgym.eval.reverify import reverify_run
from agentgym.eval.runner import EvalResult, remaining, run_eval, score_run

__all__ = ["Comparison", "EnvEntry", "EnvSummary", "EvalEnv", "EvalPlan", "EvalResult", "compare_runs",
           "load_env_file", "load_plan", "mean_ci95", "pass_at_k", "remaining", "resolve_env", "reverify_run",
           "run_eval", "score_run", "summarize"]
