"""Run the service over a provider whose recalls take ARGV[1] seconds (for the SIGTERM test).

Usage: python slow_server.py DELAY
"""

from __future__ import annotations

import sys
import threading

from httpremote_support import SlowProvider

import memvault
from memvault_http_remote.server import run_server
from memvault_http_remote.settings import ServerSettings, TokenStore

if __name__ == "__main__":
    provider = SlowProvider(delay=float(sys.argv[1]))

    def announce() -> None:
        provider.started.wait()
        print("recall started", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    vault = memvault.Vault(provider, name="slow")
    run_server(vault, ServerSettings(port=0, shutdown_grace=10.0), TokenStore([]))
