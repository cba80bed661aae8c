"""agentgym's environment families. Each registers its ids in `register_builtin_envs`.

Registration uses string entry points, so listing envs imports no env code.
"""

from __future__ import annotations


def register_builtin_envs() -> None:
    """Register every built-in env (called through the `agentgym.envs` entry point)."""
    from agentgym.registration import register

    register(
        "Maze-v0",
        "agentgym.envs.maze.env:MazeEnv",
        description="Walk a grid maze to the goal; sparse reward, 5-30 turns, built-in solver.",
        difficulty="easy",
    )
    register(
        "KeyDoor-v0",
        "agentgym.envs.keydoor.env:KeyDoorEnv",
        description="Fetch the key, open the door, reach the goal: 10-24 move solutions, 24-40 turns, sparse "
                    "reward, dead-end pockets, BFS solver.",
    )
    register(
        "SQL-v0",
        "agentgym.envs.sql.env:SqlEnv",
        description="Text-to-SQL with live execution feedback: explore, then submit; execution-match reward.",
    )
    register(
        "Tools-v0",
        "agentgym.envs.tools.env:ToolsEnv",
        description="Tool calling (Python functions and MCP servers) on verifiable look-up, arithmetic and date tasks.",
    )
    register(
        "Code-v0",
        "agentgym.envs.code.env:CodeEnv",
        description="Write, run, test and submit Python in a Docker sandbox; reward = fraction of hidden tests passed.",
        image="code",
    )
    register(
        "Browser-v0",
        "agentgym.envs.browser.env:BrowserEnv",
        description="Web tasks in headless Chromium (local shop/forms/mail sites, MiniWoB++): page tree with bids, "
                    "click/fill/select actions; needs agentgym[browser] and Debian's chromium.",
        image="browser",
    )
    register(
        "SRE-v0",
        "agentgym.envs.sre.env:SreEnv",
        description="Diagnose and repair a live system (nginx, app, Redis, SQLite, worker) in a root container; "
        "11 fault kinds, observer/mutator tools under a policy, health-check reward.",
        image="sre-env",
    )
