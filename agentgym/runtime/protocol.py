"""The env server protocol's constants, error codes and JSON shapes (docs/env-protocol.md describes them).

Both sides import this module: the server (`agentgym.runtime.server`) turns
exceptions into error bodies, the client (`agentgym.runtime.remote`) turns
error bodies back into the exceptions they stand for, so a remote env raises
exactly what the local env would.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

from agentgym.errors import AgentGymError, ConfigError, EnvInfraError, MalformedActionError

#: bumped on any incompatible change; a server refuses clients of another major version
PROTOCOL_VERSION = 1


class ErrorCode(StrEnum):
    """The ``error.code`` of a failed request."""

    BAD_REQUEST = "bad_request"  #: the request is not valid JSON or lacks a field
    PROTOCOL_MISMATCH = "protocol_mismatch"  #: client and server speak different protocol versions
    UNKNOWN_ENV = "unknown_env"  #: the URL names another env than the one this server serves
    UNKNOWN_SESSION = "unknown_session"  #: closed, idle-timed-out, or from before a server restart
    BUSY = "busy"  #: every session slot is taken
    UNKNOWN_METHOD = "unknown_method"  #: not one of the env methods a client may call
    MALFORMED_ACTION = "malformed_action"  #: the env raised MalformedActionError (the model's fault)
    ENV_INFRA = "env_infra"  #: the env raised EnvInfraError (its backend broke)
    ENV_ERROR = "env_error"  #: the env raised anything else


HTTP_STATUS = {
    ErrorCode.BAD_REQUEST: 400, ErrorCode.PROTOCOL_MISMATCH: 426, ErrorCode.UNKNOWN_ENV: 404,
    ErrorCode.UNKNOWN_SESSION: 404, ErrorCode.BUSY: 503, ErrorCode.UNKNOWN_METHOD: 400,
    ErrorCode.MALFORMED_ACTION: 422, ErrorCode.ENV_INFRA: 502, ErrorCode.ENV_ERROR: 500,
}


class RemoteEnvError(AgentGymError, RuntimeError):
    """The remote env raised an exception that is neither a malformed action nor an infrastructure failure."""


class ProtocolError(AgentGymError):
    """The server refused a request; `code` is its `ErrorCode`."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


def jsonable(value: Any) -> Any:
    """`value` with everything JSON cannot carry turned into something it can (numbers, lists, str)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        try:
            return jsonable(value.item())
        except (TypeError, ValueError):
            pass
    if hasattr(value, "tolist"):
        return jsonable(value.tolist())
    return str(value)


def error_body(code: ErrorCode, message: str, **extra: Any) -> dict[str, Any]:
    """The ``{"error": {...}}`` object of a failed request."""
    return {"error": {"code": str(code), "message": message, **extra}}


def error_from_exception(exc: BaseException) -> dict[str, Any]:
    """The error body that stands for an exception the env raised."""
    if isinstance(exc, MalformedActionError):
        return error_body(ErrorCode.MALFORMED_ACTION, str(exc), kind=exc.kind, hint=exc.hint)
    if isinstance(exc, EnvInfraError):
        return error_body(ErrorCode.ENV_INFRA, exc.reason, kind=exc.kind)
    text = str(exc).strip()
    return error_body(ErrorCode.ENV_ERROR, f"{type(exc).__name__}: {text}" if text else type(exc).__name__,
                      type=type(exc).__name__)


def exception_from_error(body: dict[str, Any], where: str) -> Exception:
    """The exception a client raises for an error body from the server at `where`."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return EnvInfraError(f"the env server at {where} answered something that is not the protocol: "
                             f"{str(body)[:200]}", kind="bad_reply")
    code, message = str(error.get("code", "")), str(error.get("message", ""))
    if code == ErrorCode.MALFORMED_ACTION:
        return MalformedActionError(message, kind=str(error.get("kind") or "malformed_action"), hint=error.get("hint"))
    if code == ErrorCode.ENV_INFRA:
        return EnvInfraError(message, kind=str(error.get("kind") or "env_infra"))
    if code == ErrorCode.ENV_ERROR:
        return RemoteEnvError(f"the remote env raised {message}")
    if code in (ErrorCode.PROTOCOL_MISMATCH, ErrorCode.UNKNOWN_ENV, ErrorCode.UNKNOWN_METHOD,
                ErrorCode.BAD_REQUEST):
        return ConfigError(f"the env server at {where} refused the request ({code}): {message}")
    if code == ErrorCode.BUSY:
        return EnvInfraError(f"the env server at {where} is busy: {message}", kind="busy")
    if code == ErrorCode.UNKNOWN_SESSION:
        return EnvInfraError(f"the env server at {where} no longer has this session: {message}",
                             kind="session_lost")
    return ProtocolError(f"the env server at {where} answered {code}: {message}", code)
