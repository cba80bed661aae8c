"""Per-update diagnostics of credit assignment: what the advantages looked like and where they came from.

Logged under `credit/` in metrics.jsonl, TensorBoard and the store (the viewer's run page draws them):

    adv_mean, adv_std, adv_abs_max           the per-turn advantages of the batch
    adv_token_mean                           the advantage per trained token (what a token-mean loss sees:
                                             long episodes count once per token, not once per episode)
    adv_episode_mean                         the mean over episodes of each episode's advantage per token (what
                                             an episode-mean loss, aggregation seq-mean-token-mean, sees; a
                                             group-normalised outcome averages 0 here whatever the lengths)
    episode_{mean,std,abs_max}               the episode-level part (the whole advantage for trajectory-level
                                             estimators: grpo, rloo, dr_grpo)
    step_{mean,std,abs_max}                  the step-level part (gigpo, oprl), before omega/alpha
    step_singleton_frac                      share of turns alone in their step group (no step signal)
    step_group_size_mean                     mean turns per step group, seen from a turn
    invalid_frac                             share of turns whose action was invalid
    repeat_noop_frac                         share of turns that repeat the previous turn's action from the state
                                             that action left unchanged (the same state fingerprint): a policy
                                             pressing into a wall; only turns with fingerprints count
    noop_repeat_share                        of the turns taken from a state the previous turn left unchanged, the
                                             share that repeat that turn's action (how often a loop goes on)
    repeat_p_first, repeat_p_long            the mean sampled probability of such a repeated action on its first
                                             repeat and after 4 or more: how sure the policy is of its loops (the
                                             long ones are the sure ones, so long > first even with a window that
                                             keeps the prompt from growing; only with recorded action log-probs)
    turns_per_episode                        mean episode length of the batch
    failed_episode_share, failed_token_share the share of episodes that failed, and of trained tokens in them
                                             (a token share far above the episode share: long failures dominate)
    oprl_rank_acc, oprl_rank_pairs           oprl: the share of the batch's outcome pairs whose step rewards, summed
                                             per episode, rank them as the outcomes do (0.5: the PRM knows nothing)
    oprl_rank_acc_per_turn                   oprl: the same ranking by the mean step reward per turn (the rank gate's)
    oprl_state_acc, oprl_state_pairs         oprl: the share of same-state turn pairs (different actions, different
                                             outcomes) whose step rewards rank them as the outcomes do (the state gate's)
    oprl_gate_state, oprl_step_weight        oprl: 1 where the state gate decided (0: the rank gate), and the weight
                                             (alpha * w) it gave the step part
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agentgym.credit import CreditResult, TurnBatch

TRAJECTORY_LEVEL = ("grpo", "dr_grpo", "rloo")


def _moments(prefix: str, values: np.ndarray | None) -> dict[str, float]:
    if values is None or not len(values):
        return {}
    return {f"{prefix}_mean": float(values.mean()), f"{prefix}_std": float(values.std()),
            f"{prefix}_abs_max": float(np.abs(values).max())}


def _episode_mean(adv: np.ndarray, tokens: np.ndarray, batch: TurnBatch) -> float:
    """Mean over episodes (those with trained tokens) of the episode's token-weighted mean advantage."""
    if not batch.n_episodes or not tokens.sum():
        return 0.0
    adv_sum = np.bincount(batch.episode_of_turn, weights=adv * tokens, minlength=batch.n_episodes)
    tok_sum = np.bincount(batch.episode_of_turn, weights=tokens, minlength=batch.n_episodes)
    present = tok_sum > 0
    return float((adv_sum[present] / tok_sum[present]).mean())


def noop_loops(batch: TurnBatch) -> dict[str, float]:
    """`repeat_noop_frac`, `noop_repeat_share`, `repeat_p_first` and `repeat_p_long` (module docstring).

    A turn *repeats a no-op* when its state fingerprint and action equal the previous turn's in the episode: the
    previous action left the state unchanged and the policy chose it again (the observation said "Wall down",
    the policy answered "down" again). Each figure is left out when the batch has nothing to count it on.
    """
    fp = batch.fingerprint
    later = np.zeros(batch.n_turns, dtype=bool)  # fingerprinted turns after an episode's first
    later[1:] = (batch.position[1:] > 0) & (fp[1:] >= 0) & (fp[:-1] >= 0)
    if not later.any():
        return {}
    turns = [t for ep in batch.episodes for t in ep.turns]
    actions = np.array([t.action_text.strip() for t in turns], dtype=object)
    after_noop = later.copy()
    after_noop[1:] &= fp[1:] == fp[:-1]
    repeat = after_noop.copy()
    repeat[1:] &= actions[1:] == actions[:-1]
    out = {"repeat_noop_frac": float(repeat[later].mean())}
    if not after_noop.any():
        return out
    out["noop_repeat_share"] = float(repeat.sum() / after_noop.sum())
    run, first, long = 0, [], []
    for i in range(batch.n_turns):  # run: how many times in a row turn i repeated a no-op
        run = run + 1 if repeat[i] else 0
        if run and turns[i].action_logprobs and (run == 1 or run >= 5):
            (first if run == 1 else long).append(float(np.exp(sum(turns[i].action_logprobs))))
    if first:
        out["repeat_p_first"] = float(np.mean(first))
    if long:
        out["repeat_p_long"] = float(np.mean(long))
    return out


def credit_diagnostics(result: CreditResult, action_tokens: Sequence[int], success_reward: float) -> dict[str, float]:
    """Scalars (without the `credit/` prefix) from one update's `CreditResult`.

    `action_tokens` [T] holds the trained action tokens of each turn, in the result's flat turn order.
    """
    batch = result.batch
    adv = np.asarray(result.advantages, dtype=np.float64)
    tokens = np.asarray(action_tokens, dtype=np.float64)
    out = _moments("adv", adv)
    out["adv_token_mean"] = float((adv * tokens).sum() / tokens.sum()) if tokens.sum() else 0.0
    out["adv_episode_mean"] = _episode_mean(adv, tokens, batch)
    episode = result.episode_part
    if episode is None and result.estimator in TRAJECTORY_LEVEL:
        episode = adv
    out.update(_moments("episode", episode))
    out.update(_moments("step", result.step_part))
    if result.step_group is not None and len(result.step_group):
        sizes = np.bincount(result.step_group)[result.step_group]
        out["step_singleton_frac"] = float((sizes == 1).mean())
        out["step_group_size_mean"] = float(sizes.mean())
    out["invalid_frac"] = float((~batch.valid).mean()) if batch.n_turns else 0.0
    out.update(noop_loops(batch))
    out["turns_per_episode"] = float(batch.lengths.mean()) if batch.n_episodes else 0.0
    if batch.n_episodes and tokens.sum():
        failed = batch.outcome < success_reward
        out["failed_episode_share"] = float(failed.mean())
        out["failed_token_share"] = float(tokens[np.repeat(failed, batch.lengths)].sum() / tokens.sum())
    out.update(result.scalars)
    return out
