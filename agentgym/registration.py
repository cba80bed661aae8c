"""Register environments by versioned id and make them, the Gymnasium way.

    agentgym.register("Maze-v0", "agentgym.envs.maze.env:MazeEnv", difficulty="easy")
    env = agentgym.make("Maze-v0", difficulty="hard")

Ids look like ``[namespace/]Name-vN``. Entry points are ``"module:Attr"``
strings, imported only when the env is made, or callables. Every env is also
registered in Gymnasium's registry (plain ids under the ``agentgym/``
namespace), so ``gymnasium.make("agentgym/Maze-v0")`` works after
``import agentgym``. Third-party packages add envs on install through the
``agentgym.envs`` entry-point group: each entry point names a function that
calls `register` (or a module that does so when imported).
"""

from __future__ import annotations

import difflib
import importlib
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import gymnasium

from agentgym.errors import ConfigError, RegistrationError, UnknownEnvError

ENTRY_POINT_GROUP = "agentgym.envs"
GYMNASIUM_NAMESPACE = "agentgym"
DEFAULT_MAX_TURNS = 30  #: turn limit of an episode when neither the caller, the spec nor the env sets one
_ID_RE = re.compile(r"^(?:(?P<ns>[\w.-]+)/)?(?P<name>[\w.:-]+?)-v(?P<version>\d+)$")


@dataclass(frozen=True)
class EnvSpec:
    """Everything needed to make one registered env."""

    id: str
    entry_point: str | Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: default turn limit the collector applies (None: the env's own)
    max_turns: int | None = None
    description: str = ""
    #: the env server image family (docker/<image>/) that serves it in a container; None: the generic image
    image: str | None = None

    @property
    def name(self) -> str:
        return parse_id(self.id)[1]

    @property
    def version(self) -> int:
        return parse_id(self.id)[2]

    @property
    def gymnasium_id(self) -> str:
        ns, name, version = parse_id(self.id)
        return f"{ns or GYMNASIUM_NAMESPACE}/{name}-v{version}"

    def load(self) -> Callable[..., Any]:
        """The env class or factory named by `entry_point`."""
        if callable(self.entry_point):
            return self.entry_point
        module_name, _, attr = self.entry_point.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise RegistrationError(
                f"env '{self.id}': cannot import module '{module_name}' of entry point "
                f"'{self.entry_point}': {exc}"
            ) from exc
        try:
            return getattr(module, attr)
        except AttributeError:
            raise RegistrationError(
                f"env '{self.id}': module '{module_name}' has no attribute '{attr}' (entry point "
                f"'{self.entry_point}')"
            ) from None

    def make(self, **kwargs: Any) -> Any:
        return self.load()(**{**self.kwargs, **kwargs})


def parse_id(env_id: str) -> tuple[str | None, str, int]:
    """Split ``ns/Name-vN`` into (namespace, name, version) or raise with the expected shape."""
    match = _ID_RE.match(env_id)
    if not match:
        raise RegistrationError(
            f"malformed env id {env_id!r}: ids look like 'Name-v0' or 'namespace/Name-v0' "
            "(letters, digits, '_', '-' and '.', then '-v' and a version number)"
        )
    return match["ns"], match["name"], int(match["version"])


class Registry(Mapping[str, EnvSpec]):
    """id -> EnvSpec. Reading it loads third-party plugins first."""

    def __init__(self) -> None:
        self._specs: dict[str, EnvSpec] = {}
        self._plugins_loaded = False
        self._loading = False

    def load_plugins(self) -> None:
        """Run every `agentgym.envs` entry point once (bad plugins warn, never crash the import)."""
        if self._plugins_loaded or self._loading:
            return
        self._loading = True
        try:
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                try:
                    obj = ep.load()
                    if callable(obj):
                        obj()
                except Exception as exc:  # a broken plugin must not break agentgym
                    warnings.warn(
                        f"agentgym env plugin '{ep.name}' ({ep.value}) failed to load: {exc!r}",
                        RuntimeWarning,
                        stacklevel=2,
                    )
            self._plugins_loaded = True
        finally:
            self._loading = False

    def add(self, spec: EnvSpec) -> None:
        self._specs[spec.id] = spec

    def __getitem__(self, env_id: str) -> EnvSpec:
        self.load_plugins()
        return self._specs[self.canonical(env_id)]

    def __iter__(self) -> Iterator[str]:
        self.load_plugins()
        return iter(sorted(self._specs))

    def __len__(self) -> int:
        self.load_plugins()
        return len(self._specs)

    def canonical(self, env_id: str) -> str:
        """The registered id for `env_id`.

        Accepts the ``agentgym/`` Gymnasium alias, and Gymnasium's ``"module:Name-v0"``
        form, which imports ``module`` (where the env registers itself) first.
        """
        self.load_plugins()
        if env_id in self._specs:
            return env_id
        module, sep, rest = env_id.rpartition(":")
        if sep and module and "/" not in module:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise UnknownEnvError(f"cannot import module '{module}' named in env id '{env_id}': {exc}") from None
            return self.canonical(rest)
        if env_id.startswith(GYMNASIUM_NAMESPACE + "/") and env_id[len(GYMNASIUM_NAMESPACE) + 1 :] in self._specs:
            return env_id[len(GYMNASIUM_NAMESPACE) + 1 :]
        raise UnknownEnvError(self._unknown_message(env_id))

    def _unknown_message(self, env_id: str) -> str:
        known = sorted(self._specs)
        msg = f"no env registered with id '{env_id}'."
        try:
            ns, name, _ = parse_id(env_id)
            versions = [k for k in known if parse_id(k)[1] == name and parse_id(k)[0] in (ns, None)]
        except RegistrationError:
            versions = []
        close = versions or difflib.get_close_matches(env_id, known, n=5, cutoff=0.4)
        if not close:
            lowered = env_id.lower()
            close = [k for k in known if lowered.split("-v")[0] in k.lower()][:5]
        if close:
            msg += f" Did you mean: {', '.join(close)}?"
        msg += f" Registered ids: {', '.join(known) if known else '(none)'}. List them with `agentgym envs list`."
        return msg


registry = Registry()


def register(
    id: str,
    entry_point: str | Callable[..., Any],
    *,
    max_turns: int | None = None,
    description: str = "",
    image: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    **env_kwargs: Any,
) -> EnvSpec:
    """Register an env under a versioned id.

    `max_turns`, `description` and `image` are the spec's own options (`max_turns`: the turn limit runs
    use unless they set one; `image`: the env server image family, ``docker/<image>/``, that serves the
    env in a container, default the generic ``env`` image). The env's default constructor arguments are `kwargs` (a mapping, Gymnasium's
    way, which also carries names the spec uses itself: ``kwargs={"max_turns": 50}`` reaches the
    constructor) and any further keyword arguments.
    """
    parse_id(id)
    clash = set(kwargs or {}) & set(env_kwargs)
    if clash:
        raise RegistrationError(f"env '{id}': {sorted(clash)} given both in kwargs= and as keyword arguments")
    kwargs = {**(kwargs or {}), **env_kwargs}
    if isinstance(entry_point, str) and ":" not in entry_point:
        raise RegistrationError(
            f"env '{id}': entry point {entry_point!r} must look like 'package.module:ClassName'"
        )
    if max_turns is not None and max_turns < 1:
        raise RegistrationError(f"env '{id}': max_turns must be >= 1, got {max_turns}")
    if image is not None and not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", image):
        raise RegistrationError(f"env '{id}': image {image!r} must be a docker/<family>/ directory name "
                                "(lower-case letters, digits, '.', '_', '-')")
    spec = EnvSpec(id=id, entry_point=entry_point, kwargs=dict(kwargs), max_turns=max_turns, description=description,
                   image=image)
    registry.add(spec)
    _mirror_into_gymnasium(spec)
    return spec


def _mirror_into_gymnasium(spec: EnvSpec) -> None:
    gym_id = spec.gymnasium_id
    if gym_id in gymnasium.registry:
        del gymnasium.registry[gym_id]
    gymnasium.register(
        id=gym_id,
        entry_point=spec.entry_point,
        kwargs=dict(spec.kwargs),
        max_episode_steps=spec.max_turns,
        disable_env_checker=False,
    )


def make(id: str, **kwargs: Any) -> Any:
    """A new instance of the env registered as `id`, with `kwargs` over its registered defaults.

    An env server URL (``http://host:port/NS/Name-v0``, ``http+unix://SOCKET/Name-v0``) gives a
    `agentgym.runtime.RemoteEnv`; its env's settings are the server's (``agentgym envs serve --env-kwargs``).
    """
    if isinstance(id, str) and id.startswith(("http://", "https://", "http+unix://")):
        return _make_remote(id, kwargs)
    spec = registry[id]
    try:
        return spec.make(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"cannot make '{spec.id}' with arguments {kwargs}: {exc}") from exc


def resolve_turn_limit(*limits: int | None) -> int:
    """The first limit that is set, in order of precedence (caller, spec, env), else `DEFAULT_MAX_TURNS`.

    Every place that decides how many turns an episode may take (collector, `agentgym rollout`,
    branching, eval) resolves it here, so they agree; `turn_limit` gives the env's own.
    """
    return next((int(n) for n in limits if n), DEFAULT_MAX_TURNS)


def spec(id: str) -> EnvSpec:
    """The `EnvSpec` of `id` (with "did you mean" on unknown ids)."""
    return registry[id]


def turn_limit(env_id: str, env: Any | None = None) -> int | None:
    """The turn limit an env comes with: its spec's `max_turns`, else the instance's own `max_turns` attribute.

    None when neither says (the collector then applies its fallback).
    """
    registered = registry[env_id].max_turns
    if registered is not None:
        return registered
    own = getattr(getattr(env, "unwrapped", env), "max_turns", None)
    return own if isinstance(own, int) and own >= 1 else None


def _make_remote(url: str, kwargs: dict[str, Any]) -> Any:
    from agentgym.runtime.remote import RemoteEnv

    allowed = {"call_timeout_s", "open_timeout_s", "connect_timeout_s", "render_mode"}
    if set(kwargs) - allowed:
        raise ConfigError(f"env server {url}: the env's own settings {sorted(set(kwargs) - allowed)} are fixed where "
                          "the server starts (agentgym envs serve ID --env-kwargs JSON); a client may set only "
                          f"{sorted(allowed)}")
    return RemoteEnv(url, **kwargs)
