"""The entry point every `memvault` command loads must not pull in the MCP SDK."""

from __future__ import annotations

import subprocess
import sys


def test_loading_the_entry_point_and_its_command_leaves_the_mcp_sdk_unimported() -> None:
    code = (
        "import sys\n"
        "import click\n"
        "from memvault_mcp import plugin\n"
        "plugin.memvault_register_commands(cli=click.Group())\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'memvault_mcp.server'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_server_side_names_still_import_from_the_package() -> None:
    import memvault_mcp

    assert callable(memvault_mcp.build_server)
    assert memvault_mcp.build_server.__module__ == "memvault_mcp.server"
