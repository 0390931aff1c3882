"""memvault-mcp: memvault as an MCP server.

``memvault mcp`` serves configured memory slots to MCP clients over stdio or
streamable HTTP: each slot's tools, bound to the caller's own partition, and
its documents as resources. From Python::

    service = MemoryService(slots, workspace_id="acme")
    server = build_server(service, stdio_caller("dana"))   # an mcp.server.Server

The server side (``build_server``, ``http_app``, ``run_stdio``, ...) is
imported on first use: the MCP SDK takes about a second to import, and every
``memvault`` command loads this distribution's entry point.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memvault_mcp.config import ServerConfig, SlotConfig, load_server_config, parse_server_config
from memvault_mcp.service import Caller, MemoryService, open_slots

if TYPE_CHECKING:
    from memvault_mcp.server import BearerTokens, build_server, http_app, run_http, run_stdio, stdio_caller

_FROM_SERVER = frozenset({"BearerTokens", "build_server", "http_app", "run_http", "run_stdio", "stdio_caller"})


def __getattr__(name: str) -> Any:
    if name in _FROM_SERVER:
        return getattr(importlib.import_module("memvault_mcp.server"), name)
    raise AttributeError(f"module 'memvault_mcp' has no attribute {name!r}")


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
