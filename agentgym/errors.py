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


class EnvInfraError(AgentGymError):
    """The env's own backend broke: not the model's fault (the one way an env says so).

    Raise it from `reset`/`step` (or any env call) when the database went away,
    a tool server crashed, a container died or the env server cannot be
    reached. The collector ends only that episode, as ``truncated`` with
    ``failure="infra"`` and this message as its reason, without marking the
    turn invalid; the data manager then retries or masks the episode, so the
    model is never scored for it. The next `reset` should reconnect or restart
    the backend. A malformed model action is never an `EnvInfraError`: answer it
    with an error observation and ``info["error_kind"]``.
    """

    def __init__(self, reason: str, *, kind: str = "env_infra"):
        super().__init__(reason)
        self.reason = reason
        #: a short machine-readable tag (``database_unavailable``, ``tool_server_crashed``, ``connection_refused`` ...)
        self.kind = kind


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
