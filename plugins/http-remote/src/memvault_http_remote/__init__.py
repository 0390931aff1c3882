"""memvault over HTTP.

* :mod:`memvault_http_remote.client` — the ``http-remote`` provider (keep-alive HTTP on the standard library).
* :mod:`memvault_http_remote.app` — the ASGI service (Starlette) that exposes any provider.
* :mod:`memvault_http_remote.commands` — ``memvault serve`` and ``memvault token``.
"""

from __future__ import annotations

from memvault_http_remote.client import HttpRemoteProvider

__all__ = ["HttpRemoteProvider"]
