"""Import user code named as ``package.module:attribute`` (tool functions, scripted policies, hooks)."""

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
