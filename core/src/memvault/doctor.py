"""Layer 6: ``memvault doctor``'s checks of an installation, each saying what to fix.

Each check gives a status (``ok``, ``warn`` or ``fail``), what it found, and
for anything not ok, how to fix it. The checks: the Python version; the
installed plugins and providers (load failures, name conflicts); each
provider's health on a scratch instance; the config file; the configured
provider's own read-only checks of its store (``checks=`` at registration: the
sqlite provider's give its file's schema version and integrity); the configured
provider opening and answering health; the free disk space where the store
lives.

May import: the facade and every layer below it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, Literal

from memvault.config import Config, find_config, load_config
from memvault.contract.errors import MemvaultError, UpstreamError, UpstreamTimeout
from memvault.contract.registration import DoctorCheck
from memvault.registry import _accepted_parameters as accepted_parameters
from memvault.registry import get_registry
from memvault.vault import open as open_vault

__all__ = ["Check", "missing_store", "run_checks"]

Status = Literal["ok", "warn", "fail"]
SUPPORTED: Final = ((3, 10), (3, 13))
#: Below this much free space the store's disk is a failure; below WARN_FREE, a warning.
FAIL_FREE: Final = 100 * 1024 * 1024
WARN_FREE: Final = 1024 * 1024 * 1024


#: One finding (the type providers' own checks return too).
Check = DoctorCheck


def _python() -> Check:
    version = sys.version_info[:2]
    shown = ".".join(map(str, sys.version_info[:3]))
    if version < SUPPORTED[0]:
        return Check(
            "python", "fail", f"Python {shown}", "memvault needs Python 3.10 or newer: create the venv with it"
        )
    if version > SUPPORTED[1]:
        return Check("python", "warn", f"Python {shown} (tested: 3.10-3.13)", "report problems with the version named")
    return Check("python", "ok", f"Python {shown} ({sys.executable})")


def _plugins() -> Iterator[Check]:

    registry = get_registry()
    names = registry.names()
    yield Check(
        "providers",
        "ok" if names else "fail",
        ", ".join(names) or "none installed",
        "" if names else "install a provider distribution, e.g. `pip install ./plugins/sqlite`",
    )
    for failure in registry.failures:
        yield Check(
            f"plugin {failure.name}",
            "fail",
            f"not loaded ({failure.distribution}): {failure.cause}",
            f"reinstall or upgrade {failure.distribution}, or skip it with MEMVAULT_DISABLE_PLUGINS={failure.name}",
        )
    for name, plugins in registry.conflicts.items():
        yield Check(
            f"provider {name}",
            "fail",
            f"registered by both {' and '.join(plugins)}",
            f"uninstall one, or disable one with MEMVAULT_DISABLE_PLUGINS={plugins[-1]}",
        )


def _scratch_health(name: str) -> Check:

    info = get_registry().get(name)
    label = f"provider {name}"
    version = f"{info.distribution} {info.version}"
    if info.scratch is None:
        return Check(label, "ok", f"{version}; needs settings, not probed")
    with tempfile.TemporaryDirectory(prefix="memvault-doctor-") as tmp:
        try:
            with open_vault(name, **dict(info.scratch(Path(tmp)))) as vault:
                status = vault.health()
        except (UpstreamError, UpstreamTimeout) as exc:
            # A provider in front of a server (PostgreSQL, a memory service) installs fine on a
            # machine without one: that is only a problem where it is the configured store,
            # which the store check below probes with the real settings.
            del exc  # its server is not there: that is the finding, not the error's wording
            return Check(label, "ok", f"{version}; not probed: no server answers at its default address")
        except MemvaultError as exc:
            return Check(
                label, "fail", f"{version}: a fresh instance does not open: {exc}", f"reinstall {info.distribution}"
            )
    if status.ok:
        return Check(label, "ok", f"{version}; healthy on a fresh instance")
    return Check(
        label, "fail", f"{version}: not healthy on a fresh instance: {status.message}", f"reinstall {info.distribution}"
    )


_LOCATION_KEYS: Final = ("path", "root", "directory", "dir")


def _store_location(settings: Mapping[str, Any]) -> Path | None:
    for key in _LOCATION_KEYS:
        value = settings.get(key)
        if isinstance(value, (str, os.PathLike)) and str(value) and str(value) != ":memory:":
            return Path(value)
    return None


def _store_settings(name: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    found = dict(settings)
    if name == "sqlite" and "path" not in found:
        found["path"] = "memvault.db"  # the sqlite provider's default
    return found


def missing_store(config: Config, provider: str | None, overrides: Mapping[str, Any]) -> str:
    """What to say when the store a command would open is a file or folder that does not exist
    yet (opening it would create it, and a command that only reads must not); ``""`` otherwise.
    """
    name = provider or config.provider
    try:
        params, any_key = accepted_parameters(get_registry().get(name).factory)
    except MemvaultError:
        return ""  # an unknown provider: opening it says so
    given = {**config.providers.get(name, {}), **overrides}
    # Only a setting the provider takes names its store (one it does not take is refused on opening).
    settings = _store_settings(name, {k: v for k, v in given.items() if any_key or k in params})
    location = _store_location(settings)
    if location is None or location.exists():
        return ""
    key = next(k for k in _LOCATION_KEYS if k in settings)
    return (
        f"no store at {location} yet ({name}): retain something first, or name an existing store "
        f"with -o {key}=PATH (or in memvault.toml, see --config)"
    )


def _provider_checks(name: str, settings: Mapping[str, Any]) -> Iterator[Check]:
    """The configured provider's own read-only checks of its store (``checks=`` at registration)."""
    try:
        info = get_registry().get(name)
    except MemvaultError:
        return  # an unknown provider: opening it below says so
    if info.checks is None:
        return
    try:
        found = list(info.checks(dict(settings)))
    except Exception as exc:  # noqa: BLE001 - a plugin's bug must not end the doctor's report
        yield Check(
            f"store ({name})",
            "fail",
            f"the provider's own checks failed: {type(exc).__name__}: {exc}",
            f"report it to the authors of {info.distribution}",
        )
        return
    for check in found:
        if isinstance(check, DoctorCheck):
            yield check
        else:
            yield Check(
                f"store ({name})",
                "fail",
                f"the provider's own checks returned {check!r}, not a DoctorCheck",
                f"report it to the authors of {info.distribution}",
            )


def _disk(where: Path) -> Check:
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    shown = f"{free / 1024**3:.1f} GiB free at {probe}"
    if free < FAIL_FREE:
        return Check("disk", "fail", shown, "free space on that filesystem or move the store")
    if free < WARN_FREE:
        return Check("disk", "warn", shown, "free space on that filesystem soon")
    return Check("disk", "ok", shown)


def _configured(config_path: str | None, options: Mapping[str, str], provider: str | None) -> Iterator[Check]:

    try:
        config = load_config(config_path)
    except MemvaultError as exc:
        yield Check("config", "fail", str(exc), "fix the file, or pass another with --config")
        return
    found = find_config(config_path)
    yield Check("config", "ok", f"{found}" if found else "no memvault.toml: the defaults (sqlite in ./memvault.db)")
    name = provider or config.provider
    settings = _store_settings(name, {**config.providers.get(name, {}), **options})
    location = _store_location(settings)
    yield from _provider_checks(name, settings)
    if location is not None and not location.exists():
        # Opening would create it: the doctor looks, it never writes.
        yield Check(f"store ({name})", "ok", f"nothing stored yet at {location} (created on the first write)")
    else:
        try:
            with open_vault(name, scanner="off", health_timeout=config.health_timeout, **settings) as vault:
                status = vault.health()
        except MemvaultError as exc:
            yield Check(f"store ({name})", "fail", f"cannot open: {exc}", "see the message above")
        else:
            if status.ok:
                yield Check(f"store ({name})", "ok", "opens and answers health")
            else:
                yield Check(f"store ({name})", "fail", f"not healthy: {status.message}", "see the provider's docs")
    if config.scanner not in (None, "off"):
        yield _scanner(config.scanner, config.scan)
    if location is None:
        yield _disk(Path.cwd())
    else:
        yield _disk(location if location.is_dir() else location.parent)


def _scanner(name: str, table: Mapping[str, Any]) -> Check:
    """The configured scanner builds from its ``[scan]`` table; a reviewer it has (``memvault.scanner.review``)
    that offers ``probe()`` is probed (memvault-scan-review asks about eight plain texts), so a model server
    that is down, or a model that judges plain texts wrong, shows here, not on the first suspicious write."""
    try:
        made = get_registry().scanner(name, table or None)
    except MemvaultError as exc:
        return Check(f"scanner ({name})", "fail", str(exc), "fix [scan] in memvault.toml, or install the scanner")
    for plugin in made:
        reviewer = getattr(plugin, "reviewer", None)
        probe = getattr(reviewer, "probe", None)
        if not callable(probe):
            continue
        try:
            answered = probe()
        except Exception as exc:  # noqa: BLE001 - a reviewer's failure is the finding
            return Check(
                f"scanner ({name})",
                "fail",
                f"its reviewer gave no answer: {exc}",
                "start the model server, or fix the reviewer's settings ([scan.review]); until it answers, the "
                'scanner\'s own verdicts stand (or writes it is asked about fail, with unanswered = "refuse")',
            )
        return Check(f"scanner ({name})", "ok", f"builds; its reviewer {answered}")
    return Check(f"scanner ({name})", "ok", "builds from [scan]")


def run_checks(
    config_path: str | None = None,
    options: Mapping[str, str] | None = None,
    provider: str | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> list[Check]:
    """Every check, in order; ``progress`` is told the name of each step as it starts."""

    say = progress or (lambda _: None)
    checks = [_python()]
    say("plugins")
    checks += list(_plugins())
    for name in get_registry().names():
        say(f"provider {name}")
        checks.append(_scratch_health(name))
    say("configuration and store")
    checks += list(_configured(config_path, dict(options or {}), provider))
    return checks
