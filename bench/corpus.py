"""The synthetic partition the latency benchmarks share: 100-line daily documents of random words.

Every line ends in a unique ``item<doc>-<line>`` tag, so a query for one tag is
selective and a query for common words matches most lines.
"""

from __future__ import annotations

import random

import memvault

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()  # noqa: SIM905 - one line of test words reads better than a list
LINES_PER_DOCUMENT = 100


def build(vault: memvault.Vault, lines: int, *, agent_id: str = "agent", workspace_id: str = "bench") -> None:
    """Fill one agent partition with ``lines`` lines in daily documents (same seed, same text every run)."""
    rng = random.Random(7)
    for doc in range(lines // LINES_PER_DOCUMENT):
        body = "".join(" ".join(rng.choices(WORDS, k=12)) + f" item{doc}-{i}\n" for i in range(LINES_PER_DOCUMENT))
        vault.retain(
            memvault.RetainRequest(
                workspace_id=workspace_id,
                agent_id=agent_id,
                tier="daily",
                key=f"2026-01-{doc + 1:02d}",
                content=body,
                mode="replace",
            )
        )
