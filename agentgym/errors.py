"""One exception hierarchy for agentgym.

Every message says what was wrong, the value that was wrong where there is one,
and what to do about it.
"""

from __future__ import annotations


class AgentGymError(Exception):
    """Base class of every error agentgym raises on purpose."""


class UnknownEnvError(AgentGymError, KeyError):
    """An env id that is not registered."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class RegistrationError(AgentGymError):
    """A malformed or conflicting `register` call."""


class StoreError(AgentGymError):
    """The trajectory store cannot be opened or used (bad URL, unreachable server, old schema)."""


class ConfigError(AgentGymError, ValueError):
    """A config value breaks a rule; raised before any work starts."""


class MalformedActionError(AgentGymError, ValueError):
    """The model's text could not be turned into an action.

    `kind` is a short machine-readable tag (`malformed_action`, `unknown_tool`,
    `invalid_arguments`, `tool_error`) that envs put into `info["error_kind"]`.
    """

    def __init__(self, message: str, *, kind: str = "malformed_action", hint: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.hint = hint


class SnapshotUnsupportedError(AgentGymError, NotImplementedError):
    """The env has no `snapshot`/`restore`; branch by replaying the action prefix instead."""


class MissingExtraError(AgentGymError, ImportError):
    """An optional dependency is not installed."""

    def __init__(self, package: str, extra: str, what: str):
        super().__init__(
            f"{what} needs the '{package}' package, which is not installed. "
            f"Install it with: pip install 'agentgym[{extra}]'"
        )
        self.package = package
        self.extra = extra


def require(module: str, *, extra: str, what: str):
    """Import an optional dependency or raise `MissingExtraError` naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(module.split(".")[0], extra, what) from exc
