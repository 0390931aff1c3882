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

The confusables come from ``scanner/data/confusables.txt``, an extract of
Unicode's ``confusables.txt`` (see ``core/scripts/gen_confusables.py``).

Layer 5. May import: nothing of memvault.
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
    text = resources.files("memvault.scanner").joinpath("data").joinpath("confusables.txt").read_text(encoding="utf-8")
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


#: A run of non-ASCII characters: only these can be dropped or mapped by folding.
_NON_ASCII: Final = re.compile("[^\x00-\x7f]+")


def _fold_run(run: re.Match[str]) -> str:
    return _fold_drops().sub("", run.group()).translate(confusables())


def fold(text: str) -> str:
    """NFKD-normalise, drop combining marks and format characters, and map UTS #39 confusables to ASCII.

    Both steps touch non-ASCII characters only (no ASCII character is a mark, a format character or a
    confusable), so they run on the non-ASCII runs alone: the drop class has hundreds of ranges, and
    matching it at every position cost about 1.3 us a character (2.8 ms for 2 KB of English text
    holding one dash), against 0.02 us for finding the runs.
    """
    return _NON_ASCII.sub(_fold_run, unicodedata.normalize("NFKD", text))


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
_TOKEN: Final = re.compile(r"[a-z0-9@$_]+")
# The characters of a word for leetspeak folding as "w", every other byte as a space.
_TOKEN_BYTES: Final = bytes(ord("w") if chr(b) in "abcdefghijklmnopqrstuvwxyz0123456789@$_" else 32 for b in range(256))
_LEET: Final = str.maketrans(
    {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b", "9": "g", "@": "a", "$": "s"}
)
# Four or more single letters in a row, once punctuation became spaces: "i g n o r e", "i-g-n-o-r-e"
# (an underscore among them stays: "m e m o r y _ w r i t e" is a tool name).
_SPELLED: Final = re.compile(r"(?<![a-z0-9_])[a-z](?: [a-z_]){3,}(?![a-z0-9_])")
_NON_WORD: Final = re.compile(r"[^a-z0-9_]+")
# Lowercase ASCII bytes: every byte but a-z, 0-9 and _ becomes a space (one byte for one byte); apostrophes
# go, so "don't" is one word.
_WORD_BYTES: Final = bytes(b if chr(b) in "abcdefghijklmnopqrstuvwxyz0123456789_" else 32 for b in range(256))
# Byte classes for cheap tests: letters "a", digits and @/$ "1", the separators of spelled-out letters " ".
_CLASS_BYTES: Final = bytes(
    ord("a")
    if chr(b).isascii() and chr(b).isalpha()
    else ord("1")
    if chr(b) in "0123456789@$"
    else 32
    if chr(b) in " .-*/|+~,_\t\n"
    else ord("#")
    for b in range(256)
)
_APOSTROPHES: Final = re.compile("['\u2019]")


def _unleet(match: re.Match[str]) -> str:
    token = match.group()
    return token.translate(_LEET) if _LEET_HINT.search(token) else token


def _unleet_words(lowered: str, classes: bytes) -> str:
    """Fold leetspeak in the words that mix letters with digits or @/$; ``classes`` is ``lowered`` in byte
    classes (for ASCII text its positions are the text's, so only those words are visited)."""
    if not lowered.isascii():
        return _TOKEN.sub(_unleet, lowered)
    tokens = lowered.encode("ascii").translate(_TOKEN_BYTES)
    spans: set[tuple[int, int]] = set()
    for marker in (b"a1", b"1a"):
        at = classes.find(marker)
        while at != -1:
            end = tokens.find(b" ", at)
            end = len(lowered) if end == -1 else end
            spans.add((tokens.rfind(b" ", 0, at) + 1, end))
            at = classes.find(marker, end)
    pieces: list[str] = []
    done = 0
    for start, end in sorted(spans):
        if start >= done:
            pieces += [lowered[done:start], lowered[start:end].translate(_LEET)]
            done = end
    pieces.append(lowered[done:])
    return "".join(pieces)


def _join(match: re.Match[str]) -> str:
    return match.group().replace(" ", "")


def _spaced(lowered: str, encoded: bytes | None = None) -> str:
    """Apostrophes removed, every other character but a-z, 0-9 and _ as a space."""
    if encoded is not None:
        return encoded.translate(_WORD_BYTES, b"'").decode("ascii")
    if lowered.isascii():
        return lowered.encode("ascii").translate(_WORD_BYTES, b"'").decode("ascii")
    return _NON_WORD.sub(" ", _APOSTROPHES.sub("", lowered))


# Base64 alphabet bytes as "x", every other byte as a space: a block needs 20 "x" in a row.
_BASE64_BYTES: Final = bytes(
    ord("x") if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "+/_-") else 32 for b in range(256)
)
_BASE64_RUN: Final = b"x" * 20


def words_view(lowered: str) -> tuple[list[str], list[str], bool, bool, bool]:
    """The words of the ``words`` view of (already folded and lowercased) text, the same before leetspeak
    folding and joining (``raw``), whether leetspeak or spelled-out letters changed them, and whether
    spelled-out letters were joined, and whether the text has 20+ base64 characters in a row."""
    encoded = lowered.encode("utf-8", "replace")
    base64_run = _BASE64_RUN in encoded.translate(_BASE64_BYTES)
    if "@" in lowered:
        lowered = _EMAIL.sub(" emailaddress ", lowered)
        encoded = lowered.encode("utf-8", "replace")
    spaced = _spaced(lowered, encoded if lowered.isascii() else None)
    changed = joined = False
    unleet = spaced
    classes = encoded.translate(_CLASS_BYTES)
    # A letter next to a digit (or @/$) needs a digit: "1" is rare in the classes, "a" is everywhere (every
    # letter), so looking for "1" first spares two slow searches on the usual text that has no digit.
    if b"1" in classes and (b"a1" in classes or b"1a" in classes):
        unleet = _spaced(_unleet_words(lowered, classes))
        changed = unleet != spaced
        classes = unleet.encode("utf-8", "replace").translate(_CLASS_BYTES)
    if (b" a a a a" in classes or classes.startswith(b"a a a a")) and _SPELLED.search(unleet) is not None:
        unleet = _SPELLED.sub(_join, unleet)
        changed = joined = True
    raw = spaced.split()
    return (unleet.split() if changed else raw), raw, changed, joined, base64_run


class Views(NamedTuple):
    """The views of one text (see the module docstring). ``folded`` is ``None`` when it equals ``text``.

    ``words`` lists the words of the ``words`` view (the view is their join with single spaces);
    ``wordset`` holds those of them in the vocabulary :func:`views` was given, ``raw_words`` the same for
    the folded text before leetspeak folding (what structural rules' word triggers look for: ``s3``,
    ``id_rsa``).
    """

    text: str
    lowered: str
    folded: str | None
    folded_lowered: str | None
    words: list[str]
    words_form: str  # "plain", "homoglyph" or "obfuscated"
    joined: bool
    wordset: frozenset[str]
    raw_words: frozenset[str]
    base64_run: bool  # 20+ characters of the base64 alphabet in a row


def views(text: str, vocabulary: frozenset[str] | None = None) -> Views:
    """Compute every view of ``text`` once.

    :param vocabulary: the only words the caller looks up (``wordset`` and ``raw_words`` keep just those,
        which is cheaper than a set of every word); ``None``: keep every word.
    """
    lowered = text.lower()
    folded: str | None = None
    base = lowered
    if not text.isascii():
        candidate = fold(text)
        if candidate != text:
            folded = candidate
            base = " ".join(candidate.lower().split())
    words, raw, changed, joined, base64_run = words_view(base)
    wordset = frozenset(words) if vocabulary is None else vocabulary.intersection(words)
    if changed:
        raw_words = frozenset(raw) if vocabulary is None else vocabulary.intersection(raw)
    else:
        raw_words = wordset
    form = "homoglyph" if folded is not None else ("obfuscated" if changed else "plain")
    return Views(
        text,
        lowered,
        folded,
        None if folded is None else base,
        words,
        form,
        joined,
        wordset,
        raw_words,
        base64_run,
    )
