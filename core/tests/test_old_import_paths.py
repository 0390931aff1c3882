"""memvault 0.1.0's import paths keep working (issue #34, contract D4).

The previous release (the tree before commit 4b746a6, "A layered core") had
flat modules; the layered core moved them. Every module path of that release
and every name it exported (its ``__all__`` and its other public names) still
resolves to the same object, and each old path warns once per process with
:class:`memvault.MemvaultRemovedIn1Warning`, naming the new path and the
release that removes the old one.

:data:`OLD_RELEASE` is that release's export list, taken from git history
(``test_the_list_is_the_previous_release_s_exports`` re-reads it from git when
the history is there), with where each name lives now ("": a name with no
object left, kept as a function doing the same).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memvault import MemvaultRemovedIn1Warning
from memvault.contract.deprecation import _warned

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS_RELEASE = "4b746a6^"

#: old module -> new module -> names (new module == old module: the name is still there, no warning).
OLD_RELEASE: dict[str, dict[str, tuple[str, ...]]] = {
    "memvault": {
        "memvault": (
            "AsyncVault",
            "CapExceeded",
            "Capability",
            "ContentRejected",
            "DocumentInfo",
            "ForgetRequest",
            "ForgetResult",
            "HealthStatus",
            "InvalidRequest",
            "ListDocumentsRequest",
            "ListDocumentsResult",
            "MemvaultError",
            "Mode",
            "NotSupported",
            "PluginError",
            "ProviderNotFound",
            "Quarantine",
            "ReadRequest",
            "ReadResult",
            "RecallRequest",
            "RecallResult",
            "RecallSnippet",
            "RetainRequest",
            "RetainResult",
            "Tier",
            "Unauthorized",
            "UpstreamError",
            "UpstreamTimeout",
            "Vault",
            "errors",
            "hookimpl",
            "hookspec",
            "open",
            "open_async",
            "open_configured",
            "open_from_config",
            "settings_from_pairs",
        ),
    },
    "memvault.cli": {
        "memvault.cli.common": ("render_table",),
        "memvault.cli.main": (
            "cli",
            "doctor",
            "forget",
            "health",
            "main",
            "providers",
            "read",
            "recall",
            "retain",
            "unstructure_check",
        ),
    },
    "memvault.cli_quarantine": {
        "memvault.cli.quarantine": ("list_", "quarantine", "show"),
    },
    "memvault.cli_transfer": {
        "memvault.cli.transfer": ("export", "import_", "inspect"),
    },
    "memvault.config": {
        "memvault.config": ("Config", "DEFAULT_FILE", "DEFAULT_PROVIDER", "find_config", "load_config", "read_toml"),
    },
    "memvault.doctor": {
        "memvault.doctor": ("Check", "FAIL_FREE", "SUPPORTED", "Status", "WARN_FREE", "run_checks"),
    },
    "memvault.errors": {
        "memvault.contract.errors": (
            "CapExceeded",
            "ContentRejected",
            "InvalidRequest",
            "MemvaultError",
            "NotSupported",
            "PluginError",
            "ProviderNotFound",
            "Unauthorized",
            "UpstreamError",
            "UpstreamTimeout",
        ),
    },
    "memvault.hookspecs": {
        "memvault.hooks.lifecycle": (
            "memvault_capture_compaction_requested",
            "memvault_capture_turn_completed",
            "memvault_recall_compaction_completed",
            "memvault_recall_turn_started",
            "memvault_tools",
        ),
        "memvault.hooks.provider": (
            "memvault_forget",
            "memvault_health",
            "memvault_list_documents",
            "memvault_quarantine_get",
            "memvault_quarantine_keep",
            "memvault_quarantine_list",
            "memvault_read",
            "memvault_recall",
            "memvault_retain",
        ),
        "memvault.hooks.registration": (
            "memvault_register_commands",
            "memvault_register_providers",
            "memvault_register_scanners",
        ),
    },
    "memvault.lifecycle": {
        "memvault.contract.errors": (
            "CompactionFailed",
            "LifecycleError",
            "ReplayConflict",
            "TurnCancelled",
            "TurnFailed",
        ),
        "memvault.contract.lifecycle": (
            "LifecycleContext",
            "MAX_RECORD_BYTES",
            "MAX_RECORD_ENTRIES",
            "MAX_RECORD_ID_BYTES",
            "Message",
            "PHASE_COMPACTION_COMPLETED",
            "PHASE_COMPACTION_REQUESTED",
            "PHASE_TOOLS",
            "PHASE_TURN_COMPLETED",
            "PHASE_TURN_STARTED",
            "RecallOutcome",
            "RecalledMessage",
            "ScopeContext",
            "Tool",
            "validate_recall_result",
        ),
        "memvault.lifecycle": (
            "CompactionPlan",
            "Entry",
            "LockedScope",
            "Runtime",
            "Session",
            "Slot",
            "TurnStart",
            "by_principal",
            "by_session",
            "by_value",
            "canonical_encoding",
            "operation_id",
            "scope_key",
        ),
        "memvault.lifecycle.scopes": (
            "MAX_COMPONENT_BYTES",
            "MAX_ENCODING_BYTES",
            "MAX_NAMESPACE_BYTES",
            "MAX_SCOPE_COMPONENTS",
            "NamespaceSpec",
            "OPERATION_ID_VERSION",
            "SCOPE_KEY_VERSION",
            "Scope",
            "ScopeResolver",
            "Visibility",
        ),
    },
    "memvault.lifecycle_default": {
        "memvault.default_lifecycle.plugin": ("DefaultLifecycle", "MAX_CAPTURE_BYTES"),
    },
    "memvault.markers": {
        "memvault.hooks.markers": ("PROJECT", "hookimpl", "hookspec"),
    },
    "memvault.memory": {
        "memvault.providers.memory": ("MemoryProvider", "memvault_register_providers"),
    },
    "memvault.models": {
        "memvault.contract.models": (
            "CAPS",
            "Capability",
            "DocumentInfo",
            "DocumentRef",
            "ForgetRequest",
            "ForgetResult",
            "HealthStatus",
            "ListDocumentsRequest",
            "ListDocumentsResult",
            "MAX_QUERY_BYTES",
            "MAX_QUERY_TERMS",
            "MAX_RECALL_LIMIT",
            "MAX_SNIPPET_CHARS",
            "Mode",
            "Partition",
            "Quarantine",
            "QuarantineRecord",
            "ReadRequest",
            "ReadResult",
            "RecallRequest",
            "RecallResult",
            "RecallSnippet",
            "RetainRequest",
            "RetainResult",
            "Tier",
            "cap_warning",
            "check_cap",
            "label_for",
            "parse_label",
            "today_utc",
            "validate_identifier",
            "validate_sha256",
            "validate_text",
        ),
    },
    "memvault.notes": {
        "memvault.default_lifecycle.notes": (
            "MAX_DOCUMENT_BYTES",
            "MAX_ENTRY_BYTES",
            "NOTES_RECORD_ID",
            "NotesChange",
            "NotesConflict",
            "NotesDocument",
            "NotesStore",
            "OP_BYTES",
            "REMOVE_SCHEMA",
            "SAVE_SCHEMA",
            "normalise_entry",
            "notes_tools",
        ),
    },
    "memvault.plugins": {
        "memvault.contract.registration": ("RegisterProvider", "RegisterScanner"),
        "memvault.registry": (
            "PluginFailure",
            "ProviderInfo",
            "RESERVED_SETTINGS",
            "Registry",
            "ScratchSettings",
            "coerce_settings",
            "get_registry",
            "missing_settings",
            "reset_registry",
            "setting_help",
        ),
    },
    "memvault.scan": {
        "memvault.contract.models": ("body_sha256",),
        "memvault.scanner.engine": (
            "ADDRESSED",
            "CATEGORIES",
            "COMBINE_WINDOW",
            "DEFAULT_POLICY",
            "EXFILTRATION",
            "FOLDED_LANGUAGE_RULES",
            "Finding",
            "Hit",
            "INVISIBLE",
            "INVISIBLE_RULES",
            "OVERRIDE",
            "PATTERN_IDS",
            "ROLE",
            "RULES",
            "ScanPolicy",
            "TAIL_CONTEXT",
            "TOOL",
            "scan",
            "tail_start",
        ),
        "memvault.scanner.normalise": ("fold",),
        "memvault.scanner.plugin": ("BuiltinScanner", "CACHE_SIZE", "memvault_register_scanners"),
        "memvault.scanner.quarantine": (
            "BLOCKED_PREFIX",
            "blocked_placeholder",
            "quarantine_record",
            "quarantine_records",
        ),
        "memvault.scanner.rules": ("Rule",),
    },
    "memvault.scan_normalise": {
        "memvault.scanner.normalise": (
            "HANGUL_FILLERS",
            "Views",
            "confusables",
            "fold",
            "format_chars",
            "native_view",
            "views",
            "words_view",
        ),
    },
    "memvault.scan_rules": {
        "memvault.scanner.rules": (
            "ADDRESSED",
            "CATEGORIES",
            "EXFILTRATION",
            "INVISIBLE",
            "LanguageFile",
            "OVERRIDE",
            "ROLE",
            "Rule",
            "TOOL",
            "builtin_rules",
            "language_files",
        ),
    },
    "memvault.text": {
        "": ("terms",),
        "memvault.search": (
            "BM25_B",
            "BM25_K1",
            "DOCUMENT_WEIGHT",
            "IndexedDocument",
            "IndexedLine",
            "NEIGHBOUR_WEIGHT",
            "PHRASE_FLOOR",
            "Query",
            "SECOND_NEIGHBOUR",
            "STOP_WORDS",
            "SearchableDocument",
            "TERM_CEILING",
            "contains_phrase",
            "index_document",
            "search",
            "snippet_around",
            "stem",
            "tokenize",
        ),
    },
    "memvault.tools": {
        "memvault.default_lifecycle.tools": (
            "APPEND_DAILY_SCHEMA",
            "READ_SCHEMA",
            "SEARCH_SCHEMA",
            "WRITE_SCHEMA",
            "daily_line",
            "memory_tools",
        ),
        "memvault.lifecycle.tools": (
            "ToolResult",
            "ToolSet",
            "bind_slot_tools",
            "to_anthropic",
            "to_mcp",
            "to_openai",
            "validate_arguments",
            "validate_tool_name",
        ),
    },
    "memvault.transfer": {
        "memvault.transfer": (
            "ExportEnd",
            "ExportFileError",
            "ExportHeader",
            "ExportSummary",
            "ExportedDocument",
            "ExportedQuarantine",
            "FORMAT",
            "ImportConflict",
            "ImportSummary",
            "Mismatch",
            "Progress",
            "VERSION",
            "count_documents",
            "export_store",
            "import_store",
            "supports_listing",
            "verify_import",
        ),
    },
    "memvault.vault": {
        "memvault.vault": (
            "AsyncVault",
            "LOCAL_HEALTH_DEADLINE",
            "REMOTE_HEALTH_DEADLINE",
            "Vault",
            "open",
            "open_async",
            "open_configured",
            "open_from_config",
            "settings_from_pairs",
        ),
    },
    "memvault.wire": {
        "memvault.contract.wire": ("converter", "structure", "unstructure"),
    },
}

#: The one old name that cannot resolve as it did: the package ``memvault.cli`` now has a
#: submodule ``main`` (the commands), which shadows memvault 0.1.0's function
#: ``memvault.cli.main`` once imported. The console script is ``memvault.cli.main:main``
#: (docs/plugin-authors/versioning.md says so).
SHADOWED = {("memvault.cli", "main")}

#: Old module paths that are not deprecated: the same module under its public name.
NOT_DEPRECATED = {
    "memvault",
    "memvault.errors",
    "memvault.config",
    "memvault.doctor",
    "memvault.transfer",
    "memvault.vault",
}

_PROBE = textwrap.dedent(
    """
    import importlib, json, sys, warnings
    plan = json.loads(sys.argv[1])
    out = {"same": [], "different": [], "warnings": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for old, homes in plan.items():
            module = importlib.import_module(old)
            for new, names in homes.items():
                for name in names:
                    again = importlib.import_module(old)  # a second import of the path: no second warning
                    got = getattr(again, name)
                    getattr(module, name)  # a second use: no second warning
                    if not new:
                        out["same"].append([old, name, callable(got)])
                        continue
                    expected = getattr(importlib.import_module(new), name)
                    out["same" if got is expected else "different"].append([old, name, new])
    for w in caught:
        deprecation = issubclass(w.category, DeprecationWarning)
        out["warnings"].append([w.category.__name__, str(w.message), w.filename, deprecation])
    print(json.dumps(out))
    """
)


def _checkable() -> dict[str, dict[str, list[str]]]:
    return {
        old: {new: [n for n in names if (old, n) not in SHADOWED] for new, names in homes.items()}
        for old, homes in OLD_RELEASE.items()
    }


def _probe() -> dict[str, list[list[object]]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(_checkable())],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, list[list[object]]] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def probe() -> dict[str, list[list[object]]]:
    return _probe()


def test_every_old_name_resolves_to_the_same_object(probe: dict[str, list[list[object]]]) -> None:
    assert probe["different"] == []
    total = sum(len(names) for homes in _checkable().values() for names in homes.values())
    assert len(probe["same"]) == total


def test_a_name_with_no_object_left_is_kept_as_a_function() -> None:
    import memvault.search
    from memvault import text
    from memvault.contract.terms import STOP_WORDS, stem, tokenize

    _warned.discard("memvault.text")  # once per process: another test may have used it first
    with pytest.warns(MemvaultRemovedIn1Warning, match="memvault.text is deprecated"):
        terms = text.terms
    sample = "The running dogs were quickly barking at the mailmen"
    assert terms(sample) == [stem(t) for t in tokenize(sample) if t not in STOP_WORDS]
    assert memvault.search.Query  # the module it replaced still imports


def _deprecated_paths() -> set[str]:
    """Old paths that warn: a whole old module, or each moved name of a live module."""
    paths = set()
    for old, homes in OLD_RELEASE.items():
        if old in NOT_DEPRECATED:
            continue
        whole = old not in ("memvault.lifecycle", "memvault.cli")
        for new, names in homes.items():
            if new == old:
                continue
            paths |= {old} if whole else {f"{old}.{n}" for n in names if (old, n) not in SHADOWED}
    return paths


def test_each_old_path_warns_once_naming_the_new_path_and_the_removal_release(
    probe: dict[str, list[list[object]]],
) -> None:
    messages = [
        str(m) for category, m, _, is_deprecation in probe["warnings"] if category == "MemvaultRemovedIn1Warning"
    ]
    assert all(is_deprecation for *_, is_deprecation in probe["warnings"])
    warned = [m.split(" is deprecated", 1)[0] for m in messages]
    assert len(warned) == len(set(warned)), "one warning per old path"
    assert set(_deprecated_paths()) - set(warned) == set(), "old paths that did not warn"
    assert set(warned) - set(_deprecated_paths()) == set(), "paths that warned but are not deprecated"
    for message in messages:
        assert "will be removed in memvault 1.0.0" in message, message
        assert " from memvault." in message or "memvault.contract.terms" in message, message
    others = [w for w in probe["warnings"] if w[0] != "MemvaultRemovedIn1Warning"]
    assert others == []


def test_the_warning_points_at_the_importing_line(tmp_path: Path) -> None:
    script = tmp_path / "old_plugin.py"
    script.write_text("from memvault.models import MAX_RECALL_LIMIT\nfrom memvault.plugins import get_registry\n")
    done = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", str(script)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert f"{script}:1: MemvaultRemovedIn1Warning: memvault.models is deprecated" in done.stderr
    assert f"{script}:2: MemvaultRemovedIn1Warning: memvault.plugins is deprecated" in done.stderr
    assert "import get_registry from memvault.registry" in done.stderr


def test_the_old_hookspecs_module_still_serves_pluggy() -> None:
    import pluggy

    sys.modules.pop("memvault.hookspecs", None)
    _warned.discard("memvault.hookspecs")
    with pytest.warns(MemvaultRemovedIn1Warning, match="memvault.hookspecs is deprecated"):
        import memvault.hookspecs as old_specs
    manager = pluggy.PluginManager("memvault")
    manager.add_hookspecs(old_specs)
    assert "memvault_retain" in vars(manager.hook)


def _exports_at(rev: str) -> dict[str, set[str]]:
    listing = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{rev}:core/src/memvault/"],
        capture_output=True,
        text=True,
        check=False,
    )
    if listing.returncode != 0:
        pytest.skip("the previous release is not in this checkout's git history")
    found: dict[str, set[str]] = {}
    for entry in listing.stdout.split():
        if not entry.endswith(".py"):
            continue
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:core/src/memvault/{entry}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        module = "memvault" if entry == "__init__.py" else f"memvault.{entry[:-3]}"
        declared: list[str] = []
        defined: set[str] = set()
        for node in ast.parse(source).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            for target in targets:
                if isinstance(target, ast.Name) and target.id == "__all__" and node.value is not None:
                    declared = list(ast.literal_eval(node.value))
                elif isinstance(target, ast.Name):
                    defined.add(target.id)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
        public = {n for n in defined if not n.startswith("_") and n != "log"}
        found[module] = set(declared) if module == "memvault" else set(declared) | public
    return found


def test_the_list_is_the_previous_release_s_exports() -> None:
    found = _exports_at(PREVIOUS_RELEASE)
    listed = {old: {n for names in homes.values() for n in names} for old, homes in OLD_RELEASE.items()}
    assert sorted(found) == sorted(listed), "a module path of the previous release is missing"
    for module, names in found.items():
        assert names <= listed[module], f"{module} exported {sorted(names - listed[module])} in the previous release"
    # named in issue #34 although the module did not list them in __all__
    assert "MAX_RECALL_LIMIT" in listed["memvault.models"]
    assert "get_registry" in listed["memvault.plugins"]
