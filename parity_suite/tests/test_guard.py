"""The suite's own rules: overrides need an explained xfail, capabilities skip but never loosen."""

from __future__ import annotations

import pytest

from memvault_parity import ProviderSuite, requires, requires_absent

pytest_plugins = ["pytester"]

_HEAD = "import pytest\nfrom memvault_parity import ProviderSuite\n\n"


def _outcomes(pytester: pytest.Pytester, body: str, *args: str) -> dict[str, str]:
    pytester.makepyfile(test_provider=_HEAD + body)
    recorder = pytester.inline_run("-p", "no:cacheprovider", *args)
    result = {}
    for report in recorder.getreports("pytest_runtest_logreport"):
        name = report.nodeid.split("::", 1)[1]
        if report.when == "call" or not report.passed:
            outcome = "xfailed" if hasattr(report, "wasxfail") and report.skipped else report.outcome
            result.setdefault(name, outcome)
    return result


def test_override_without_xfail_fails_the_guard(pytester: pytest.Pytester) -> None:
    """A standard test replaced by one that passes is reported by test_no_overrides_DO_NOT_OVERRIDE."""
    body = (
        "class TestQuiet(ProviderSuite):\n"
        "    provider = 'memory'\n"
        "    def test_forget_twice_removes_zero(self):\n"
        "        pass\n"
    )
    outcomes = _outcomes(pytester, body, "-k", "DO_NOT_OVERRIDE")
    assert outcomes == {"TestQuiet::test_no_overrides_DO_NOT_OVERRIDE": "failed"}


def test_override_with_explained_xfail_satisfies_the_guard(pytester: pytest.Pytester) -> None:
    """An override marked xfail(reason=...) passes the guard and is reported as xfailed."""
    body = (
        "class TestHonest(ProviderSuite):\n"
        "    provider = 'memory'\n"
        "    @pytest.mark.xfail(reason='known bug #12: forget counts twice', strict=True)\n"
        "    def test_forget_twice_removes_zero(self):\n"
        "        raise AssertionError('still broken')\n"
    )
    outcomes = _outcomes(pytester, body, "-k", "DO_NOT_OVERRIDE or forget_twice")
    assert outcomes == {
        "TestHonest::test_no_overrides_DO_NOT_OVERRIDE": "passed",
        "TestHonest::test_forget_twice_removes_zero": "xfailed",
    }


def test_override_with_xfail_without_reason_fails_the_guard(pytester: pytest.Pytester) -> None:
    """xfail without a reason is not an explanation."""
    body = (
        "class TestVague(ProviderSuite):\n"
        "    provider = 'memory'\n"
        "    @pytest.mark.xfail\n"
        "    def test_forget_twice_removes_zero(self):\n"
        "        raise AssertionError\n"
    )
    outcomes = _outcomes(pytester, body, "-k", "DO_NOT_OVERRIDE")
    assert outcomes == {"TestVague::test_no_overrides_DO_NOT_OVERRIDE": "failed"}


def test_a_providers_own_extra_tests_are_not_overrides(pytester: pytest.Pytester) -> None:
    """New test names in a subclass are the provider's own tests, not overrides."""
    body = (
        "class TestExtra(ProviderSuite):\n"
        "    provider = 'memory'\n"
        "    def test_my_provider_specific_behaviour(self, vault):\n"
        "        assert vault.name == 'memory'\n"
    )
    outcomes = _outcomes(pytester, body, "-k", "DO_NOT_OVERRIDE or specific")
    assert set(outcomes.values()) == {"passed"}
    assert len(outcomes) == 2


def test_the_guard_itself_cannot_be_overridden() -> None:
    """Defining test_no_overrides_DO_NOT_OVERRIDE in a subclass is a TypeError at class creation."""
    with pytest.raises(TypeError, match="not optional"):

        class TestSneaky(ProviderSuite):
            provider = "memory"

            def test_no_overrides_DO_NOT_OVERRIDE(self) -> None:
                pass


def test_declaring_fewer_capabilities_runs_the_stricter_test(pytester: pytest.Pytester) -> None:
    """capabilities=frozenset() skips the cascade tests but runs the NotSupported test, which the
    memory provider (which does cascade) fails: a capability switches tests, it never loosens them."""
    body = "class TestFewer(ProviderSuite):\n    provider = 'memory'\n    capabilities = frozenset()\n"
    outcomes = _outcomes(pytester, body, "-k", "by_subject")
    assert outcomes.pop(
        "TestFewer::test_forget_by_subject_without_capability_is_not_supported_naming_the_provider"
    ) == ("failed")
    assert outcomes
    assert set(outcomes.values()) == {"skipped"}


def test_capabilities_default_to_the_registered_ones(pytester: pytest.Pytester) -> None:
    """Without an override the registry's capabilities apply: memory declares cascade_forget only."""
    body = "class TestDefault(ProviderSuite):\n    provider = 'memory'\n"
    outcomes = _outcomes(pytester, body, "-k", "by_subject or kill_9 or another_process")
    skipped = {name.split("::")[1] for name, outcome in outcomes.items() if outcome == "skipped"}
    assert "test_forget_by_subject_without_capability_is_not_supported_naming_the_provider" in skipped
    assert "test_acknowledged_writes_survive_kill_9" in skipped
    assert "test_write_in_another_process_is_visible_here" in skipped
    assert "test_forget_by_subject_removes_every_document_of_the_subject_and_counts" not in skipped


def test_unknown_provider_name_fails_with_the_installed_list(pytester: pytest.Pytester) -> None:
    """A misspelt provider name errors in setup, listing what is installed."""
    body = "class TestTypo(ProviderSuite):\n    provider = 'memroy'\n"
    pytester.makepyfile(test_provider=_HEAD + body)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-k", "forget_twice")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no provider named 'memroy'*did you mean 'memory'?*Installed providers:*memory*"])


def test_unknown_capability_names_are_rejected() -> None:
    """requires()/requires_absent() accept only the known capability names."""
    with pytest.raises(ValueError, match="unknown"):
        requires("durability")
    with pytest.raises(ValueError, match="unknown"):
        requires_absent("cascade")
