"""Import user code named as ``package.module:attribute`` (tool functions, scripted policies, hooks), and a
package's attributes imported from their modules on first use (`lazy_attributes`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from agentgym.errors import ConfigError


def import_callable(target: str, *, what: str) -> Callable[..., Any]:
    """The callable named by `target`, or a `ConfigError` that names `what` it was meant to be."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{what} {target!r} must look like 'package.module:function'")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import {what} {target!r}: {exc}") from None
    if not callable(obj):
        raise ConfigError(f"{what} {target!r} is not callable")
    return obj


def lazy_attributes(package: str, modules: dict[str, str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` (PEP 562) for `package`: attribute `name` is imported from the module
    `modules[name]` when first read, so importing the package does not import that module's dependencies."""

    def __getattr__(name: str) -> Any:
        if name in modules:
            return getattr(importlib.import_module(modules[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
