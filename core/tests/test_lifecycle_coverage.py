"""Every lifecycle contract line (L1-L14) has tests over `memory` and over the real providers."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE_TESTS = sorted(
    p
    for p in (ROOT / "core" / "tests").glob("test_*.py")
    if p.name.startswith(("test_lifecycle", "test_tools", "test_notes")) and p.name != Path(__file__).name
)
REAL_PROVIDER_TESTS = ROOT / "tests" / "test_lifecycle_real_providers.py"
LINES = [f"L{n}" for n in range(1, 15)]


@functools.cache
def _cited(paths: tuple[Path, ...]) -> frozenset[str]:
    """Contract lines named by a test function (``test_L5_...``, ``test_L4_L12_...``) or its docstring."""
    cited: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                cited.update(re.findall(r"L\d+", node.name))
                cited.update(re.findall(r"\bL\d+\b", ast.get_docstring(node) or ""))
    return frozenset(cited)


@pytest.mark.parametrize("line", LINES)
def test_every_lifecycle_line_is_tested_over_the_memory_provider(line: str) -> None:
    assert line in _cited(tuple(CORE_TESTS)), f"no core test names {line}"


@pytest.mark.parametrize("line", LINES)
def test_every_lifecycle_line_is_tested_over_the_real_providers(line: str) -> None:
    assert line in _cited((REAL_PROVIDER_TESTS,)), f"no test in tests/test_lifecycle_real_providers.py names {line}"
