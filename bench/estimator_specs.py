"""Estimators as the benchmarks take them on the command line: a name, optionally with parameters.

    grpo,gigpo                      two estimators with their defaults
    grpo,gigpo:gamma=0.8,omega=0.5  GRPO and GiGPO with gamma 0.8 and omega 0.5
    gigpo:gamma=0.8;gigpo;rloo      entries with parameters end at ';'

A spec's text is its label in tables and JSON, so two variants of one estimator stay apart.
"""

from __future__ import annotations

from typing import Any

from agentgym.errors import ConfigError


def split_specs(text: str) -> list[str]:
    """Entries are comma-separated unless they carry parameters: 'grpo,gigpo:omega=0.5,gamma=0.8;rloo'."""
    out = []
    for chunk in text.split(";"):
        head, colon, rest = chunk.partition(":")
        if colon:
            *plain, last = head.split(",")
            out += [p for p in plain if p] + [f"{last}:{rest}"]
        else:
            out += [p for p in chunk.split(",") if p]
    return [s.strip() for s in out if s.strip()]


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """'gigpo:omega=0.5,gamma=0.8' -> ('gigpo', {'omega': 0.5, 'gamma': 0.8}); values parsed as YAML scalars."""
    import yaml

    name, _, rest = spec.partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"estimator {spec!r}: parameters are written key=value, got {item!r}")
        params[key.strip()] = yaml.safe_load(value)
    return name.strip(), params
