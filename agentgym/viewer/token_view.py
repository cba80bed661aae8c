"""The token view: every sampled action token with its log-prob, advantage and loss mask.

Tokens are decoded one by one with the run's tokenizer when the run recorded a
model directory (``model_dir`` in the episode's metadata or the run config) that
holds a ``tokenizer.json``; otherwise they are shown as ids. Nothing is
re-tokenized: the ids are exactly what the policy sampled.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.trajectory import Episode, Turn

_MODEL_KEYS = ("model_dir", "model_path", "model")


@dataclass(frozen=True)
class TokenCell:
    """One action token as the viewer draws it."""

    token_id: int
    text: str  #: the decoded piece, or "#id" without a tokenizer
    logprob: float | None
    version: int | None
    in_loss: bool
    logprob_colour: str
    advantage_colour: str

    @property
    def prob(self) -> float | None:
        return math.exp(self.logprob) if self.logprob is not None else None

    @property
    def title(self) -> str:
        parts = [f"id {self.token_id}"]
        if self.logprob is not None:
            parts.append(f"logprob {self.logprob:.3f} (p={self.prob:.2f})")
        if self.version is not None:
            parts.append(f"policy v{self.version}")
        parts.append("in loss" if self.in_loss else "masked from loss")
        return " · ".join(parts)


@dataclass(frozen=True)
class TurnTokens:
    """The tokens of one turn and their summary."""

    index: int
    cells: list[TokenCell]
    advantage: float | None
    mean_logprob: float | None
    masked: int  #: tokens excluded from the loss


@dataclass(frozen=True)
class TokenView:
    turns: list[TurnTokens]
    decoder_note: str  #: how tokens are shown ("decoded with ...", or why they are ids)
    max_abs_advantage: float


class TokenDecoder:
    """Decodes single token ids with a `tokenizers` tokenizer.json (no transformers import)."""

    def __init__(self, path: Path):
        from agentgym.errors import require

        tokenizers = require("tokenizers", extra="train", what="decoding tokens in the viewer")
        self.path = path
        self._tok = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
        self._pieces: dict[int, str] = {}

    def piece(self, token_id: int) -> str:
        """The text of one token (special tokens included)."""
        if token_id not in self._pieces:
            self._pieces[token_id] = self._tok.decode([token_id], skip_special_tokens=False)
        return self._pieces[token_id]


@functools.lru_cache(maxsize=16)
def _decoder_for(path: str) -> TokenDecoder:
    return TokenDecoder(Path(path))


def model_dir_of(episode: Episode, run_config: dict[str, Any] | None) -> str | None:
    """The model directory recorded for the episode (metadata first, then the run config)."""
    for source in (episode.metadata, run_config or {}):
        for key in _MODEL_KEYS:
            value = source.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def find_decoder(model_dir: str | None) -> tuple[TokenDecoder | None, str]:
    """A decoder for `model_dir` and a note for the page saying what it is (or why there is none)."""
    if not model_dir:
        return None, "token ids (the run recorded no model_dir, so there is no tokenizer to decode them)"
    if not (Path(model_dir) / "tokenizer.json").is_file():
        return None, f"token ids (no tokenizer.json in the run's model_dir {model_dir})"
    try:
        return _decoder_for(model_dir), f"decoded with the tokenizer in {model_dir}"
    except Exception as exc:  # a broken tokenizer file must not break the page
        return None, f"token ids (cannot load the tokenizer in {model_dir}: {exc})"


def logprob_colour(logprob: float | None) -> str:
    """Red for unlikely tokens, through yellow, to green for near-certain ones."""
    if logprob is None:
        return "#eeeeee"
    prob = min(1.0, max(0.0, math.exp(logprob)))
    return f"hsl({prob * 120:.0f}, 75%, 82%)"


def advantage_colour(advantage: float | None, scale: float) -> str:
    """Blue for positive advantages, red for negative ones, paler near zero."""
    if advantage is None or scale <= 0:
        return "#eeeeee"
    strength = min(1.0, abs(advantage) / scale)
    hue = 210 if advantage >= 0 else 0
    return f"hsl({hue}, 80%, {95 - 30 * strength:.0f}%)"


def token_view(episode: Episode, decoder: TokenDecoder | None, note: str) -> TokenView:
    advantages = [abs(t.advantage) for t in episode.turns if t.advantage is not None]
    scale = max(advantages, default=0.0)
    turns = [_turn_tokens(t, decoder, scale) for t in episode.turns]
    return TokenView(turns=turns, decoder_note=note, max_abs_advantage=scale)


def _turn_tokens(turn: Turn, decoder: TokenDecoder | None, scale: float) -> TurnTokens:
    ids = turn.action_ids
    logprobs = turn.action_logprobs
    versions = turn.token_versions
    mask = turn.loss_mask if turn.loss_mask is not None else [1] * len(ids)
    adv_colour = advantage_colour(turn.advantage, scale)
    cells = []
    for i, token_id in enumerate(ids):
        lp = float(logprobs[i]) if i < len(logprobs) else None
        text = decoder.piece(int(token_id)) if decoder is not None else f"#{token_id}"
        cells.append(TokenCell(
            token_id=int(token_id), text=text, logprob=lp,
            version=int(versions[i]) if i < len(versions) else None,
            in_loss=bool(mask[i]) if i < len(mask) else True,
            logprob_colour=logprob_colour(lp), advantage_colour=adv_colour))
    known = [c.logprob for c in cells if c.logprob is not None]
    return TurnTokens(index=turn.index, cells=cells, advantage=turn.advantage,
                      mean_logprob=sum(known) / len(known) if known else None,
                      masked=sum(1 for c in cells if not c.in_loss))
