"""Run the parity suite against an installed provider by name (``memvault parity NAME``)."""

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from attrs import field, frozen

from memvault_parity.versions import NEW_REQUIREMENT, line_version

__all__ = ["ParityOutcome", "Target", "current_target", "run_parity"]

_TARGET_MODULE = "memvault_parity._cli_target"
_CONTRACT = re.compile(r"\b[PLD]\d{1,2}\b")


@frozen(kw_only=True)
class Target:
    """The provider under test and how to build its settings."""

    name: str
    options: Mapping[str, str] | None = None
    strict: bool = False

    def settings_for(self, tmp_path: Path) -> Mapping[str, Any]:
        """The ``--option`` settings when given, else the provider's scratch settings in ``tmp_path``."""
        if self.options is not None:
            return dict(self.options)
        from memvault.registry import get_registry

        info = get_registry().get(self.name)
        if info.scratch is None:  # checked before the run; kept for direct use
            raise LookupError(f"provider {self.name!r} has no scratch settings: pass --option key=value")
        return dict(info.scratch(tmp_path))

    def clean_up(self, settings: Mapping[str, Any]) -> None:
        """Remove what scratch ``settings`` left outside their directory (``--option`` settings: nothing)."""
        if self.options is not None:
            return
        from memvault.registry import get_registry

        cleanup = get_registry().get(self.name).scratch_cleanup
        if cleanup is not None:
            cleanup(settings)


_target: Target | None = None


def current_target() -> Target:
    """The target :func:`run_parity` set (for the generated test module)."""
    if _target is None:
        raise RuntimeError("memvault_parity._cli_target is run by `memvault parity NAME`, not collected directly")
    return _target


@frozen(kw_only=True)
class ParityOutcome:
    """What one run of the suite gave."""

    passed: int = 0
    failed: list[tuple[str, str]] = field(factory=list)  # (test name, contract numbers)
    #: Tests newer than the provider's contract version that it does not pass yet:
    #: (test name, contract version, contract numbers). They do not fail the run.
    not_met: list[tuple[str, str, str]] = field(factory=list)
    skipped: int = 0
    xfailed: int = 0
    exit_code: int = 0

    @property
    def ok(self) -> bool:
        return not self.failed and self.exit_code in (0,)


class _Progress:
    """Says how far a long run is, with an estimate of what is left (on stderr, never on the summary)."""

    def __init__(self, name: str, stream: TextIO | None, every: float) -> None:
        self.name = name
        self.stream = stream
        self.every = every
        self.total = 0
        self.done = 0
        self.started = time.monotonic()
        self.said = self.started

    def finished_one(self) -> None:
        self.done += 1
        now = time.monotonic()
        if self.stream is None or not self.total or now - self.said < self.every or self.done >= self.total:
            return
        self.said = now
        elapsed = now - self.started
        left = elapsed / self.done * (self.total - self.done)
        print(
            f"memvault parity {self.name}: {self.done}/{self.total} tests in {elapsed:.0f} s, "
            f"about {_duration(left)} left",
            file=self.stream,
            flush=True,
        )


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


class _Collector:
    """A pytest plugin object: counts outcomes and remembers the contract numbers of each test."""

    def __init__(self, progress: _Progress | None = None) -> None:
        self.progress = progress
        self.numbers: dict[str, str] = {}
        self.passed = 0
        self.skipped = 0
        self.xfailed = 0
        self.failed: list[tuple[str, str]] = []
        self.not_met: list[tuple[str, str, str]] = []

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        from memvault_parity.versions import mark_new_requirements

        mark_new_requirements(items)  # also when pytest's plugin autoloading is off
        for item in items:
            doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
            numbers = sorted(set(_CONTRACT.findall(doc)), key=lambda n: (n[0], int(n[1:])))
            self.numbers[item.nodeid] = ", ".join(numbers)

    def pytest_collection_finish(self, session: Any) -> None:
        if self.progress is not None:
            self.progress.total = len(session.items)
            self.progress.started = self.progress.said = time.monotonic()

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "teardown" and self.progress is not None:
            self.progress.finished_one()
        name = report.nodeid.rsplit("::", 1)[-1]
        if report.when == "call" or (report.when == "setup" and not report.passed):
            if hasattr(report, "wasxfail"):
                if report.skipped and str(report.wasxfail).startswith(NEW_REQUIREMENT):
                    version = str(report.wasxfail)[len(NEW_REQUIREMENT) :].split()[0]
                    self.not_met.append((name, version, self.numbers.get(report.nodeid, "")))
                elif report.skipped:
                    self.xfailed += 1
                else:  # a non-strict xfail that passed: the override is stale, but nothing failed
                    self.passed += 1
            elif report.passed:
                self.passed += 1
            elif report.skipped:
                self.skipped += 1
            else:
                self.failed.append((name, self.numbers.get(report.nodeid, "")))
        elif report.when == "teardown" and report.failed:
            self.failed.append((name + " (teardown)", self.numbers.get(report.nodeid, "")))


def run_parity(
    name: str,
    options: Mapping[str, str] | None = None,
    *,
    keyword: str | None = None,
    exitfirst: bool = False,
    strict: bool = False,
    extra_args: Sequence[str] = (),
    out: TextIO | None = None,
    progress: TextIO | None = None,
    progress_every: float = 15.0,
) -> ParityOutcome:
    """Run :class:`~memvault_parity.ProviderSuite` against provider ``name`` in this process.

    :param name: an installed provider name.
    :param options: provider settings shared by every test (unique workspaces keep
        tests apart); ``None``: the provider's scratch settings, fresh per test.
    :param keyword: a pytest ``-k`` expression.
    :param exitfirst: stop at the first failure (``-x``).
    :param strict: hold the provider to every contract line, also those newer than
        the contract version it declares (default: those are listed, not failed).
    :return: counts, the failing tests with their contract numbers, and the new
        requirements the provider does not meet yet.
    :param progress: where to say, every ``progress_every`` seconds, how many tests
        ran and about how long the rest takes (default: standard error; the summary
        goes to ``out``).
    """
    import importlib.util

    import pytest

    global _target
    spec = importlib.util.find_spec(_TARGET_MODULE)
    if spec is None or spec.origin is None:  # pragma: no cover - the module ships with this package
        raise RuntimeError(f"{_TARGET_MODULE} is missing from this installation of memvault-parity")
    _target = Target(name=name, options=dict(options) if options is not None else None, strict=strict)
    sys.modules.pop(_TARGET_MODULE, None)
    collector = _Collector(_Progress(name, progress if progress is not None else sys.stderr, progress_every))
    stream = out if out is not None else sys.stdout
    _say_where(_target, stream)
    with tempfile.TemporaryDirectory(prefix="memvault-parity-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\nxfail_strict = true\n", encoding="utf-8")
        args = [
            spec.origin,
            "-c",
            str(ini),
            "--rootdir",
            tmp,
            "--confcutdir",
            str(Path(spec.origin).parent),
            "--basetemp",  # every test's scratch directory goes with the run's temporary one
            str(Path(tmp) / "basetemp"),
            "-p",
            "no:cacheprovider",
            "-q",
            "--tb=short",
            "-W",
            # the command imported the package before pytest could mark it; the test modules still are
            "ignore::pytest.PytestAssertRewriteWarning",
        ]
        if keyword:
            args += ["-k", keyword]
        if exitfirst:
            args.append("-x")
        args += list(extra_args)
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(Path(tmp) / ".hypothesis")  # leave nothing in the caller's directory
        try:
            code = int(pytest.main(args, plugins=[collector]))
        finally:
            set_hypothesis_home_dir(None)
            _target = None
            sys.modules.pop(_TARGET_MODULE, None)
    outcome = ParityOutcome(
        passed=collector.passed,
        failed=collector.failed,
        not_met=collector.not_met,
        skipped=collector.skipped,
        xfailed=collector.xfailed,
        exit_code=code,
    )
    _summarise(name, outcome, stream)
    return outcome


def _summarise(name: str, outcome: ParityOutcome, stream: TextIO) -> None:
    parts = [f"{outcome.passed} passed", f"{len(outcome.failed)} failed", f"{outcome.skipped} skipped"]
    if outcome.xfailed:
        parts.append(f"{outcome.xfailed} xfailed")
    verdict = "PASS" if outcome.ok else "FAIL"
    print("", file=stream)
    print(f"memvault parity {name}: {verdict}: {', '.join(parts)}", file=stream)
    for test, numbers in outcome.failed:
        print(f"  FAILED {test}" + (f"  [{numbers}]" if numbers else ""), file=stream)
    _summarise_not_met(name, outcome, stream)
    if outcome.exit_code == 5:
        print("  no test matched the selection (-k)", file=stream)
    elif outcome.exit_code not in (0, 1):
        print(f"  pytest stopped with exit code {outcome.exit_code} (usage error or interrupted)", file=stream)


def _summarise_not_met(name: str, outcome: ParityOutcome, stream: TextIO) -> None:
    """The new requirements the provider does not meet yet, by contract version."""
    if not outcome.not_met:
        return
    from memvault.contract.versions import contract_version_key
    from memvault.registry import get_registry

    try:
        declared = get_registry().get(name).contract_version
    except Exception:  # noqa: BLE001 - only for the wording
        declared = "?"
    by_version: dict[str, list[tuple[str, str]]] = {}
    for test, version, numbers in outcome.not_met:
        by_version.setdefault(version, []).append((test, numbers))
    print(
        f"  provider {name!r} declares contract {declared}; these newer requirements do not fail the run "
        "(--strict fails them):",
        file=stream,
    )
    for version in sorted(by_version, key=contract_version_key):
        tests = by_version[version]
        cited = {n.strip() for _, numbers in tests for n in numbers.split(",") if n.strip()}
        lines = sorted({n for n in cited if line_version(n) == version} or cited, key=lambda n: (n[0], int(n[1:])))
        print(
            f"  new requirements in {version} this provider does not meet yet: {', '.join(lines) or '-'}",
            file=stream,
        )
        for test, numbers in tests:
            print(f"    NOT MET {test}" + (f"  [{numbers}]" if numbers else ""), file=stream)


_SECRET = re.compile(r"(password|passwd|secret|token|key)", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def _shown(key: str, value: object) -> str:
    if _SECRET.search(key):
        return "***"
    text = _URL_PASSWORD.sub(r"\1***@", str(value))
    return repr(text) + (" (unset: the provider's defaults)" if text == "" else "")


def _say_where(target: Target, stream: TextIO) -> None:
    """Where the run works: the settings it passes, or a sample of the fresh ones each test gets."""
    if target.options is not None:
        shown = ", ".join(f"{k}={_shown(k, v)}" for k, v in sorted(target.options.items()))
        print(f"memvault parity {target.name}: every test works on {shown}, in workspaces of its own", file=stream)
        return
    with tempfile.TemporaryDirectory(prefix="memvault-parity-where-") as tmp:
        sample = target.settings_for(Path(tmp))
        shown = ", ".join(f"{k}={_shown(k, v)}" for k, v in sorted(sample.items()))
        target.clean_up(sample)
    such = f", such as {shown}" if shown else " (its scratch settings are empty: an in-process store)"
    print(
        f"memvault parity {target.name}: each test works in a fresh scratch store{such}; the run removes them",
        file=stream,
    )
