"""Clients that keep recalling over a real ``memvault serve`` while a test erases (the erasure tests' load)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import httpx


class Readers:
    """One client per token recalling ``query`` from ``workspace`` in a loop, until the block ends.

    Entering waits until every client has finished one recall (all of them busy from then on); a recall
    that does not answer 200 stops its client and fails the block.
    """

    def __init__(self, url: str, tokens: Sequence[str], workspace: str, query: str, deadline: float) -> None:
        self.url = url
        self.tokens = list(tokens)
        self.workspace = workspace
        self.query = query
        self.deadline = deadline
        self.stop = threading.Event()
        self.done = [0] * len(self.tokens)
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(len(self.tokens))]

    def _run(self, n: int) -> None:
        headers = {"Authorization": f"Bearer {self.tokens[n]}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=self.deadline) as client:
            while not self.stop.is_set():
                response = client.post(
                    "/v1/recall", json={"workspace_id": self.workspace, "agent_id": "a1", "query": self.query}
                )
                if response.status_code != 200:
                    self.failures.append(f"{response.status_code} {response.text[:200]}")
                    return
                self.done[n] += 1

    def __enter__(self) -> Readers:
        for thread in self.threads:
            thread.start()
        deadline = time.monotonic() + self.deadline
        while min(self.done) == 0 and time.monotonic() < deadline and not self.failures:
            time.sleep(0.05)  # every reader has finished one recall: all of them are busy now
        assert not self.failures, self.failures
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(self.deadline)
        assert not self.failures, self.failures
