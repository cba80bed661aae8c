"""A real third-party text game as an agentgym env, the way a user would wrap it: TextWorld (Microsoft, PyPI).

Importing this module registers ``TextWorld-v0``, so ``"tests.runtime.textworld_env:TextWorld-v0"`` is a valid
env id anywhere (Gymnasium's ``module:Name-v0`` form). TextWorld's game engine (Jericho's frotz) keeps global
state, so the class does not declare ``thread_safe``: the collector runs each instance in its own worker process.
"""

from __future__ import annotations

from pathlib import Path

import textworld

import agentgym

INFOS = textworld.EnvInfos(policy_commands=True, admissible_commands=True, score=True, max_score=True, won=True,
                           lost=True)


def make_game(folder: str | Path, seed: int = 1234) -> str:
    """Generate a small seeded game (3 rooms, a 2-step quest) into `folder`, offline; its .z8 path."""
    options = textworld.GameOptions()
    options.seeds, options.nb_rooms, options.nb_objects, options.quest_length = seed, 3, 5, 2
    options.path = str(Path(folder) / f"game-{seed}.z8")
    game_file, _ = textworld.make(options)
    return game_file


class TextWorldEnv(agentgym.AgentEnv):
    """One TextWorld game; every reply is a command the game answers in its own words."""

    action_format = "free_text"
    system_prompt = "You play a text adventure. Each turn, reply with one command, e.g. 'open chest'."

    def __init__(self, game_file: str, max_turns: int = 20):
        super().__init__()
        self.game_file, self.max_turns = game_file, max_turns
        self._game = textworld.start(game_file, request_infos=INFOS)
        self._state = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._state = self._game.reset()
        return self._state.feedback.strip(), {"max_score": self._state.max_score}

    def step(self, action: str):
        command = " ".join("".join(c for c in action if c.isascii() and c.isprintable()).split())
        if not command:  # the Z-machine waits forever for a line with no command on it
            return "I beg your pardon? Reply with one command.", 0.0, False, False, {"won": False}
        before = self._state.score
        self._state, _, done = self._game.step(command[:200])
        reward = float(self._state.score - before)
        return self._state.feedback.strip() or "Nothing happens.", reward, bool(done), False, {"won": self._state.won}

    def solver_action(self) -> str:
        return self._state.policy_commands[0]

    def valid_actions(self):
        return list(self._state.admissible_commands)

    def close(self):
        self._game.close()
        super().close()


agentgym.register("TextWorld-v0", f"{__name__}:TextWorldEnv", description="A TextWorld game (test wrapper).")
