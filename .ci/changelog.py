"""The changelog: fragments in changelog.d/ until a release, sections of CHANGELOG.md after.

Every user-visible change adds one fragment, ``changelog.d/<slug>.<type>.md``: ``<slug>``
is lowercase words joined by ``-``; ``<type>`` one of ``added``, ``changed``,
``deprecated``, ``removed``, ``fixed``, ``security``; the text a few sentences of
Markdown for users, naming the issue (``#34``), with no heading.

    python .ci/changelog.py check                 # every fragment well formed (exit 1 if not)
    python .ci/changelog.py render 0.2.0          # the release's section, from the fragments
    python .ci/changelog.py release 0.2.0 DATE    # write it into CHANGELOG.md, remove the fragments

``tests/test_changelog.py`` runs the check on every change.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAGMENTS = ROOT / "changelog.d"
CHANGELOG = ROOT / "CHANGELOG.md"

#: Fragment types, in the order a release's section lists them, with their headings.
TYPES = {
    "security": "Security",
    "removed": "Removed",
    "deprecated": "Deprecated",
    "changed": "Changed",
    "added": "Added",
    "fixed": "Fixed",
}
_NAME = re.compile(r"(?P<slug>[a-z0-9]+(?:-[a-z0-9]+)*)\.(?P<type>[a-z]+)\.md")
#: A released section's heading: ``## 0.1.0 - 2026-11-30``.
RELEASED = re.compile(r"^## (\d+\.\d+\.\d+) - (\d{4}-\d{2}-\d{2})$", re.MULTILINE)


def fragments(folder: Path = FRAGMENTS) -> list[Path]:
    """Every fragment file (the folder's README aside), sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name != "README.md") if folder.is_dir() else []


def problems(folder: Path = FRAGMENTS) -> list[str]:
    """What is wrong with the fragments, one sentence each (empty: nothing)."""
    found = []
    for path in fragments(folder):
        match = _NAME.fullmatch(path.name)
        if match is None:
            found.append(f"{path.name}: name it <slug>.<type>.md, slug lowercase words joined by '-'")
            continue
        if match.group("type") not in TYPES:
            found.append(f"{path.name}: type {match.group('type')!r} is none of {', '.join(TYPES)}")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            found.append(f"{path.name}: not UTF-8 text")
            continue
        if not text.strip():
            found.append(f"{path.name}: empty: say what changed, for users")
        elif re.search(r"^\s{0,3}#", text, re.MULTILINE):
            found.append(f"{path.name}: no headings in a fragment: the release's section gives them")
        elif not re.search(r"#\d+", text):
            found.append(f"{path.name}: name the issue it comes from (#N)")
    return found


def render(version: str, date: str, folder: Path = FRAGMENTS) -> str:
    """The CHANGELOG.md section of release ``version``, from the fragments."""
    by_type: dict[str, list[str]] = {t: [] for t in TYPES}
    for path in fragments(folder):
        match = _NAME.fullmatch(path.name)
        if match is not None and match.group("type") in TYPES:
            entry = " ".join(path.read_text(encoding="utf-8").split())
            by_type[match.group("type")].append(f"- {entry}")
    parts = [f"## {version} - {date}", ""]
    for kind, heading in TYPES.items():
        if by_type[kind]:
            parts += [f"### {heading}", "", *by_type[kind], ""]
    return "\n".join(parts)


def released(changelog: Path = CHANGELOG) -> list[str]:
    """The versions CHANGELOG.md has a released section for, newest first."""
    return [version for version, _date in RELEASED.findall(changelog.read_text(encoding="utf-8"))]


def release(version: str, date: str) -> None:
    """Write the release's section above the newest one and remove the fragments it holds."""
    text = CHANGELOG.read_text(encoding="utf-8")
    first = RELEASED.search(text)
    cut = first.start() if first else len(text)
    CHANGELOG.write_text(text[:cut] + render(version, date) + "\n" + text[cut:], encoding="utf-8")
    for path in fragments():
        path.unlink()


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"]:
        found = problems()
        for problem in found:
            print(f"changelog.d/{problem}", file=sys.stderr)
        return 1 if found else 0
    if argv[:1] == ["render"] and len(argv) in (2, 3):
        print(render(argv[1], argv[2] if len(argv) == 3 else "YYYY-MM-DD"))
        return 0
    if argv[:1] == ["release"] and len(argv) == 3:
        found = problems()
        if found:
            print("\n".join(found), file=sys.stderr)
            return 1
        release(argv[1], argv[2])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
