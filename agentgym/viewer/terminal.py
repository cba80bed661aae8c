"""The viewer in the terminal: `agentgym episodes show` and `agentgym episodes diff`, drawn with rich."""

from __future__ import annotations

import json
import math

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agentgym.trajectory import Episode, Turn, TurnDifference
from agentgym.viewer.media import find_images
from agentgym.viewer.token_view import TokenDecoder

_STATUS_STYLE = {"complete": "green", "truncated": "yellow", "error": "red", "partial": "blue"}


def header(episode: Episode) -> Panel:
    """Where the episode came from and how it ended."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column()
    status = Text(str(episode.status), style=_STATUS_STYLE.get(str(episode.status), ""))
    if episode.failure:
        status.append(f" ({episode.failure} failure)", style="red")
    rows = [("env / task", f"{episode.env_id} / {episode.task_id}  (seed {episode.seed})"),
            ("run / group", f"{episode.run_id or '-'} / {episode.group_id or '-'}"),
            ("status", status), ("total reward", f"{episode.total_reward:.3f} over {episode.num_turns} turns")]
    if episode.policy_version is not None:
        rows.append(("policy version", str(episode.policy_version)))
    if episode.parent_id:
        rows.append(("branched from", f"{episode.parent_id} at turn {episode.branch_turn}"))
    if episode.error:
        rows.append(("error", Text(episode.error, style="red")))
    if episode.num_action_tokens:
        rows.append(("action tokens", str(episode.num_action_tokens)))
    for name, value in rows:
        grid.add_row(name, value)
    return Panel(grid, title=f"episode {episode.id}", title_align="left")


def token_stats(turn: Turn) -> str:
    """One line: how many tokens, their mean log-prob, masked tokens, versions, advantage."""
    parts = []
    if turn.action_ids:
        parts.append(f"{len(turn.action_ids)} tokens")
    if turn.action_logprobs:
        mean = sum(turn.action_logprobs) / len(turn.action_logprobs)
        parts.append(f"mean logprob {mean:.3f} (min {min(turn.action_logprobs):.3f})")
    if turn.loss_mask is not None:
        parts.append(f"{turn.loss_mask.count(0)} masked")
    if turn.token_versions:
        versions = sorted(set(turn.token_versions))
        parts.append("policy v" + ",".join(str(v) for v in versions))
    if turn.advantage is not None:
        parts.append(f"advantage {turn.advantage:+.3f}")
    return " · ".join(parts)


def coloured_tokens(turn: Turn, decoder: TokenDecoder | None) -> Text:
    """The action tokens, each coloured by probability (red unlikely .. green certain), masked ones struck."""
    text = Text()
    mask = turn.loss_mask or [1] * len(turn.action_ids)
    for i, token_id in enumerate(turn.action_ids):
        piece = decoder.piece(int(token_id)) if decoder else f"[{token_id}]"
        prob = math.exp(turn.action_logprobs[i]) if i < len(turn.action_logprobs) else None
        colour = "grey50" if prob is None else ("red" if prob < 0.2 else "yellow" if prob < 0.6 else "green")
        style = colour + ("" if i >= len(mask) or mask[i] else " strike dim")
        text.append(piece, style=style)
    return text


def turn_block(turn: Turn, decoder: TokenDecoder | None, show_tokens: bool) -> Group:
    head = Text(f"turn {turn.index}", style="bold cyan")
    head.append(f"  reward {turn.reward:g}", style="bold")
    if turn.terminated:
        head.append("  terminated", style="green")
    if turn.truncated:
        head.append("  truncated", style="yellow")
    if not turn.valid:
        head.append(f"  {turn.info.get('error_kind')}", style="red")
    if turn.timings:
        head.append("  " + " ".join(f"{k}={v * 1000:.1f}ms" for k, v in turn.timings.items()), style="dim")
    parts: list = [head, Text("observation: ", style="dim") + Text(turn.observation),
                   Text("action: ", style="dim") + Text(turn.action_text, style="green")]
    stats = token_stats(turn)
    if stats:
        parts.append(Text("tokens: ", style="dim") + Text(stats))
    if show_tokens and turn.action_ids:
        parts.append(Text("        ") + coloured_tokens(turn, decoder))
    info = {k: v for k, v in turn.info.items() if k != "next_observation"}
    for image in find_images(info):
        info[image.key.split(".")[0]] = f"<{image.kind} image>"
    if info:
        parts.append(Text("info: ", style="dim") + Text(json.dumps(info, ensure_ascii=False, default=str)[:300]))
    return Group(*parts, Text(""))


def print_episode(console: Console, episode: Episode, decoder: TokenDecoder | None, show_tokens: bool) -> None:
    console.print(header(episode))
    for turn in episode.turns:
        console.print(turn_block(turn, decoder, show_tokens))
    if episode.turns and episode.turns[-1].info.get("next_observation"):
        console.print(Text("final observation: ", style="dim") + Text(str(episode.turns[-1].info["next_observation"])))


def _diff_cell(turn: Turn | None, highlight: str | None) -> Text:
    if turn is None:
        return Text("— (episode over)", style="dim")
    cell = Text(turn.observation, style="red" if highlight == "observation" else "dim")
    cell.append("\n→ ")
    cell.append(turn.action_text, style="bold red" if highlight == "action_text" else "bold")
    if turn.reward or highlight == "reward":
        cell.append(f"  reward {turn.reward:g}", style="red" if highlight == "reward" else "green")
    if turn.terminated or turn.truncated:
        cell.append("  terminated" if turn.terminated else "  truncated",
                    style="red" if highlight in ("terminated", "truncated") else "yellow")
    return cell


def diff_table(a: Episode, b: Episode, divergence: TurnDifference | None) -> Table:
    """Both episodes turn by turn (observation, then → action); the first differing turn is marked."""
    table = Table(title=f"{a.env_id} task {a.task_id}", show_lines=True, expand=True)
    table.add_column("", width=1, style="bold red")
    table.add_column("turn", justify="right", width=4)
    table.add_column(f"A {a.id[:12]}  (reward {a.total_reward:g}, {a.status})", ratio=1)
    table.add_column(f"B {b.id[:12]}  (reward {b.total_reward:g}, {b.status})", ratio=1)
    for i in range(max(a.num_turns, b.num_turns)):
        at_divergence = divergence is not None and i == divergence.turn
        highlight = divergence.field if at_divergence else None
        table.add_row("▶" if at_divergence else "", str(i),
                      _diff_cell(a.turns[i] if i < a.num_turns else None, highlight),
                      _diff_cell(b.turns[i] if i < b.num_turns else None, highlight))
    return table
