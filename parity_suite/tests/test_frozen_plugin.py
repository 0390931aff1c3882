"""A third-party plugin frozen at memvault 0.1.0 keeps working (issue #34, contract D4).

``frozen_plugin/`` is a provider written from memvault 0.1.0's documentation, with that
release's import paths, never updated. CI installs it (tox env ``parity-memory``; in a dev
venv: ``uv pip install ./parity_suite/tests/frozen_plugin``) and these tests require that it
imports, warning once per old path, and passes ``memvault parity`` for the contract version
it targets (1.0: it declares none).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap

import pytest

from memvault.contract.versions import FIRST_CONTRACT_VERSION, contract_version_key
from memvault.registry import get_registry
from memvault_parity.base import child_env
from memvault_parity.runner import run_parity

NAME = "frozen-notebook"
#: The 0.1.0 paths the plugin imports.
OLD_PATHS = ("memvault.models", "memvault.plugins", "memvault.scan", "memvault.text")


@pytest.fixture(scope="module", autouse=True)
def installed() -> None:
    if NAME in get_registry().names():
        return
    message = (
        "the frozen plugin is not installed: `uv pip install ./parity_suite/tests/frozen_plugin` "
        "(tox env parity-memory installs it)"
    )
    if os.environ.get("CI"):
        pytest.fail(message)  # in CI it must run, never skip
    pytest.skip(message)


def test_it_is_registered_for_the_first_contract_version() -> None:
    info = get_registry().get(NAME)
    assert info.distribution == "memvault-frozen-notebook"
    assert info.contract_version == FIRST_CONTRACT_VERSION
    assert not [f for f in get_registry().failures if f.distribution == "memvault-frozen-notebook"]


def test_it_imports_and_works_warning_once_per_old_path() -> None:
    code = textwrap.dedent(
        """
        import json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import memvault, memvault_frozen_notebook as plugin
            vault = memvault.Vault(plugin.Notebook(), name="frozen-notebook")
            for n in range(3):
                vault.retain(memvault.RetainRequest(workspace_id="w", agent_id="a", tier="pins",
                                                    content=f"note {n} about tea\\n", mode="append"))
            hits = vault.recall(memvault.RecallRequest(workspace_id="w", agent_id="a", query="tea")).hits
            assert plugin.installed()
        print(json.dumps({"hits": len(hits), "warnings": [[w.category.__name__, str(w.message)] for w in caught]}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=child_env(), check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["hits"] == 3
    deprecations = [message for category, message in result["warnings"] if category == "MemvaultRemovedIn1Warning"]
    warned = sorted(message.split(" is deprecated", 1)[0] for message in deprecations)
    assert warned == sorted(OLD_PATHS), "one warning per old path, and only those"
    assert all("will be removed in memvault 1.0.0" in m for m in deprecations)
    assert [w for w in result["warnings"] if w[0] != "MemvaultRemovedIn1Warning"] == []


def test_it_passes_the_parity_suite_of_its_contract_version() -> None:
    out = io.StringIO()
    outcome = run_parity(NAME, out=out)
    report = out.getvalue()
    assert outcome.failed == [], report[-4000:]
    assert outcome.ok, report[-4000:]
    assert outcome.passed > 300, report[-4000:]
    # what it does not meet yet is newer than what it targets, and said so
    for _test, version, _numbers in outcome.not_met:
        assert contract_version_key(version) > contract_version_key(FIRST_CONTRACT_VERSION)
    if outcome.not_met:
        assert "this provider does not meet yet" in report
