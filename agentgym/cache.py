"""Where agentgym caches what it builds once per machine (tiny models, generated SQL databases)."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """`$AGENTGYM_CACHE`, else `~/.cache/agentgym`."""
    return Path(os.environ.get("AGENTGYM_CACHE", Path.home() / ".cache" / "agentgym"))
