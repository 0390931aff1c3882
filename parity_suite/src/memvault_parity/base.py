"""The suite's foundation: fixtures, capability gates, helpers and the override guard.

Every standard test class in this package derives from :class:`SuiteBase`; a
provider's test file subclasses :class:`memvault_parity.ProviderSuite`, which
mixes them all together.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest

import memvault
from memvault.contract.models import Capability

__all__ = [
    "LABEL_SHAPE",
    "SuiteBase",
    "requires",
    "requires_absent",
    "retain_request",
]

_F = TypeVar("_F", bound=Callable[..., Any])

#: The only shapes a document label may take (contract P4).
LABEL_SHAPE = re.compile(
    r"(?:AGENT|CREW|PERSONA|pins|lessons)\.md|daily/\d{4}-\d{2}-\d{2}\.md|peers/[A-Za-z0-9._:@-]{1,128}\.md"
)

_REQUIRES = "_memvault_parity_requires"
_REQUIRES_ABSENT = "_memvault_parity_requires_absent"


def requires(*capabilities: str) -> Callable[[_F], _F]:
    """Run the decorated test only for providers declaring every one of ``capabilities``."""
    unknown = set(capabilities) - Capability.ALL
    if unknown:
        raise ValueError(f"unknown capabilities {sorted(unknown)}; known: {sorted(Capability.ALL)}")

    def mark(func: _F) -> _F:
        setattr(func, _REQUIRES, frozenset(capabilities) | getattr(func, _REQUIRES, frozenset()))
        return func

    return mark


def requires_absent(capability: str) -> Callable[[_F], _F]:
    """Run the decorated test only for providers that do NOT declare ``capability``."""
    if capability not in Capability.ALL:
        raise ValueError(f"unknown capability {capability!r}; known: {sorted(Capability.ALL)}")

    def mark(func: _F) -> _F:
        setattr(func, _REQUIRES_ABSENT, capability)
        return func

    return mark


def _is_standard(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "memvault_parity"


def retain_request(
    ws: str,
    content: str,
    *,
    tier: str = "AGENT",
    mode: str = "append",
    agent: str = "agent-1",
    crew: str = "",
    key: str = "",
    subject: str = "",
) -> memvault.RetainRequest:
    """The retain request :meth:`SuiteBase.put` sends (``CREW`` documents belong to ``crew-1`` by default)."""
    if tier == "CREW" and not crew:
        crew = "crew-1"
    return memvault.RetainRequest(
        workspace_id=ws,
        agent_id=agent,
        crew_id=crew,
        tier=tier,
        key=key,
        content=content,
        mode=mode,
        data_subject_id=subject,
    )


class SuiteBase:
    """Fixtures and helpers shared by every standard test class.

    Subclasses set :attr:`provider` and, for a provider without ``scratch``
    settings or to point at a server, override the ``settings`` fixture.
    """

    #: The registered provider name (``memvault providers`` lists them).
    provider: ClassVar[str] = ""
    #: The optional capabilities to test; ``None``: what the provider registered.
    capabilities: ClassVar[frozenset[str] | None] = None
    #: The contract version to hold the provider to; ``None``: the one it registered with.
    contract_version: ClassVar[str | None] = None
    #: ``True``: a test newer than the provider's contract version fails like any other;
    #: ``False`` (default): it is reported as a new requirement not met yet (an xfail).
    strict: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not _is_standard(cls) and "test_no_overrides_DO_NOT_OVERRIDE" in vars(cls):
            raise TypeError(
                f"{cls.__qualname__} overrides test_no_overrides_DO_NOT_OVERRIDE: that guard is not optional"
            )

    # -- fixtures ------------------------------------------------------------

    @pytest.fixture
    def settings(self, tmp_path: Path) -> Iterator[Mapping[str, Any]]:
        """Settings for a fresh, EMPTY store (default: the provider's registered ``scratch``).

        After the test, the provider's ``scratch_cleanup`` (if it registered one) removes
        what the store left outside ``tmp_path``, so a run leaves nothing behind.
        """
        from memvault.registry import get_registry

        info = get_registry().get(self._provider_name())
        if info.scratch is None:
            pytest.fail(
                f"provider {info.name!r} registered no scratch settings: override the `settings` fixture "
                "in your test class to return settings for an empty store"
            )
        made = dict(info.scratch(tmp_path))
        yield made
        if info.scratch_cleanup is not None:
            info.scratch_cleanup(made)

    @pytest.fixture
    def provider_capabilities(self) -> frozenset[str]:
        """The capabilities under test: the class's override, else the registered ones."""
        if self.capabilities is not None:
            return frozenset(self.capabilities)
        from memvault.registry import get_registry

        return get_registry().get(self._provider_name()).capabilities

    @pytest.fixture(autouse=True)
    def _capability_gate(self, request: pytest.FixtureRequest, provider_capabilities: frozenset[str]) -> None:
        func = getattr(request, "function", None)
        needed: frozenset[str] = getattr(func, _REQUIRES, frozenset())
        missing = needed - provider_capabilities
        if missing:
            pytest.skip(f"provider does not declare capability {', '.join(sorted(missing))}")
        absent = getattr(func, _REQUIRES_ABSENT, None)
        if absent is not None and absent in provider_capabilities:
            pytest.skip(f"provider declares capability {absent}; this test is for providers without it")

    @pytest.fixture
    def open_vault(self, settings: Mapping[str, Any]) -> Iterator[Callable[[], memvault.Vault]]:
        """Open another vault on the same settings; every vault opened is closed after the test."""
        opened: list[memvault.Vault] = []

        def opener() -> memvault.Vault:
            vault = self.make_vault(settings)
            opened.append(vault)
            return vault

        yield opener
        for vault in reversed(opened):
            vault.close()

    @pytest.fixture
    def vault(self, open_vault: Callable[[], memvault.Vault]) -> memvault.Vault:
        """The vault under test, opened on ``settings`` and closed after the test."""
        return open_vault()

    @pytest.fixture
    def ws(self) -> str:
        """A workspace id no other test uses, so a shared store (a server) works too."""
        return self.new_workspace()

    def make_vault(self, settings: Mapping[str, Any]) -> memvault.Vault:
        """Open the provider on ``settings``. Override to wrap an unregistered provider instance.

        Without an embedder: recall by meaning is tested by :class:`memvault_parity.vectors.VectorTests`,
        with embedders it chooses, so every other test ranks by words alone, as the contract lines it checks say.
        A provider whose recall is ranked at its other end (a memory service with an embedder) may still fuse
        meaning in: :meth:`find` then holds the hits found by meaning alone to P36 and leaves them out.
        """
        return memvault.open(self._provider_name(), embedder="off", **settings)

    # -- helpers -------------------------------------------------------------

    def _provider_name(self) -> str:
        if not self.provider:
            pytest.fail(f"{type(self).__name__} must set the class attribute `provider` to a registered name")
        return self.provider

    @staticmethod
    def new_workspace() -> str:
        return f"parity-{uuid.uuid4().hex[:16]}"

    @staticmethod
    def put(vault: memvault.Vault, ws: str, content: str, **fields: str) -> memvault.RetainResult:
        """Retain ``content`` in workspace ``ws``; ``fields`` as :func:`retain_request` takes them."""
        return vault.retain(retain_request(ws, content, **fields))

    @staticmethod
    def recall_embedder(vault: memvault.Vault) -> str | None:
        """The embedder ``vault``'s recall ranks by meaning with, as ``"name (model id)"``; ``None``: by words
        alone (contract P36).

        The vault's own embedder (``vault.embedder``), else the one ranking the provider's recall at its other
        end: a provider whose recall runs elsewhere (a memory service's client, such as ``http-remote``) tells
        it with an optional method ``recall_embedder()`` returning ``(name, model_id)`` or ``None``. A provider
        without the method, or a service too old to say, ranks by words.
        """
        own = vault.embedder
        if own is not None:
            return f"{own.name} ({own.model_id})"
        return _upstream_embedder(vault)

    @staticmethod
    def find(
        vault: memvault.Vault,
        ws: str,
        query: str,
        *,
        agent: str = "agent-1",
        crew: str = "",
        tier: str = "",
        limit: int = 20,
        settled: bool = True,
    ) -> list[memvault.RecallSnippet]:
        """The hits of a recall in workspace ``ws``: all of them, when it ranks by words (as the suite's vaults do).

        When the provider's recall is ranked by meaning at its other end though the vault has no embedder (a
        memory service with one, :meth:`recall_embedder`), a line sharing no term with ``query`` may come back
        (P36 widens P17). Each such hit (``lexical == 0``, P39) must be what P36 allows: a similarity above
        ``memvault.search.SIMILARITY_FLOOR``, a score of at most 0.49, and, read back, a live line of a document
        the request may search (so no expired, erased, replaced or other partition's text); it is then left out,
        and the test's assertions hold for the hits that share a term, as they do by words. ``settled=False``:
        other threads change the store meanwhile, so those hits are checked without reading them back.
        """
        result = vault.recall(
            memvault.RecallRequest(
                workspace_id=ws, agent_id=agent, crew_id=crew, query=query, tier=tier or None, limit=limit
            )
        )
        assert isinstance(result.hits, list), "P18: hits is always a list"
        upstream = None if vault.embedder is not None else _upstream_embedder(vault)
        if upstream is None:
            return result.hits
        found_by_words = []
        for hit in result.hits:
            if hit.lexical != 0.0:  # None: not fused; above 0: it shares a term
                found_by_words.append(hit)
                continue
            _check_found_by_meaning(vault, hit, upstream, ws=ws, agent=agent, crew=crew, tier=tier, read_back=settled)
        return found_by_words

    @staticmethod
    def body(
        vault: memvault.Vault, ws: str, *, tier: str = "AGENT", agent: str = "agent-1", crew: str = "", key: str = ""
    ) -> str:
        if tier == "CREW" and not crew:
            crew = "crew-1"
        return vault.read(
            memvault.ReadRequest(workspace_id=ws, agent_id=agent, crew_id=crew, tier=tier, key=key)
        ).content

    @staticmethod
    def drop(
        vault: memvault.Vault,
        ws: str,
        *,
        label: str = "",
        subject: str = "",
        agent: str = "agent-1",
        crew: str = "",
    ) -> int:
        if label == "CREW.md" and not crew:
            crew = "crew-1"
        return vault.forget(
            memvault.ForgetRequest(workspace_id=ws, agent_id=agent, crew_id=crew, id=label, data_subject_id=subject)
        ).removed

    def child(
        self,
        settings: Mapping[str, Any],
        code: str,
        *args: str,
        timeout: float = 30.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``code`` in a fresh interpreter; it sees ``vault`` opened on the same settings and ``ARGS``."""
        return subprocess.run(
            [sys.executable, "-c", self.child_script(code), self._provider_name(), json.dumps(dict(settings)), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=child_env(),
        )

    @staticmethod
    def child_script(code: str) -> str:
        prelude = (
            "import json, sys\n"
            "import memvault\n"
            "NAME = sys.argv[1]\n"
            "SETTINGS = json.loads(sys.argv[2])\n"
            "ARGS = sys.argv[3:]\n"
            "vault = memvault.open(NAME, **SETTINGS)\n"
        )
        return prelude + code + "\nvault.close()\n"

    # -- the guard -----------------------------------------------------------

    def test_no_overrides_DO_NOT_OVERRIDE(self) -> None:
        """A standard test may be overridden only when marked ``xfail(reason=...)``.

        An override that quietly passes would hide a broken contract line, so
        this guard fails for every override that is not an explained xfail.
        """
        offenders = []
        for name in dir(type(self)):
            if not name.startswith("test_"):
                continue
            owner = next(c for c in type(self).__mro__ if name in vars(c))
            if _is_standard(owner):
                continue
            if not any(_is_standard(c) and name in vars(c) for c in type(self).__mro__):
                continue  # the provider's own extra test, not an override
            func = vars(owner)[name]
            marks = getattr(func, "pytestmark", [])
            if not any(m.name == "xfail" and str(m.kwargs.get("reason", "")).strip() for m in marks):
                where = inspect.getsourcefile(func) if inspect.isfunction(func) else owner.__module__
                offenders.append(f"{owner.__qualname__}.{name} ({where})")
        assert not offenders, (
            "standard parity tests may be overridden only with @pytest.mark.xfail(reason=...): " + ", ".join(offenders)
        )


def _upstream_embedder(vault: memvault.Vault) -> str | None:
    """The embedder the provider says ranks its recall at its other end (``recall_embedder()``), named."""
    ask = getattr(vault.provider, "recall_embedder", None)
    if not callable(ask):
        return None
    answer = ask()
    if answer is None:
        return None
    name, model_id = answer
    return f"{name} ({model_id})"


def _check_found_by_meaning(
    vault: memvault.Vault,
    hit: memvault.RecallSnippet,
    embedder: str,
    *,
    ws: str,
    agent: str,
    crew: str,
    tier: str,
    read_back: bool,
) -> None:
    """A hit sharing no term with the query, from a recall that ``embedder`` ranks, is one P36 allows."""
    from memvault.search import SIMILARITY_FLOOR

    where = f"{hit.source} line {hit.line}, found by meaning alone (the recall is ranked with {embedder})"
    similarity = -1.0 if hit.similarity is None else hit.similarity
    assert similarity > SIMILARITY_FLOOR, (
        f"P36/P39: {where}: its similarity {hit.similarity} is not above the floor {SIMILARITY_FLOOR}"
    )
    assert 0.0 < hit.score <= 0.49, f"P36: {where}: scores {hit.score}, not in (0, 0.49]"
    assert LABEL_SHAPE.fullmatch(hit.source), f"P4: {where}: not a document label"
    parsed_tier, key = memvault.parse_label(hit.source, "source")
    hit_tier = parsed_tier.value
    assert not tier or hit_tier == tier, f"P16/P38: {where}: outside the tier {tier} searched"
    assert crew if hit_tier == "CREW" else agent, f"P16/P38: {where}: a tier the request does not search"
    if not read_back:
        return
    body = SuiteBase.body(vault, ws, tier=hit_tier, agent=agent, crew=crew, key=key)
    lines = body.split("\n")
    text = lines[hit.line - 1] if 0 < hit.line <= len(lines) else None
    assert text is not None, f"P18/P38: {where}: the document the request searches has no such line: {body!r}"
    assert hit.snippet in text, (
        f"P36/P38: {where}: {hit.snippet!r} is not the text of that line of the document the request searches, "
        f"which reads {body!r}"
    )


def child_env() -> dict[str, str]:
    """The environment for subprocesses: this one, with the current sys.path importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env
