"""Layer 3, the registry: plugin discovery, registration, and the plugin managers.

Plugins are distributions that declare an entry point in group ``memvault``
pointing at a module (or object) with ``@memvault.hookimpl`` functions. The
core's own plugins (:data:`BUILTIN_PLUGINS`) are loaded the same way, by
dotted name, before any entry point, so allow and deny lists never hide them.

* ``MEMVAULT_LOAD_PLUGINS``: comma-separated entry-point names; when set, only
  these are loaded (an empty value loads none).
* ``MEMVAULT_DISABLE_PLUGINS``: comma-separated entry-point names never loaded.

A plugin that fails to import, whose hooks do not match a spec, or whose
registration raises is recorded in :attr:`Registry.failures` with its name and
cause (and logged); the other plugins still load (contract D2). Registration is
all or nothing per plugin: a failure withdraws every provider, scanner and hook
of that plugin, and it is listed in ``failures`` only, never in ``loaded``.

* ``MEMVAULT_TRACE_HOOKS``: when set (to anything but ``0`` or empty), every
  plugin manager memvault builds (the registry's and each vault's) logs each
  hook call, its arguments and its outcome to the ``memvault.hooks`` logger at
  DEBUG level.

May import: :mod:`memvault.contract` and :mod:`memvault.hooks`.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import math
import os
import re
import threading
import traceback
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import importlib_metadata
import pluggy
from attrs import field, frozen

from memvault.contract.embedding import MODEL_ID_MAX, Embedder
from memvault.contract.errors import InvalidRequest, MemvaultError, PluginError, ProviderNotFound
from memvault.contract.models import Capability
from memvault.contract.registration import ScratchCleanup, ScratchSettings, StoreChecks
from memvault.contract.versions import FIRST_CONTRACT_VERSION, parse_contract_version
from memvault.hooks import lifecycle as lifecycle_specs
from memvault.hooks import provider as provider_specs
from memvault.hooks import registration as registration_specs
from memvault.hooks.markers import PROJECT

__all__ = [
    "BUILTIN_PLUGINS",
    "RESERVED_SETTINGS",
    "PluginFailure",
    "ProviderInfo",
    "Registry",
    "coerce_settings",
    "get_registry",
    "make_manager",
    "missing_settings",
    "reset_registry",
    "setting_help",
]

log = logging.getLogger("memvault.registry")
#: The attribute set on the log record of a plugin that failed to load.
PLUGIN_FAILURE: Final = "memvault_plugin_failure"
_trace_log = logging.getLogger("memvault.hooks")

#: The core's own plugins, loaded by dotted name exactly like third-party entry points.
BUILTIN_PLUGINS: Final = (
    "memvault.providers.memory",
    "memvault.scanner.plugin",
    "memvault.default_lifecycle.plugin",
)

_PROVIDER_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")
#: Keyword arguments that :func:`memvault.open` and :func:`memvault.open_from_config`
#: take for themselves: a provider setting with one of these names could never be
#: passed, so registering a factory that takes one is an error.
RESERVED_SETTINGS: frozenset[str] = frozenset(
    {
        "background_embedding",
        "background_sweep",
        "config",
        "embed",
        "embedder",
        "health_timeout",
        "idempotency",
        "plugins",
        "retention",
        "scan",
        "scanner",
    }
)


@frozen(kw_only=True)
class ProviderInfo:
    """One registered provider and where it came from."""

    name: str
    factory: Callable[..., object]
    plugin: str
    distribution: str
    version: str
    capabilities: frozenset[str] = frozenset()
    scratch: ScratchSettings | None = None
    description: str = ""
    checks: StoreChecks | None = None
    #: The contract version the provider was written for (``register(..., contract_version=...)``).
    contract_version: str = FIRST_CONTRACT_VERSION
    #: Removes what a scratch store left outside its temporary directory (``scratch_cleanup``).
    scratch_cleanup: ScratchCleanup | None = None


@frozen(kw_only=True)
class PluginFailure:
    """A plugin that could not be loaded or registered, and why."""

    name: str
    distribution: str
    cause: str
    exception: BaseException = field(eq=False, repr=False)

    @property
    def error(self) -> str:
        """The last line of the failure's traceback, and where it was raised (``file:line``)."""
        last = traceback.format_exception_only(type(self.exception), self.exception)[-1].strip()
        frames = traceback.extract_tb(self.exception.__traceback__)
        return f"{last} (at {frames[-1].filename}:{frames[-1].lineno})" if frames else last


def make_manager(*specs: types.ModuleType) -> pluggy.PluginManager:
    """A plugin manager for memvault's hooks carrying ``specs`` (modules of :mod:`memvault.hooks`).

    Traces every hook call to the ``memvault.hooks`` logger when ``MEMVAULT_TRACE_HOOKS`` is set.
    """
    manager = pluggy.PluginManager(PROJECT)
    for spec in specs:
        manager.add_hookspecs(spec)
    if os.environ.get("MEMVAULT_TRACE_HOOKS", "") not in ("", "0"):
        manager.add_hookcall_monitoring(_trace_before, _trace_after)
    return manager


def _trace_before(hook_name: str, hook_impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, Any]) -> None:
    names = ", ".join(impl.plugin_name for impl in hook_impls)
    _trace_log.debug("call %s(%s) -> [%s]", hook_name, ", ".join(f"{k}={v!r}" for k, v in kwargs.items()), names)


def _trace_after(
    outcome: pluggy.Result[Any], hook_name: str, hook_impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, Any]
) -> None:
    exc = outcome.exception
    if exc is not None:
        _trace_log.debug("fail %s: %s: %s", hook_name, type(exc).__name__, exc)
    else:
        _trace_log.debug("done %s -> %r", hook_name, outcome.get_result())


def _env_list(name: str) -> list[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return [item.strip() for item in raw.split(",") if item.strip()]


def _core_version() -> str:
    try:
        return importlib_metadata.version("memvault")
    except importlib_metadata.PackageNotFoundError:  # running from a source tree
        return "0+unknown"


class Registry:
    """Loads plugins and holds the providers they register.

    :param load: entry-point names to load (default: ``MEMVAULT_LOAD_PLUGINS``, or all).
    :param disable: entry-point names to skip (default: ``MEMVAULT_DISABLE_PLUGINS``).
    :param entry_points: the entry points to consider (default: group ``memvault``
        of every installed distribution); tests pass their own.
    """

    def __init__(
        self,
        *,
        load: Iterable[str] | None = None,
        disable: Iterable[str] | None = None,
        entry_points: Iterable[importlib_metadata.EntryPoint] | None = None,
    ) -> None:
        self.plugin_manager = make_manager(registration_specs)
        self.providers: dict[str, ProviderInfo] = {}
        self.conflicts: dict[str, list[str]] = {}
        self.scanners: dict[str, tuple[str, Callable[..., object]]] = {}
        #: Embedders by name: (plugin, factory, description) (contract P36).
        self.embedders: dict[str, tuple[str, Callable[..., Embedder], str]] = {}
        self._embedder_instances: dict[tuple[str, str], Embedder] = {}
        self._embedder_lock = threading.Lock()
        self.failures: list[PluginFailure] = []
        self.loaded: list[tuple[str, str, str]] = []  # (entry point, distribution, version)
        allow = list(load) if load is not None else _env_list("MEMVAULT_LOAD_PLUGINS")
        deny = set(disable if disable is not None else (_env_list("MEMVAULT_DISABLE_PLUGINS") or []))
        for dotted in BUILTIN_PLUGINS:
            try:
                module = importlib.import_module(dotted)
            except Exception as exc:  # noqa: BLE001 - reported like any plugin's import failure
                self._fail(dotted, "memvault", f"import of {dotted!r} failed: {type(exc).__name__}: {exc}", exc)
                continue
            self._add_plugin(dotted, module, "memvault", _core_version())
        if entry_points is None:
            entry_points = importlib_metadata.entry_points(group=PROJECT)
        for ep in sorted(entry_points, key=lambda e: e.name):
            if ep.name in deny or (allow is not None and ep.name not in allow):
                log.debug("plugin %s not loaded (allow/deny list)", ep.name)
                continue
            dist = ep.dist.name if ep.dist is not None else "?"
            version = ep.dist.version if ep.dist is not None else "?"
            try:
                plugin = ep.load()
            except Exception as exc:  # noqa: BLE001 - any import failure is reported, not fatal
                self._fail(ep.name, dist, f"import of {ep.value!r} failed: {type(exc).__name__}: {exc}", exc)
                continue
            self._add_plugin(ep.name, plugin, dist, version)

    def _fail(self, name: str, dist: str, cause: str, exc: BaseException) -> None:
        # The command line shows failures itself (memvault providers, a provider not found):
        # it filters records marked so, which keeps them once on its output.
        log.warning("memvault plugin %s (%s) skipped: %s", name, dist, cause, extra={PLUGIN_FAILURE: True})
        self.failures.append(PluginFailure(name=name, distribution=dist, cause=cause, exception=exc))

    def _add_plugin(self, name: str, plugin: object, dist: str, version: str) -> None:
        try:
            self.plugin_manager.register(plugin, name=name)
        except (pluggy.PluginValidationError, ValueError) as exc:
            self._fail(name, dist, f"its hooks do not match memvault's specs: {exc}", exc)
            return
        try:
            self.plugin_manager.check_pending()
        except pluggy.PluginValidationError as exc:
            self.plugin_manager.unregister(plugin)
            self._fail(name, dist, f"it implements an unknown hook (misspelt?): {exc}", exc)
            return
        # All or nothing (D2): providers and scanners are staged, and only a plugin
        # whose every registration succeeded is added; a failure withdraws it whole.
        staged: dict[str, ProviderInfo] = {}
        staged_scanners: dict[str, tuple[str, Callable[..., object]]] = {}
        staged_embedders: dict[str, tuple[str, Callable[..., Embedder], str]] = {}

        def register(
            pname: str,
            factory: Callable[..., object],
            *,
            capabilities: Iterable[str] = (),
            scratch: ScratchSettings | None = None,
            description: str = "",
            checks: StoreChecks | None = None,
            contract_version: str | None = None,
            scratch_cleanup: ScratchCleanup | None = None,
        ) -> None:
            if not isinstance(pname, str) or not _PROVIDER_NAME.fullmatch(pname):
                raise PluginError(
                    f"plugin {name!r} registered provider name {pname!r}: names are "
                    "lowercase letters, digits, '-' and '_', starting with a letter"
                )
            if not callable(factory):
                raise PluginError(f"plugin {name!r} registered a provider {pname!r} whose factory is not callable")
            if scratch_cleanup is not None and not callable(scratch_cleanup):
                raise PluginError(
                    f"plugin {name!r} registered provider {pname!r} with scratch_cleanup={scratch_cleanup!r}: "
                    "give a function of the scratch settings that removes what they left, or leave it out"
                )
            if checks is not None and not callable(checks):
                raise PluginError(
                    f"plugin {name!r} registered provider {pname!r} with checks={checks!r}: give a function "
                    "of the provider's settings that returns DoctorCheck findings, or leave it out"
                )
            taken = sorted(RESERVED_SETTINGS & set(_accepted_parameters(factory)[0]))
            if taken:
                raise PluginError(
                    f"plugin {name!r} registered provider {pname!r} whose factory takes setting {taken[0]!r}, "
                    f"a name memvault.open keeps for itself ({', '.join(sorted(RESERVED_SETTINGS))}): "
                    "rename that setting"
                )
            caps = frozenset(capabilities)
            unknown = caps - Capability.ALL
            if unknown:
                raise PluginError(
                    f"plugin {name!r} declared unknown capabilities {sorted(unknown)} for provider "
                    f"{pname!r}; known: {sorted(Capability.ALL)}"
                )
            if pname in staged:
                raise PluginError(f"plugin {name!r} registered provider {pname!r} twice")
            try:
                targets = parse_contract_version(contract_version, who=f"plugin {name!r}, provider {pname!r},")
            except InvalidRequest as exc:
                raise PluginError(str(exc)) from None
            staged[pname] = ProviderInfo(
                name=pname,
                factory=factory,
                plugin=name,
                distribution=dist,
                version=version,
                capabilities=caps,
                scratch=scratch,
                description=description,
                checks=checks,
                contract_version=targets,
                scratch_cleanup=scratch_cleanup,
            )

        def register_scanner(sname: str, factory: Callable[..., object]) -> None:
            if not isinstance(sname, str) or sname in ("off",) or not _PROVIDER_NAME.fullmatch(sname):
                raise PluginError(f"plugin {name!r} registered an invalid scanner name {sname!r}")
            if sname in self.scanners or sname in staged_scanners:
                owner = self.scanners[sname][0] if sname in self.scanners else name
                raise PluginError(f"scanner {sname!r} is registered by both plugins {owner!r} and {name!r}")
            if not callable(factory):
                raise PluginError(f"plugin {name!r} registered a scanner {sname!r} whose factory is not callable")
            staged_scanners[sname] = (name, factory)

        def register_embedder(ename: str, factory: Callable[..., Embedder], *, description: str = "") -> None:
            if not isinstance(ename, str) or ename in ("off", "auto") or not _PROVIDER_NAME.fullmatch(ename):
                raise PluginError(
                    f"plugin {name!r} registered an invalid embedder name {ename!r}: names are lowercase "
                    "letters, digits, '-' and '_', starting with a letter, and not 'off' or 'auto'"
                )
            if ename in self.embedders or ename in staged_embedders:
                owner = self.embedders[ename][0] if ename in self.embedders else name
                raise PluginError(f"embedder {ename!r} is registered by both plugins {owner!r} and {name!r}")
            if not callable(factory):
                raise PluginError(f"plugin {name!r} registered an embedder {ename!r} whose factory is not callable")
            staged_embedders[ename] = (name, factory, str(description))

        for hook, callback in (
            (self.plugin_manager.hook.memvault_register_providers, register),
            (self.plugin_manager.hook.memvault_register_scanners, register_scanner),
            (self.plugin_manager.hook.memvault_register_embedders, register_embedder),
        ):
            impl = next((i for i in hook.get_hookimpls() if i.plugin is plugin), None)
            if impl is None:
                continue
            try:
                impl.function(register=callback)
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the others
                self.plugin_manager.unregister(plugin)
                self._fail(name, dist, f"{hook.name} raised {type(exc).__name__}: {exc}", exc)
                return
        problem = self._check_vault_plugins(plugin)
        if problem is not None:
            self.plugin_manager.unregister(plugin)
            self._fail(name, dist, problem[0], problem[1])
            return
        for pname, info in staged.items():
            if pname in self.conflicts:
                self.conflicts[pname].append(name)
            elif pname in self.providers:
                first = self.providers.pop(pname)
                self.conflicts[pname] = [first.plugin, name]
                log.error("provider %r is registered by both %r and %r", pname, first.plugin, name)
            else:
                self.providers[pname] = info
        self.scanners.update(staged_scanners)
        self.embedders.update(staged_embedders)
        self.loaded.append((name, dist, version))

    def names(self) -> list[str]:
        """Installed provider names, sorted (conflicting names excluded)."""
        return sorted(self.providers)

    def get(self, name: str) -> ProviderInfo:
        """The provider registered under ``name``.

        :raises ProviderNotFound: listing the installed providers.
        :raises PluginError: when two plugins registered the name.
        """
        if name in self.conflicts:
            plugins = " and ".join(repr(p) for p in self.conflicts[name])
            raise PluginError(
                f"provider {name!r} is registered by both plugins {plugins}; uninstall one, or "
                "disable one with MEMVAULT_DISABLE_PLUGINS"
            )
        try:
            return self.providers[name]
        except KeyError:
            broken = [(f.name, f.distribution, f.error) for f in self.failures]
            raise ProviderNotFound(name, self.names(), broken) from None

    def embedder(self, name: str = "auto", settings: Mapping[str, Any] | None = None) -> Embedder | None:
        """The embedder ``name`` with ``settings`` (the ``[embed]`` table's other keys), shared per process.

        ``"auto"`` is the only installed embedder, or none when none is installed; ``"off"``
        is none (contract P36).

        :raises PluginError: for a name no plugin registered (listing the known ones), for
            ``"auto"`` with several installed (naming them), or when the factory fails.
        :raises InvalidRequest: for settings the factory does not take.
        """
        if name == "off":
            return None
        if name == "auto":
            if not self.embedders:
                return None
            if len(self.embedders) > 1:
                raise PluginError(
                    f"several embedders are installed ({', '.join(sorted(self.embedders))}): choose one with "
                    '[embed] embedder = "NAME" in memvault.toml (or embedder=... in memvault.open), or "off"'
                )
            name = next(iter(self.embedders))
        if name not in self.embedders:
            known = ", ".join(sorted(self.embedders)) or "none"
            raise PluginError(
                f"no embedder named {name!r} is installed; known embedders: {known}, or 'off' "
                "(the default one is memvault-embed-minilm: pip install memvault-embed-minilm)"
            )
        plugin, factory, _ = self.embedders[name]
        options = dict(settings or {})
        key = (name, repr(sorted(options.items())))
        with self._embedder_lock:
            found = self._embedder_instances.get(key)
            if found is not None:
                return found
            accepted, takes_any = _accepted_parameters(factory)
            unknown = sorted(set(options) - set(accepted)) if not takes_any else []
            if unknown:
                raise InvalidRequest(
                    f"embedder {name!r} takes no setting {unknown[0]!r} (in [embed]); it takes: "
                    f"{', '.join(sorted(accepted)) or 'none'}",
                    field=f"embed.{unknown[0]}",
                )
            try:
                embedder = factory(**options)
            except MemvaultError:
                raise
            except Exception as exc:
                raise PluginError(
                    f"embedder {name!r} of plugin {plugin!r} failed to start: {type(exc).__name__}: {exc}"
                ) from exc
            problems = _embedder_problems(embedder)
            if problems:
                raise PluginError(f"embedder {name!r} of plugin {plugin!r} is not a memvault.Embedder: {problems}")
            self._embedder_instances[key] = embedder
            return embedder

    def scanner(self, name: str, policy: Mapping[str, Any] | None = None) -> list[object]:
        """Fresh plugin objects for the scanner ``name`` (``"off"``: none).

        :param policy: the ``[scan]`` table, passed to a factory that takes a
            ``policy`` keyword (the builtin scanner's); another scanner configures itself.
        :raises PluginError: for a name no plugin registered, listing the known ones.
        :raises InvalidRequest: from the factory, for a policy it rejects.
        """
        if name != "off" and name not in self.scanners:
            known = ", ".join(sorted(self.scanners)) or "none"
            raise PluginError(f"no scanner named {name!r} is installed; known scanners: {known}, or 'off'")
        factory = self.scanners[name][1] if name != "off" else None
        if policy and (factory is None or not _takes_policy(factory)) and "builtin" in self.scanners:
            # The [scan] table configures the builtin scanner: it is checked whichever scanner runs,
            # so a mistake in memvault.toml shows before the day the builtin scanner is turned on.
            self.scanners["builtin"][1](policy=policy)
        if factory is None:
            return []
        return [factory(policy=policy)] if policy and _takes_policy(factory) else [factory()]

    def vault_plugins(self) -> list[tuple[str, object]]:
        """Fresh plugin objects every vault registers around its provider (the default lifecycle),
        each with the name of the plugin that made it, in load order.

        :raises PluginError: naming the plugin whose ``memvault_vault_plugins`` failed (it
            answered when it was loaded, so this is a plugin whose behaviour changed).
        """
        out: list[tuple[str, object]] = []
        for impl in reversed(self.plugin_manager.hook.memvault_vault_plugins.get_hookimpls()):
            made = _made_vault_plugins(impl.plugin_name, impl.function)
            if isinstance(made, str):
                raise PluginError(made)
            out.extend((impl.plugin_name, obj) for obj in made)
        return out

    def _check_vault_plugins(self, plugin: object) -> tuple[str, BaseException] | None:
        """Why ``plugin``'s ``memvault_vault_plugins`` cannot serve a vault (or ``None``): it must
        return a list whose objects fit the provider-verb and lifecycle specs (D2: checked at load)."""
        hook = self.plugin_manager.hook.memvault_vault_plugins
        impl = next((i for i in hook.get_hookimpls() if i.plugin is plugin), None)
        if impl is None:
            return None
        made = _made_vault_plugins(impl.plugin_name, impl.function)
        if isinstance(made, str):
            return made, PluginError(made)
        scratch = make_manager(provider_specs, lifecycle_specs)
        for obj in made:
            try:
                scratch.register(obj)
                scratch.check_pending()
            except (pluggy.PluginValidationError, ValueError) as exc:
                return f"memvault_vault_plugins returned a {type(obj).__name__} that does not fit the hooks: {exc}", exc
        return None


_lock = threading.Lock()
_registry: Registry | None = None


def _new_lock() -> None:
    global _lock
    _lock = threading.Lock()  # in a forked child: another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock)


def get_registry() -> Registry:
    """The process-wide registry, loaded on first use."""
    global _registry
    with _lock:
        if _registry is None:
            _registry = Registry()
        return _registry


def reset_registry() -> None:
    """Forget the loaded registry so the next :func:`get_registry` loads again (for tests)."""
    global _registry
    with _lock:
        _registry = None


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _embedder_problems(embedder: object) -> str:
    """What keeps ``embedder`` from being a :class:`memvault.Embedder` ("" when nothing)."""
    name = getattr(embedder, "name", None)
    model_id = getattr(embedder, "model_id", None)
    dimensions = getattr(embedder, "dimensions", None)
    if not isinstance(name, str) or not name:
        return "its 'name' must be a non-empty string"
    if not isinstance(model_id, str) or not 1 <= len(model_id) <= MODEL_ID_MAX or not model_id.isascii():
        return f"its 'model_id' must be 1-{MODEL_ID_MAX} ASCII characters, got {model_id!r}"
    if not isinstance(dimensions, int) or isinstance(dimensions, bool) or not 1 <= dimensions <= 8192:
        return f"its 'dimensions' must be an integer from 1 to 8192, got {dimensions!r}"
    if not callable(getattr(embedder, "embed", None)):
        return "it has no embed(texts) method"
    return ""


def _accepted_parameters(factory: Callable[..., object]) -> tuple[dict[str, inspect.Parameter], bool]:
    target = factory.__init__ if isinstance(factory, type) else factory  # type: ignore[misc]
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin without a signature: take anything
        return {}, True
    params = {
        n: p for n, p in sig.parameters.items() if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    var_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    return params, var_kw


def _made_vault_plugins(plugin: str, function: Callable[..., object]) -> list[object] | str:
    """What a ``memvault_vault_plugins`` implementation returns, or why it is unusable."""
    try:
        made = function()
    except Exception as exc:  # noqa: BLE001 - reported with the plugin's name
        return f"plugin {plugin!r}: memvault_vault_plugins raised {type(exc).__name__}: {exc}"
    if made is None:
        return []
    if not isinstance(made, (list, tuple)):
        return f"plugin {plugin!r}: memvault_vault_plugins returned {type(made).__name__}, not a list of plugin objects"
    return list(made)


def _takes_policy(factory: Callable[..., object]) -> bool:
    params, var_kw = _accepted_parameters(factory)
    return "policy" in params or var_kw


def _hints(factory: Callable[..., object]) -> dict[str, Any]:
    target = factory.__init__ if isinstance(factory, type) else factory  # type: ignore[misc]
    try:
        return typing.get_type_hints(target)
    except Exception:  # noqa: BLE001 - unresolvable annotations: keep values as given
        return {}


def _coerce(value: object, hint: Any, key: str, provider: str) -> object:
    if hint is None:
        return value
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else str
    if hint is float and isinstance(value, float) and not math.isfinite(value):
        # From TOML (inf, nan) or Python: no float setting means "forever" or "undefined";
        # left through, nan passes every sign check and inf overflows a timeout.
        raise InvalidRequest(
            f"setting {key}={value!r} of provider {provider!r} is not a finite number: give a finite one",
            field=key,
        )
    if not isinstance(value, str):
        return value
    try:
        if hint is bool:
            low = value.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError("expected true/false")
        if hint is int:
            return int(value)
        if hint is float:
            number = float(value)
            if not math.isfinite(number):
                raise ValueError("not a finite number")
            return number
        if hint is Path:
            return Path(value)
    except ValueError as exc:
        raise InvalidRequest(
            f"setting {key}={value!r} of provider {provider!r} is not a valid {getattr(hint, '__name__', hint)}: {exc}",
            field=key,
        ) from None
    return value


def coerce_settings(info: ProviderInfo, settings: Mapping[str, object]) -> dict[str, object]:
    """Check ``settings`` against the provider's factory and convert strings by annotation.

    :raises InvalidRequest: naming a key the provider does not take, and the keys it does.
    """
    params, var_kw = _accepted_parameters(info.factory)
    unknown = [k for k in settings if k not in params]
    if unknown and not var_kw:
        accepted = ", ".join(sorted(params)) or "none"
        raise InvalidRequest(
            f"provider {info.name!r} does not take setting {unknown[0]!r}; its settings are: {accepted}",
            field=unknown[0],
        )
    hints = _hints(info.factory)
    return {k: _coerce(v, hints.get(k), k, info.name) for k, v in settings.items()}


_PARAM_DOC = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$")


def setting_help(info: ProviderInfo, key: str) -> str:
    """What setting ``key`` of a provider means: its ``:param key:`` line, else its type.

    Read from the factory's docstring (a class's own docstring, then its ``__init__``'s),
    so third-party providers get the same help as the bundled ones.
    """
    factory = info.factory
    docs = [inspect.getdoc(factory) or ""]
    if isinstance(factory, type):
        docs.append(inspect.getdoc(factory.__init__) or "")  # type: ignore[misc]
    for doc in docs:
        lines = doc.splitlines()
        for index, line in enumerate(lines):
            match = _PARAM_DOC.match(line)
            if match is None or match.group(1) != key:
                continue
            text = [match.group(2).strip()]
            for more in lines[index + 1 :]:
                if not more.strip() or more.lstrip().startswith(":"):
                    break
                text.append(more.strip())
            return " ".join(t for t in text if t).replace("``", "`").rstrip(".")
    hint = _hints(factory).get(key)
    if hint is not None:
        shown = getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
        return f"{'an' if shown[:1] in 'aeiou' else 'a'} {shown}"
    return ""


def missing_settings(info: ProviderInfo, settings: Mapping[str, object]) -> InvalidRequest | None:
    """The error for required settings of ``info`` that ``settings`` lacks, or ``None``.

    "Required" is read from the factory's signature: a keyword-capable parameter
    without a default. The message names each missing setting, what it means, and
    the three ways to pass it (CLI option, config key, Python keyword).
    """
    params, _ = _accepted_parameters(info.factory)
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in settings]
    if not missing:
        return None
    parts = []
    for key in missing:
        meaning = setting_help(info, key)
        parts.append(f"{key!r} ({meaning})" if meaning else repr(key))
    key = missing[0]
    plural = "settings" if len(missing) > 1 else "setting"
    return InvalidRequest(
        f"provider {info.name!r} needs the {plural} {', '.join(parts)}. Pass it on the command line as "
        f"`-o {key}=VALUE` (`memvault --provider {info.name} -o {key}=VALUE ...`), in memvault.toml as "
        f"`{key} = ...` under `[providers.{info.name}]`, or from Python as "
        f"`memvault.open({info.name!r}, {key}=...)`",
        field=key,
    )
