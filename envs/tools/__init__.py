"""Tools-v0: multi-turn tool calling (Python functions and MCP servers) on verifiable tasks."""
