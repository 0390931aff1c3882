"""The core's architecture, checked: layers import only downwards, nothing forms a cycle.

Every import statement counts, wherever it stands: at module level, deferred
inside a function, or under ``TYPE_CHECKING``. A module may import from its own
layer or the layers below it, never from a layer above, and the import graph
between memvault's modules has no cycle. No module imports the package's public
namespace (``import memvault``, ``from memvault import X`` for a name that is
not a module): that namespace sits on top of every layer, and so do memvault
0.1.0's moved module paths (``OLD_PATHS``), which only forward and warn, and
which no module imports.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

import memvault

PACKAGE = Path(memvault.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[2]

#: The layers, lowest first, by module-name prefix (a package's prefix covers its modules).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("contract types and errors", ("memvault.contract",)),
    ("hook specifications", ("memvault.hooks",)),
    ("registry", ("memvault.registry",)),
    ("facade", ("memvault.config", "memvault.embedding", "memvault.telemetry", "memvault.vault")),
    (
        "built-in plugins",
        ("memvault.search", "memvault.providers", "memvault.scanner", "memvault.default_lifecycle"),
    ),
    ("lifecycle runtime and operations", ("memvault.lifecycle", "memvault.transfer", "memvault.doctor")),
    ("command line", ("memvault.cli",)),
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}

#: memvault 0.1.0's module paths that moved (docs/plugin-authors/versioning.md): each is a
#: module that forwards to the new one and warns. They sit on top, like ``memvault`` itself,
#: in no layer; nothing imports them. A new path is never added here: it gets a layer.
OLD_PATHS = frozenset(
    f"memvault.{name}"
    for name in (
        "cli_quarantine",
        "cli_transfer",
        "hookspecs",
        "lifecycle_default",
        "markers",
        "memory",
        "models",
        "notes",
        "plugins",
        "scan",
        "scan_normalise",
        "scan_rules",
        "text",
        "tools",
        "wire",
    )
)
INTERNAL = sorted(name for name in MODULES if name != "memvault" and name not in OLD_PATHS)


def layer_of(module: str) -> int:
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    raise LookupError(f"module {module} is in no layer: add it to LAYERS and to docs/plugin-authors/architecture.md")


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    if MODULES[importer].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(module: str) -> list[tuple[str, int]]:
    """Every memvault module ``module`` imports, with the line, wherever the import stands."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "memvault"]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            if target.split(".")[0] != "memvault":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub if sub in MODULES else target, node.lineno))
    return found


def plugin_imports_of(module: str) -> list[tuple[str, int]]:
    """Every import of a plugin distribution's package (``memvault_*``) in ``module``, wherever it stands."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        found += [(name, node.lineno) for name in names if name.split(".")[0].startswith("memvault_")]
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_the_core_imports_no_plugin_distribution(module: str) -> None:
    # A provider brings what the core asks of it through registration (factory, scratch,
    # checks): the core never reaches into a plugin's package, not even guarded by ImportError.
    assert plugin_imports_of(module) == [], f"{module} imports a plugin's package"


@pytest.mark.parametrize("module", INTERNAL)
def test_every_module_belongs_to_a_layer(module: str) -> None:
    layer_of(module)


@pytest.mark.parametrize("module", INTERNAL)
def test_a_module_imports_only_from_its_own_layer_or_below(module: str) -> None:
    own = layer_of(module)
    for target, line in imports_of(module):
        assert target != "memvault", (
            f"{module}:{line} imports the public namespace `memvault`: import from the layer module instead"
        )
        assert target in MODULES, f"{module}:{line} imports {target}, which does not exist"
        theirs = layer_of(target)
        assert theirs <= own, (
            f"{module}:{line} (layer {own + 1}, {LAYERS[own][0]}) imports {target} "
            f"from layer {theirs + 1} ({LAYERS[theirs][0]}), above its own"
        )


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_an_old_path(module: str) -> None:
    # An old path warns on use: memvault's own code (old paths included) uses the new ones.
    used = sorted({target for target, _ in imports_of(module)} & OLD_PATHS)
    assert used == [], f"{module} imports the deprecated path(s) {used}: import from the new module instead"


@pytest.mark.parametrize("module", sorted(OLD_PATHS))
def test_an_old_path_is_a_deprecated_forwarder_and_nothing_else(module: str) -> None:
    assert module in MODULES, f"{module} was removed: an old path lives until the release its warning names"
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree) or ""
    assert doc.startswith("Deprecated:"), module
    assert "removed in memvault 1.0.0" in doc, module
    classes = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    assert classes == [], f"{module} defines {classes}: an old path only forwards to the new module"


def test_no_import_cycles_counting_deferred_and_type_checking_imports() -> None:
    graph = {m: {t for t, _ in imports_of(m) if t in MODULES and t != m} for m in MODULES}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_docstring_says_what_lives_there_and_what_it_may_import(module: str) -> None:
    doc = ast.get_docstring(ast.parse(MODULES[module].read_text(encoding="utf-8"))) or ""
    assert len(doc.splitlines()[0]) > 20 if doc else False, f"{module} has no opening docstring"
    if module != "memvault":
        assert "May import:" in doc, f"{module}'s docstring does not say what it may import ('May import: ...')"


def test_the_architecture_page_lists_every_module_and_only_real_ones() -> None:
    page = (ROOT / "docs" / "plugin-authors" / "architecture.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(memvault(?:\.[a-z_]+)*)` \|", page, flags=re.M))
    assert listed, "the architecture page has no module table"
    assert sorted(set(MODULES) - listed) == [], "modules missing from docs/plugin-authors/architecture.md"
    assert sorted(listed - set(MODULES)) == [], "the architecture page lists modules that do not exist"
    for module in INTERNAL:
        row = re.search(rf"^\| `{re.escape(module)}` \| (\d) \|", page, flags=re.M)
        assert row is not None, f"{module}'s row gives no layer number"
        assert int(row.group(1)) == layer_of(module) + 1, f"{module} is in layer {layer_of(module) + 1}"


def test_the_meta_test_itself_catches_an_upward_import(tmp_path: Path) -> None:
    """A deliberately wrong module (contract importing the facade, deferred) is caught."""
    bad = "def f():\n    from memvault.vault import Vault\n    return Vault\n"
    MODULES["memvault.contract._probe"] = tmp_path / "_probe.py"
    (tmp_path / "_probe.py").write_text(bad)
    try:
        with pytest.raises(AssertionError, match="above its own"):
            test_a_module_imports_only_from_its_own_layer_or_below("memvault.contract._probe")
    finally:
        del MODULES["memvault.contract._probe"]


def test_builtin_plugins_are_importable_by_their_dotted_names() -> None:
    from memvault.registry import BUILTIN_PLUGINS

    for dotted in BUILTIN_PLUGINS:
        assert importlib.util.find_spec(dotted) is not None, dotted
