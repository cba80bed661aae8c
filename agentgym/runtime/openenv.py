"""Any OpenEnv environment server as an agentgym env (OpenEnv: Meta / Hugging Face, ``openenv-core`` on PyPI).

    env = OpenEnvEnv("http://127.0.0.1:8000")                 # an AgentEnv
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("hello")

The server's action model (its JSON schema, read from ``GET /schema``) decides
how a text action is mapped:

- an action with exactly one required string field (``message``, ``command``,
  ``code`` ...) takes the model's whole reply as that field: the env is
  ``free_text``;
- any other action model takes the reply as a JSON object of its fields; a
  reply that is not one is an error observation with
  ``info["error_kind"] = "malformed_action"`` and the episode goes on.

An observation is rendered as text: its only text field alone, else one
``field: value`` line per field. ``reward`` and ``done`` are carried over
(``done`` ends the episode as terminated); the whole observation is in
``info["openenv_observation"]``. Steps go through OpenEnv's own client
(``GenericEnvClient`` over its WebSocket, one session per env); a lost server
raises `EnvInfraError`.
"""

from __future__ import annotations

import json
from typing import Any

from agentgym.core import AgentEnv
from agentgym.errors import ConfigError, EnvInfraError, MalformedActionError, require
from agentgym.toolcalls import error_observation

_NOT_RENDERED = {"done", "reward", "metadata"}


class OpenEnvEnv(AgentEnv):
    """An OpenEnv environment server as an `AgentEnv`; see the module docstring."""

    thread_safe = True  # one OpenEnv session (its own connection) per instance
    deterministic = False  # the server's env is not known to replay identically

    def __init__(self, base_url: str, *, system_prompt: str = "", timeout_s: float = 60.0,
                 render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        require("openenv.core", extra="openenv", what="OpenEnvEnv")
        from openenv.core.generic_client import GenericEnvClient

        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.action_schema = self._schema()["action"]
        self.text_field = _single_text_field(self.action_schema)
        self.action_format = "free_text" if self.text_field else "tool_calls"  # type: ignore[misc]
        fields = ", ".join(self.action_schema.get("properties", {}))
        self.system_prompt = system_prompt or (
            "Each turn, reply with your action." if self.text_field else
            f"Each turn, reply with one JSON object, the action's fields: {fields}.")
        self._client = GenericEnvClient(base_url=self.base_url, message_timeout_s=timeout_s).sync()
        self._done = False

    def _schema(self) -> dict[str, Any]:
        import httpx

        try:
            response = httpx.get(f"{self.base_url}/schema", timeout=self.timeout_s)
            response.raise_for_status()
            return response.json()
        except httpx.HTTPError as exc:
            raise EnvInfraError(f"cannot read the OpenEnv server's schema at {self.base_url}/schema: {exc}",
                                kind="connection_refused") from None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        result = self._call("reset", **({"seed": seed} if seed is not None else {}))
        self._done = bool(result.done)
        return render_observation(result.observation), {"openenv_observation": dict(result.observation)}

    def step(self, action: str):
        if self._done:
            raise RuntimeError("the episode has ended; call reset() to start a new one")
        try:
            payload = self.to_action(action)
        except MalformedActionError as exc:
            return error_observation(exc), 0.0, False, False, {"error_kind": exc.kind, "error": str(exc)}
        result = self._call("step", payload)
        self._done = bool(result.done)
        info = {"openenv_observation": dict(result.observation)}
        return render_observation(result.observation), float(result.reward or 0.0), self._done, False, info

    def to_action(self, text: str) -> dict[str, Any]:
        """The OpenEnv action (a dict of the action model's fields) for the model's reply `text`."""
        if self.text_field:
            return {self.text_field: text}
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MalformedActionError(f"the reply is not a JSON object: {exc}",
                                       hint="reply with one JSON object of the action's fields") from None
        if not isinstance(value, dict):
            raise MalformedActionError("the reply must be a JSON object of the action's fields")
        missing = [k for k in self.action_schema.get("required", []) if k not in value]
        if missing:
            raise MalformedActionError(f"the action lacks the field(s) {missing}", kind="invalid_arguments")
        return value

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self._client, method)(*args, **kwargs)
        except (ConnectionError, OSError, TimeoutError) as exc:
            raise EnvInfraError(f"the OpenEnv server at {self.base_url} failed during {method}: {exc}",
                                kind="connection_lost") from None
        except RuntimeError as exc:  # OpenEnv reports server-side errors and closed sockets as RuntimeError
            raise EnvInfraError(f"the OpenEnv server at {self.base_url} failed during {method}: {exc}",
                                kind="openenv_error") from None

    def close(self) -> None:
        client, self._client = getattr(self, "_client", None), None
        if client is not None:
            try:
                client.close()
            except Exception:
                pass
        super().close()


def _single_text_field(schema: dict[str, Any]) -> str | None:
    """The name of the action model's only required field when it is a string, else None."""
    required = schema.get("required") or []
    properties = schema.get("properties") or {}
    if len(required) == 1 and properties.get(required[0], {}).get("type") == "string":
        return required[0]
    if not properties:
        raise ConfigError("the OpenEnv server's action schema has no fields; it cannot be driven with text")
    return None


def render_observation(observation: dict[str, Any]) -> str:
    """An OpenEnv observation as text: its only text field, else ``field: value`` lines."""
    shown = {k: v for k, v in observation.items() if k not in _NOT_RENDERED}
    texts = [v for v in shown.values() if isinstance(v, str)]
    if len(texts) == 1 and texts[0]:
        others = {k: v for k, v in shown.items() if not isinstance(v, str)}
        return texts[0] + ("\n" + "\n".join(f"{k}: {v}" for k, v in others.items()) if others else "")
    return "\n".join(f"{k}: {json.dumps(v) if not isinstance(v, str) else v}" for k, v in shown.items()) or "(empty)"
