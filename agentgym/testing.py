"""The conformance kit: contract tests any env gets for free.

Subclass `AgentEnvContract` in a pytest module and set `env_id` (and
`env_kwargs` if needed); pytest then runs Gymnasium's `check_env` and every
agentgym contract check on your env::

    from agentgym.testing import AgentEnvContract

    class TestMyEnv(AgentEnvContract):
        env_id = "MyEnv-v0"
        env_kwargs = {"difficulty": "easy"}
"""

from __future__ import annotations

from typing import Any, ClassVar

from agentgym import checker
from agentgym.registration import make


class AgentEnvContract:
    """pytest mixin: one test per contract check."""

    env_id: ClassVar[str] = ""
    env_kwargs: ClassVar[dict[str, Any]] = {}

    def make_env(self) -> Any:
        return make(self.env_id, **self.env_kwargs)

    def _assert(self, result: checker.CheckResult) -> None:
        assert result.passed or result.skipped, f"{self.env_id}: {result.name}: {result.detail}"

    def test_gymnasium_check_env(self) -> None:
        self._assert(checker.check_gymnasium(self.make_env))

    def test_determinism(self) -> None:
        self._assert(checker.check_determinism(self.make_env))

    def test_state_fingerprint(self) -> None:
        self._assert(checker.check_fingerprint(self.make_env))

    def test_malformed_actions_give_error_observations(self) -> None:
        self._assert(checker.check_malformed_actions(self.make_env))

    def test_snapshot_restore(self) -> None:
        self._assert(checker.check_snapshot(self.make_env))

    def test_async_twins(self) -> None:
        self._assert(checker.check_async(self.make_env))

    def test_close_is_idempotent(self) -> None:
        self._assert(checker.check_close_idempotent(self.make_env))
