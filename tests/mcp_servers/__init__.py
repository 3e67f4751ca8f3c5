"""Small MCP servers the MCP tests start as real subprocesses (stdio and streamable HTTP)."""
