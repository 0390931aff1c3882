"""Meta-tests in the style of datasette's test_docs.py: every hook is documented and tested."""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import pytest

from memvault.hooks import lifecycle, provider, registration

ROOT = Path(__file__).resolve().parents[2]
SPECS = {
    name: fn
    for module in (registration, provider, lifecycle)
    for name, fn in vars(module).items()
    if name.startswith("memvault_") and inspect.isfunction(fn)
}
HOOKS = sorted(SPECS)


def _load_generator() -> object:
    spec = importlib.util.spec_from_file_location("gen_hooks", ROOT / "docs" / "gen_hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hook_reference_page_matches_the_code() -> None:
    generator = _load_generator()
    page = ROOT / "docs" / "plugin-authors" / "hooks.md"
    assert page.read_text() == generator.render(), "hook reference is stale: run `python docs/gen_hooks.py`"  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", HOOKS)
def test_every_hookspec_documents_each_param_and_its_return(name: str) -> None:
    fn = SPECS[name]
    doc = inspect.getdoc(fn) or ""
    for param in inspect.signature(fn).parameters:
        assert f":param {param}:" in doc, f"{name} does not document :param {param}:"
    assert ":return:" in doc, f"{name} does not document its :return:"


@pytest.mark.parametrize("name", HOOKS)
def test_every_hookspec_is_in_the_reference_with_its_exact_signature(name: str) -> None:
    page = (ROOT / "docs" / "plugin-authors" / "hooks.md").read_text()
    signature = f"def {name}{inspect.signature(SPECS[name])}".replace("'", "")
    assert signature in page


def _test_sources() -> str:
    folders = [ROOT / "core" / "tests", ROOT / "tests", ROOT / "parity_suite"]
    folders += [p / "tests" for p in (ROOT / "plugins").glob("*") if p.name != "_template"]
    texts = []
    for folder in folders:
        for path in folder.rglob("*.py") if folder.is_dir() else []:
            if path.name != "test_meta.py":
                texts.append(path.read_text(encoding="utf-8"))
    return "\n".join(texts)


@pytest.mark.parametrize("name", HOOKS)
def test_plugin_hooks_have_tests(name: str) -> None:
    """Each hook is exercised by name somewhere in the test suites (datasette's rule)."""
    assert re.search(rf"\b{name}\b", _test_sources()), f"no test mentions {name}"


def _test_names() -> set[str]:
    return set(re.findall(r"def (test_\w+)", _test_sources()))


@pytest.mark.parametrize("line", [f"L{n}" for n in range(1, 15)] + [f"D{n}" for n in range(1, 4)])
def test_every_lifecycle_and_discovery_line_has_tests_and_a_coverage_row(line: str) -> None:
    page = (ROOT / "docs" / "contract-coverage.md").read_text()
    assert re.search(rf"^\| {line} \|", page, re.MULTILINE), f"docs/contract-coverage.md has no row for {line}"
    # Lifecycle tests may name several lines (test_L5_L10_...); discovery tests are test_d<n>_...
    pattern = re.compile(rf"^test_(L\d+_)*{line}_" if line.startswith("L") else rf"^test_{line.lower()}_")
    assert any(pattern.match(name) for name in _test_names()), f"no test is named for {line}"


def test_d4_row_names_a_test_that_exists() -> None:
    assert "test_copied_template_installs_and_passes_memvault_parity" in _test_names()
