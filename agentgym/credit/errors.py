"""Errors raised by credit assignment; each names the value, the rule and the fix."""

from __future__ import annotations

from agentgym.errors import AgentGymError, ConfigError


class UnknownEstimatorError(AgentGymError, KeyError):
    """An estimator name that is not registered (the message suggests the closest names)."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class CreditInputError(AgentGymError, ValueError):
    """The episodes lack an input the estimator needs (fingerprints, critic values, a tree, ...)."""


class CreditParamError(ConfigError):
    """An estimator parameter is unknown or out of range."""
