"""The reviewer's verdict is the scanner's: the same whichever provider stores the memory, and the same
through a `memvault serve` (its own process, its own reviewer) as in process."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import WEAK, Endpoint, attack_if, outcome, quiet_write_waits, start_writes

import memvault
from memvault import ContentRejected, ReadRequest, RetainRequest
from memvault.registry import get_registry

BENIGN_WEAK = "From now on you must water the ferns on Tuesdays."
PROVIDERS = [p for p in ("memory", "sqlite", "local-disk") if p in get_registry().names()]


def _review_table(endpoint: Endpoint) -> dict[str, Any]:
    return {"review": {"url": endpoint.url, "model": "stand-in", "timeout": 5}}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_provider_gets_the_reviewers_verdict(provider: str, endpoint: Endpoint, tmp_path: Path) -> None:
    endpoint.judge = attack_if("French")
    info = get_registry().get(provider)
    settings = dict(info.scratch(tmp_path)) if info.scratch is not None else {}
    with memvault.open(provider, scanner="reviewed", scan=_review_table(endpoint), embedder="off", **settings) as vault:
        assert outcome(vault, WEAK, "a1") == "review:instruction_override"
        assert outcome(vault, BENIGN_WEAK, "a2") == BENIGN_WEAK
        assert [r.pattern for r in vault.quarantine_list("ws-par")] == ["review:instruction_override"]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", ["replace", "append"])
def test_unanswered_refuse_writes_nothing_on_every_provider(
    provider: str, mode: str, endpoint: Endpoint, tmp_path: Path
) -> None:
    """Each provider writes the way it does (in its transaction, after reading back, ...): a refused write
    leaves nothing on any of them."""
    endpoint.close()  # down: no answer
    info = get_registry().get(provider)
    settings = dict(info.scratch(tmp_path)) if info.scratch is not None else {}
    scan = {"review": {**_review_table(endpoint)["review"], "unanswered": "refuse"}}
    with memvault.open(provider, scanner="reviewed", scan=scan, embedder="off", **settings) as vault:
        request = RetainRequest(workspace_id="ws-par", agent_id="a1", tier="AGENT", content="Note one.\n", mode=mode)
        vault.retain(request)
        with pytest.raises(memvault.UpstreamError, match="gave no answer on this write"):
            vault.retain(RetainRequest(workspace_id="ws-par", agent_id="a1", tier="AGENT", content=WEAK, mode=mode))
        read = vault.read(ReadRequest(workspace_id="ws-par", agent_id="a1", tier="AGENT"))
        assert read.content == "Note one.\n"
        assert vault.quarantine_list("ws-par") == []


@contextlib.contextmanager
def serving(endpoint: Endpoint, extra: str = "", tables: str = "") -> Iterator[str]:
    """`memvault serve` on the memory provider with the reviewed scanner, asking ``endpoint`` (``extra``: more
    lines of its ``[scan.review]``; ``tables``: more tables, such as ``[[server.tokens]]``)."""
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "memvault.toml"
        config.write_text(
            'provider = "memory"\nscanner = "reviewed"\n[embed]\nembedder = "off"\n[server]\nport = 0\n'
            f'[scan.review]\nurl = {json.dumps(endpoint.url)}\nmodel = "stand-in"\ntimeout = 5\n{extra}{tables}',
            encoding="utf-8",
        )
        env = {k: v for k, v in os.environ.items() if k not in ("MEMVAULT_CONFIG", "MEMVAULT_PROVIDER")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        proc = subprocess.Popen(
            [sys.executable, "-c", "from memvault.cli.main import main; main()", "serve"],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        lines: queue.Queue[str] = queue.Queue()

        def pump() -> None:
            for line in proc.stdout or ():
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + 60
        url = ""
        while not url and time.monotonic() < deadline and proc.poll() is None:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if "listening on " in line:
                url = line.split("listening on ", 1)[1].split()[0]
        try:
            if not url:
                proc.kill()
                _, stderr = proc.communicate(timeout=10)
                raise AssertionError(f"memvault serve did not start:\n{stderr}")
            yield url
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@pytest.fixture
def served(endpoint: Endpoint) -> Iterator[str]:
    with serving(endpoint) as url:
        yield url


def test_a_service_gets_the_same_verdict_as_a_vault_in_process(served: str, endpoint: Endpoint) -> None:
    endpoint.judge = attack_if("French")
    with memvault.open("http-remote", url=served) as client:
        assert outcome(client, WEAK, "a1") == "review:instruction_override"
        assert outcome(client, BENIGN_WEAK, "a2") == BENIGN_WEAK
    assert endpoint.texts == [WEAK, BENIGN_WEAK]  # the service asked; the client has no scanner of its own
    metrics = httpx.get(f"{served}/metrics", timeout=10).text
    assert 'memvault_scanner_reviews_total{outcome="asked"} 2.0' in metrics
    assert 'memvault_scanner_reviews_total{outcome="rejected"} 1.0' in metrics
    assert 'memvault_scanner_reviews_total{outcome="confirmed"} 1.0' in metrics
    assert 'memvault_scanner_reviews_total{outcome="unanswered"} 0.0' in metrics


def test_a_service_refusing_unjudged_writes_tells_its_client(endpoint: Endpoint) -> None:
    endpoint.mode = "status"  # the model server answers 500: no answer
    # The client retries a keyed write the service failed with 502 until retry_deadline: the reviewer may be
    # back by then. Here it stays down.
    with (
        serving(endpoint, 'unanswered = "refuse"\n') as url,
        memvault.open("http-remote", url=url, retry_deadline=1.0) as client,
    ):
        with pytest.raises(memvault.UpstreamError, match="gave no answer on this write") as caught:
            client.retain(
                RetainRequest(workspace_id="ws-par", agent_id="a1", tier="AGENT", content=WEAK, mode="replace")
            )
        assert not isinstance(caught.value, ContentRejected)
        assert client.read(ReadRequest(workspace_id="ws-par", agent_id="a1", tier="AGENT")).content == ""


FLOODER = "flooder-token-0123456789abcdef"
QUIET = "quiet-token-0123456789abcdef"


def _tokens() -> str:
    from memvault_http_remote.settings import hash_token

    return (
        f'[[server.tokens]]\nname = "flooder"\nsha256 = "{hash_token(FLOODER)}"\nworkspaces = ["flood-*", "shared"]\n'
        f'[[server.tokens]]\nname = "quiet"\nsha256 = "{hash_token(QUIET)}"\nworkspaces = ["quiet", "shared"]\n'
    )


@pytest.mark.parametrize(("per_caller", "fair"), [(None, True), (2, False)])
def test_one_tokens_flood_over_many_workspaces_leaves_slots_for_other_tokens(
    endpoint: Endpoint, per_caller: int | None, fair: bool
) -> None:
    """One token writes to two workspaces at once, each write holding the model 2.5 s: its workspaces' shares
    add up to every slot, but a token gets at most half of them (the default), so another token's write is
    judged at once; when one caller may take every slot, that write waits for one of the flood's to end."""
    endpoint.judge = attack_if("French")
    endpoint.slow_if = ("(flood", 2.5)
    extra = "max_concurrent = 2\n" + ("" if per_caller is None else f"max_per_caller = {per_caller}\n")
    # A client of its own for each of the flood's writes: one client would coalesce them into a batch, which
    # the service judges one item after the other.
    with serving(endpoint, extra, _tokens()) as url, contextlib.ExitStack() as clients:
        flooders = [
            clients.enter_context(memvault.open("http-remote", url=url, token=FLOODER, retry_deadline=0.5))
            for _ in range(2)
        ]
        quiet = clients.enter_context(memvault.open("http-remote", url=url, token=QUIET, retry_deadline=0.5))
        flood = start_writes(flooders, ["flood-0", "flood-1"], "flood")
        waited = quiet_write_waits(endpoint, quiet, flood, holding=1 if fair else 2)
    if fair:
        assert waited < 1.5, waited
    else:
        assert waited > 1.5, waited


def test_a_service_without_tokens_gives_its_clients_every_slot(endpoint: Endpoint) -> None:
    """Without tokens a server knows its callers only by address, which one proxy (or every agent on the same
    host) shares: no caller bound applies, so two writes to two workspaces are judged at once, not one after
    the other (half the model's slots for the whole service)."""
    endpoint.judge = attack_if("French")
    endpoint.slow_if = ("(write", 1.5)
    with serving(endpoint, "max_concurrent = 2\n") as url, contextlib.ExitStack() as clients:
        writers = [clients.enter_context(memvault.open("http-remote", url=url, retry_deadline=0.5)) for _ in range(2)]
        for thread in start_writes(writers, ["ws-0", "ws-1"], "write"):
            thread.join(30)
    assert len(endpoint.texts) == 2
    assert endpoint.most_in_flight == 2


def test_the_console_shows_how_the_reviewer_answered(endpoint: Endpoint) -> None:
    """An operator without Prometheus sees on the console's health page what /metrics counts: the texts
    asked about, and how many got no answer (the model down or busy) apart from the verdicts."""
    from memvault_http_remote.settings import hash_token

    admin = "admin-token-0123456789abcdef"
    tables = f'[[server.tokens]]\nname = "admin"\nsha256 = "{hash_token(admin)}"\nworkspaces = ["*"]\n'
    endpoint.judge = attack_if("French")
    with serving(endpoint, "", tables) as url:
        with memvault.open("http-remote", url=url, token=admin) as client:
            assert outcome(client, WEAK, "a1") == "review:instruction_override"
            assert outcome(client, BENIGN_WEAK, "a2") == BENIGN_WEAK
        endpoint.mode = "status"  # the model server fails from now on
        with memvault.open("http-remote", url=url, token=admin) as client:
            # No answer: the builtin's verdict stores it, uncached, so reading it back asks again.
            assert outcome(client, WEAK + " Again.", "a3") == WEAK + " Again."
        with httpx.Client(base_url=url, headers={"Origin": url}, timeout=30) as console:
            assert console.post("/console/login", data={"token": admin}).status_code == 303
            page = console.get("/console/health").text
    found = re.search(r'<dd id="scanner-reviews">(.*?)</dd>', page, re.S)
    assert found is not None, page
    shown = re.sub(r"<[^>]+>", "", found.group(1))
    assert shown == "asked about 4 texts: 2 unanswered, 1 rejected, 0 cleared, 1 confirmed (since the service started)"
    assert '<span class="bad">2 unanswered</span>' in found.group(1)


def test_one_tokens_flood_of_a_shared_workspace_leaves_that_workspace_to_the_other_tokens(endpoint: Endpoint) -> None:
    """Two tokens write to one workspace. One floods it: it holds the model as long as its share lets it, but
    the workspace's turns are counted per token, so the other token's write there is judged at once instead
    of waiting for the flood's to end (and, with unanswered = "refuse", failing)."""
    endpoint.judge = attack_if("French")
    endpoint.slow_if = ("(flood", 2.5)
    with serving(endpoint, "max_concurrent = 2\n", _tokens()) as url, contextlib.ExitStack() as clients:
        flooder = clients.enter_context(memvault.open("http-remote", url=url, token=FLOODER, retry_deadline=0.5))
        quiet = clients.enter_context(memvault.open("http-remote", url=url, token=QUIET, retry_deadline=0.5))
        flood = start_writes([flooder], ["shared"], "flood")
        waited = quiet_write_waits(endpoint, quiet, flood, workspace="shared")
    assert waited < 1.5, waited
