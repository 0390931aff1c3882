"""The parity suite against a real `memvault serve` that recalls by meaning (its default embedder on; #36).

The session server of ``test_parity.py`` recalls by words, as the suite's own vaults do. An operator's
service usually has the default embedder installed and on, so its recalls fuse meaning in (P36) whatever the
client's vault says, and a line sharing no term with the query may come back. The service says so
(``recall_by_meaning`` in ``GET /v1/capabilities``), the client tells it (``recall_embedder()``), and the
suite's ``find`` then holds each hit found by meaning alone to P36 before leaving it out, so the tests that
assume ranking by words hold without being weakened.

Here the suite's groups whose expectations may rest on ranking by words run against such a service. Lines
are embedded in the background (P37), so how many of a test's lines a recall finds by meaning depends on
timing (without the suite's check, 2 to 6 of its tests failed per run, and 41 when every line was embedded
before each recall); ``test_a_line_found_by_meaning_alone_is_held_to_p36_and_left_out`` waits for one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from httpremote_support import PARITY_TOKEN, ServerProcess, backing_provider, memvault_command, write_config

import memvault
from memvault.contract.models import Capability
from memvault_http_remote.client import HttpRemoteProvider
from memvault_http_remote.plugin import CAPABILITIES
from memvault_parity.concurrency import ConcurrencyTests
from memvault_parity.forget import ForgetTests, SubjectErasureTests
from memvault_parity.health import HealthTests
from memvault_parity.idempotency import IdempotencyTests
from memvault_parity.partitions import PartitionTests
from memvault_parity.recall import RecallTests
from memvault_parity.retain import CapTests, ModeTests
from memvault_parity.retain_many import RetainManyTests
from memvault_parity.retention import ExpiryTests
from memvault_parity.scan_together import JointScanTests
from memvault_parity.suite import ProviderSuite

#: The suite's groups whose tests recall from stores holding lines that share no term with the query: where an
#: expectation may rest on ranking by words. The others run against the session server only, to keep the added
#: time small: their recalls find one matching line or none, or (the scanner's 300 write-path cases, whose one
#: recall goes through the same ``find``) the embed-minilm env checks the service's scanner by meaning.
GROUPS = (
    PartitionTests,
    ModeTests,
    CapTests,
    RetainManyTests,
    RecallTests,
    ForgetTests,
    SubjectErasureTests,
    HealthTests,
    ConcurrencyTests,
    JointScanTests,
    ExpiryTests,
    IdempotencyTests,
)


@pytest.fixture(scope="module")
def served_by_meaning(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real `memvault serve` on 127.0.0.1, sqlite behind it, recalling by meaning with the default embedder."""
    pytest.importorskip("memvault_embed_minilm", reason="the default embedder is not installed (memvault-embed-minilm)")
    root = tmp_path_factory.mktemp("served-by-meaning")
    config = write_config(root, backing_provider(), embedder="minilm")
    # MEMVAULT_EMBEDDER=off (the parity envs set it) would override the config's embedder
    server = ServerProcess(memvault_command("--config", str(config), "serve"), root, drop_env=("MEMVAULT_EMBEDDER",))
    yield server
    server.stop()


@pytest.fixture
def client(served_by_meaning: ServerProcess) -> Iterator[memvault.Vault]:
    with memvault.open("http-remote", url=served_by_meaning.url, token=PARITY_TOKEN) as vault:
        yield vault


# First, while the service's embedding backlog is empty (the suite's tests below write hundreds of lines).
def test_a_line_found_by_meaning_alone_is_held_to_p36_and_left_out(client: memvault.Vault) -> None:
    """Once the service has embedded it, a line sharing no word with the query comes back by meaning
    (lexical 0, P39); the suite's ``find`` checks it against P36 and leaves it out."""
    ws = ProviderSuite.new_workspace()
    ProviderSuite.put(client, ws, "Owns a Subaru.\nEnjoys gardening on weekends.\n")
    request = memvault.RecallRequest(workspace_id=ws, agent_id="agent-1", query="which automobile")
    deadline = time.monotonic() + 60
    while not (hits := client.recall(request).hits) and time.monotonic() < deadline:
        time.sleep(0.1)  # the service embeds in the background (P37)
    assert hits, "the service found no line by meaning within 60 s"
    assert all(hit.lexical == 0.0 and hit.similarity is not None for hit in hits)
    assert ProviderSuite.find(client, ws, "which automobile") == []
    assert [(h.source, h.line) for h in ProviderSuite.find(client, ws, "subaru")] == [("AGENT.md", 1)]


def test_the_service_says_it_recalls_by_meaning(client: memvault.Vault) -> None:
    """The client names the service's embedder; the suite reads it from the provider."""
    provider: HttpRemoteProvider = client.provider  # type: ignore[assignment]
    answer = provider.recall_embedder()
    assert answer is not None
    name, model_id = answer
    assert name == "minilm"
    assert model_id
    assert ProviderSuite.recall_embedder(client) == f"minilm ({model_id})"
    assert client.embedder is None  # the client vault embeds nothing: the service does


class TestHttpRemoteParityByMeaning(*GROUPS):  # type: ignore[misc]
    """The groups above, through the service recalling by meaning."""

    provider = "http-remote"
    strict = True
    capabilities = CAPABILITIES | {Capability.DURABLE}  # as in test_parity.py: sqlite behind the service

    @pytest.fixture
    def settings(self, served_by_meaning: ServerProcess) -> dict[str, Any]:
        return {"url": served_by_meaning.url, "token": PARITY_TOKEN, "timeout": 10.0}
