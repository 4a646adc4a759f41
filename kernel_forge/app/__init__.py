"""The commands (CLI, MCP, batch) and what sets a run up: the only layer that talks to users."""
