"""Limits validation and the light import (no engine needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from agentgym.sandboxes import Limits


def test_defaults_are_valid() -> None:
    limits = Limits()
    assert limits.memory_bytes > 2 * limits.disk_bytes


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("cpus", 0, "cpus=0"), ("pids", 2, "at least 8"), ("memory_bytes", 1024, "16 MiB"), ("output_bytes", 10, "1024")],
)
def test_invalid_limits_say_what_and_how(field: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Limits(**{field: value})


def test_disk_must_fit_in_memory() -> None:
    with pytest.raises(ValueError, match="raise memory_bytes or lower disk_bytes"):
        Limits(memory_bytes=64 * 1024 * 1024, disk_bytes=32 * 1024 * 1024)


def test_import_is_light() -> None:
    code = "import sys, sandboxes; print(sorted(m for m in ('docker', 'requests', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_unknown_backend_is_rejected() -> None:
    from agentgym import sandboxes

    with pytest.raises(ValueError, match="choose one of"):
        sandboxes.open("x", backend="vm")  # type: ignore[arg-type]


def test_auto_falls_back_to_local_and_says_so(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from agentgym.sandboxes import backends, docker, local

    if local.unavailable_reason() is not None:
        pytest.skip(f"local backend unavailable on this machine: {local.unavailable_reason()}")
    monkeypatch.setattr(docker, "engine_available", lambda: False)
    with caplog.at_level("WARNING", logger="sandboxes"):
        assert backends.choose_backend("auto") == "local"
    assert "chose 'local'" in caplog.text and "weaker" in caplog.text
