"""No network at run time: the embedder loads and embeds with the network gone, and never tries it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys

    tried = []

    def audit(event, args):
        if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "urllib.Request"):
            tried.append((event, repr(args)[:80]))

    sys.addaudithook(audit)

    from memvault.registry import get_registry

    embedder = get_registry().embedder("minilm", {})
    vectors = embedder.embed(["The user is allergic to peanuts.", "Which nut reaction should the cook worry about?"])
    assert vectors.shape == (2, 384), vectors.shape
    assert float(vectors[0] @ vectors[1]) > 0.25
    print("network attempts:", tried)
    sys.exit(1 if tried else 0)
    """
)


def _no_network_prefix() -> list[str]:
    """``unshare -n`` (a network namespace with nothing in it) where this machine allows it."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        return []
    probe = subprocess.run([unshare, "-n", "true"], capture_output=True, timeout=30)
    return [unshare, "-n"] if probe.returncode == 0 else []


def test_embeds_with_no_network_and_never_tries_it() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_", "MEMVAULT_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HOME=os.environ.get("HOME", "/tmp"))
    prefix = _no_network_prefix()
    result = subprocess.run(
        [*prefix, sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "network attempts: []" in result.stdout
