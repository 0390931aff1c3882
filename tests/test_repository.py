"""The repository stands on its own: no file points outside it.

A fresh clone must be complete: no reference to a sibling folder of the
checkout (the old shared contract folder), to the machine it was written on, or a
Markdown link that climbs out of the repository. Benchmark data lives in
`bench/data/`, with its license and source beside it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from readme import ROOT, repository_files

#: Written in pieces so this file does not match itself.
OUTSIDE = [re.compile(re.escape("../" + "shared")), re.compile(r"(?<![\w.])/" + "work/")]
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def text_files() -> list[Path]:
    out = []
    for path in repository_files():
        if path.suffix in {".json", ".db"} or path.name == "LICENSE":
            continue
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        out.append(path)
    return out


def test_no_file_references_a_path_outside_the_repository() -> None:
    found = []
    for path in text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(p.search(line) for p in OUTSIDE):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "paths that leave the repository:\n" + "\n".join(found)


def test_the_check_catches_what_it_looks_for(tmp_path: Path) -> None:
    for bad in ("see ../" + "shared/contract.md", 'DATA = Path("/' + 'work/shared/x.json")'):
        assert any(p.search(bad) for p in OUTSIDE)
    assert not any(p.search("docs/work/notes.md and ../../bench/data") for p in OUTSIDE)


def test_relative_markdown_links_stay_inside_the_repository() -> None:
    escaping = []
    for path in text_files():
        if path.suffix != ".md":
            continue
        for target in _LINK.findall(path.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            resolved = (path.parent / target).resolve()
            if not resolved.is_relative_to(ROOT):
                escaping.append(f"{path.relative_to(ROOT)} -> {target}")
            elif not resolved.exists():
                escaping.append(f"{path.relative_to(ROOT)} -> {target} (missing)")
    assert not escaping, "Markdown links that leave the repository or point nowhere:\n" + "\n".join(escaping)


@pytest.mark.parametrize("name", ["locomo10.json", "LICENSE", "SOURCE.md"])
def test_benchmark_dataset_is_in_the_repository_with_its_license(name: str) -> None:
    assert (ROOT / "bench" / "data" / "locomo" / name).is_file()


def test_dataset_license_and_source_are_recorded() -> None:
    source = (ROOT / "bench" / "data" / "locomo" / "SOURCE.md").read_text(encoding="utf-8")
    assert "CC BY-NC 4.0" in source
    assert "snap-research/locomo" in source
    assert "Attribution-NonCommercial 4.0" in (ROOT / "bench" / "data" / "locomo" / "LICENSE").read_text()


@pytest.mark.parametrize("script", ["sqlite_locomo.py", "scan_bench.py"])
def test_benchmarks_default_to_the_copy_in_the_repository(script: str) -> None:
    text = (ROOT / "bench" / script).read_text(encoding="utf-8")
    assert '"data" / "locomo" / "locomo10.json"' in text
    assert '"--data"' in text
