"""memvault-mcp: memvault as an MCP server.

``memvault mcp`` serves configured memory slots to MCP clients over stdio or
streamable HTTP: each slot's tools, bound to the caller's own partition, and
its documents as resources. From Python::

    service = MemoryService(slots, workspace_id="acme")
    server = build_server(service, stdio_caller("dana"))   # an mcp.server.Server
"""

from __future__ import annotations

from memvault_mcp.config import ServerConfig, SlotConfig, load_server_config, parse_server_config
from memvault_mcp.server import BearerTokens, build_server, http_app, run_http, run_stdio, stdio_caller
from memvault_mcp.service import Caller, MemoryService, open_slots

__all__ = [
    "BearerTokens",
    "Caller",
    "MemoryService",
    "ServerConfig",
    "SlotConfig",
    "build_server",
    "http_app",
    "load_server_config",
    "open_slots",
    "parse_server_config",
    "run_http",
    "run_stdio",
    "stdio_caller",
]
