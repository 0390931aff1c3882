"""Layer 5: the scanner's second opinion by meaning (issue 36).

The rules (:mod:`memvault.scanner.engine`) match phrasings; an attacker
paraphrases. When the vault has an embedder (:class:`memvault.contract.embedding.Embedder`),
:class:`SemanticCheck` also compares what is written with known attack
intents: the plain attacks of the tuning corpus, per category, and the benign
look-alikes as anchors, embedded once by ``core/scripts/build_scan_intents.py``
and shipped as package data (``scanner/data/intents/``: a float16 ``.npy`` and
a JSON index naming the model, the categories and each text's digest).

A text is cut into windows (a line, or a long line's sentences grouped up to
:data:`WINDOW_CHARS`). The cascade keeps it cheap: a window reaches the model
only when the rules found something in the text below its threshold, or the
window holds words of the intents' vocabulary (:data:`STRONG_WORDS`, or two of
:data:`WEAK_WORDS`); at most :data:`MAX_WINDOWS` windows a text (when more pass,
the ones the character model finds most like an attack), each verdict cached by
the window's text. A window is judged by its nearest attack and its
nearest benign anchor: it must be close to an attack intent *and* closer to it
than to any benign look-alike by a margin. A confident match is a hit of weight
1.0 (rejects alone, pattern ``semantic:<category>``); a moderate one weighs
0.5 and rejects only with a rule of the same category.

The shipped model (``all-MiniLM-L6-v2``) was trained on English: a window it
cannot read (letters mostly outside ASCII, or six words or more and none of
:data:`ENGLISH_WORDS`) is not embedded but judged by the trained character
model of :mod:`memvault.scanner.learned` (and the rules' per-language data);
a window it embeds is also judged by the trained head over its vector, when
the intents found no strong match.
When the vault's embedder is another model, the check is skipped and one
WARNING on ``memvault.scanner`` says so (vectors of two models are never
compared, contract P38).

May import: :mod:`memvault.contract`, :mod:`memvault.scanner.engine`, :mod:`memvault.scanner.learned`,
:mod:`memvault.scanner.normalise` and :mod:`memvault.scanner.rules`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from importlib import resources
from typing import Any, Final

from attrs import frozen

from memvault.contract.embedding import Embedder
from memvault.contract.forking import after_fork_in_child
from memvault.scanner.engine import Hit
from memvault.scanner.learned import CharModel, HeadModel, head_verdict, load_char_model, load_head_model
from memvault.scanner.normalise import fold
from memvault.scanner.rules import CASCADE_STRONG_WORDS, CASCADE_WEAK_WORDS

__all__ = [
    "MAX_WINDOWS",
    "MIN_WINDOW_CHARS",
    "MODERATE_MARGIN",
    "MODERATE_SIMILARITY",
    "PATTERN_PREFIX",
    "STRONG_MARGIN",
    "STRONG_SIMILARITY",
    "STRONG_WORDS",
    "WEAK_WORDS",
    "WINDOW_CHARS",
    "Intents",
    "SemanticCheck",
    "as_read",
    "english",
    "load_intents",
    "most_suspicious",
    "windows",
]

log = logging.getLogger("memvault.scanner")

#: A semantic hit's pattern id is this prefix and the category: ``semantic:instruction_override``.
PATTERN_PREFIX: Final = "semantic:"
#: A window is at most this many characters (a line, or a long line's sentences grouped).
WINDOW_CHARS: Final = 300
#: Windows shorter than this (stripped) are not judged: too little to mean anything.
MIN_WINDOW_CHARS: Final = 16
#: At most this many windows of one text reach the model (of those the cascade lets through, the ones the
#: character model finds most like an attack).
MAX_WINDOWS: Final = 6
#: A window this close to an attack intent, and closer to it than to every benign anchor by
#: :data:`STRONG_MARGIN`, is a hit of weight 1.0.
#: Chosen on the tuning corpus left one out (each text judged against the intents without itself): the
#: loosest pair with no benign look-alike and no LoCoMo turn over it (66 of 213 attacks alone, 11 of the
#: 50 paraphrases; 0.65 and 0.15: 43; 0.55 and 0.10: 95, but 4 look-alikes over it).
STRONG_SIMILARITY: Final = 0.60
STRONG_MARGIN: Final = 0.15
#: ... and this close, by this margin, a hit of weight 0.5 (rejects only with a rule of its category).
MODERATE_SIMILARITY: Final = 0.50
MODERATE_MARGIN: Final = 0.10
#: Window verdicts one check keeps (by the window's text).
CACHE_SIZE: Final = 4096
#: Letters outside ASCII above this share: the window is left to the rules (the model reads English).
_MAX_FOREIGN: Final = 0.10


#: One of these words lets a window through the cascade (see :data:`memvault.scanner.rules.CASCADE_STRONG_WORDS`).
STRONG_WORDS: Final = CASCADE_STRONG_WORDS
#: Two of these words (or one and one of :data:`STRONG_WORDS`) let a window through.
WEAK_WORDS: Final = CASCADE_WEAK_WORDS
#: Every byte but a-z and A-Z becomes a space and A-Z become a-z: ``bytes.split`` then yields the lowered
#: words (C speed, no regex; the vocabulary is ASCII: see :func:`_letters` for the text's other characters).
_NON_LETTERS: Final = bytes((b | 0x20) if chr(b).isascii() and chr(b).isalpha() else 32 for b in range(256))
#: A character outside ASCII that is neither a letter nor a digit: a dash, a middle dot, a space of another
#: width, a curly quote. It parts two words; a letter outside ASCII is dropped from its word instead.
_NOT_ASCII_SEPARATOR: Final = re.compile(r"[^\x00-\x7f\w]")
_STRONG: Final = frozenset(word.encode("ascii") for word in STRONG_WORDS)
_WEAK: Final = frozenset(word.encode("ascii") for word in WEAK_WORDS)
#: The end of a sentence: its stop, then spaces, or the dashes or dots a line written joined has in their
#: place (not a slash, a quote or a bracket: "https://host" is not two sentences). At most three of them: an
#: unbounded run was tried to its end from every stop before it, quadratic in a line of ".-.-.-".
_SENTENCE_END: Final = re.compile(r"(?<=[.!?;:])(?:\s+|[^\w\s'\"/\\()\[\]{}<>]{1,3}(?=[^\W\d_]))")
_NOT_ASCII: Final = re.compile(r"[^\x00-\x7f]")
#: Markup, JSON, YAML and assignments: a window like this without English words is code, which the sentence
#: model still reads (forged tool calls are code), not another language.
_CODE: Final = re.compile(r'[{}<>=]|^\s*-\s|":|\w:\s*$', re.MULTILINE)


@frozen(kw_only=True)
class Intents:
    """The shipped intent vectors: rows of attacks (their category) and benign anchors, one model."""

    model_id: str
    dimensions: int
    categories: tuple[str, ...]  # per attack row
    attacks: Any  # float32, (len(categories), dimensions), unit rows
    benign: Any  # float32, (anchors, dimensions), unit rows
    corpus_sha256: str


@functools.cache
def load_intents() -> Intents:
    """The intents shipped in ``memvault/scanner/data/intents/`` (read once per process)."""
    import numpy as np

    folder = resources.files("memvault.scanner") / "data" / "intents"
    index = json.loads((folder / "intents.json").read_text(encoding="utf-8"))
    with resources.as_file(folder / "intents.npy") as path:
        vectors = np.load(path, allow_pickle=False).astype(np.float32)
    rows = index["rows"]
    if vectors.shape != (len(rows), index["dimensions"]):
        raise ValueError(f"intents.npy has shape {vectors.shape}, its index lists {len(rows)} rows")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    attack = [i for i, row in enumerate(rows) if row["category"] != "benign"]
    benign = [i for i, row in enumerate(rows) if row["category"] == "benign"]
    return Intents(
        model_id=index["model_id"],
        dimensions=int(index["dimensions"]),
        categories=tuple(rows[i]["category"] for i in attack),
        attacks=vectors[attack],
        benign=vectors[benign],
        corpus_sha256=index["corpus_sha256"],
    )


def _word_list(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: The commonest English words that are not also common words of another language written in Latin
#: letters ("a", "no", "do", "me", "as" are Spanish, Portuguese or Italian too): the check by meaning reads
#: a window of six words or more with none of them as not English and gives it to the trained char model
#: (:mod:`memvault.scanner.learned`) instead of the sentence model.
ENGLISH_WORDS: Final = _word_list(
    """
    the and or of to for with is are were been being it its this that these those you your yours we my
    our she they them his her their not does did have has had would could should from by but if about
    what which who when where there here just any every some than then into onto over after before
    because how why
    """
)

_ENGLISH: Final = frozenset(word.encode("ascii") for word in ENGLISH_WORDS)
#: The ten commonest of :data:`ENGLISH_WORDS`, as whole words of the lowered letters padded with a space: one
#: search finds one in most English lines, which then need no split into words (half :func:`_foreign`'s cost
#: on LoCoMo's turns; the whole list as one pattern is slower than the split).
_COMMON_ENGLISH: Final = re.compile(rb" (?:the|to|and|you|it|is|that|of|for|this) ")
#: A window of at least this many words none of which is one of :data:`ENGLISH_WORDS` is not read as English
#: (an English sentence that long without "the", "and", "you", "to" and the like is rare).
_MIN_WORDS: Final = 6


def _letters(text: str) -> bytes:
    """``text``'s ASCII letters lowered and every other character a space: ``split`` yields its words.

    A character outside ASCII parts two words unless it is a letter or a digit, which is dropped from its
    word ("Straße" is one word, "strae"). Before, every character outside ASCII was dropped, so words joined
    by an em dash or a thin space ran together and a paraphrase written so went past the cascade.
    """
    if text.isascii():
        return text.encode("ascii").translate(_NON_LETTERS)
    return _NOT_ASCII_SEPARATOR.sub(" ", text).encode("ascii", "ignore").translate(_NON_LETTERS)


def _foreign(text: str) -> bool:
    """Whether the sentence model cannot read ``text``: no letters, mostly letters outside ASCII, or six
    words or more, none of the commonest English words and no markup or code. At C speed but for the
    characters outside ASCII (curly quotes, emoji and the like are not letters)."""
    if text.isascii():  # most text: its letters at C speed (:func:`_letters`, without the call)
        lowered = text.encode("ascii").translate(_NON_LETTERS)
    else:
        lowered = _letters(text)
        outside = sum(ch.isalpha() for ch in _NOT_ASCII.findall(text))
        letters = outside + len(lowered) - lowered.count(b" ")
        if not letters or outside / letters > _MAX_FOREIGN:
            return True
    if _COMMON_ENGLISH.search(b" " + lowered + b" ") is not None:
        return False  # one of the commonest English words: no need to split the words
    words = lowered.split()
    if not words:
        return True
    return len(words) >= _MIN_WORDS and _ENGLISH.isdisjoint(words) and _CODE.search(text) is None


def _has_letters(text: str) -> bool:
    """Whether ``text`` has a letter (a window the char model can judge)."""
    return any(ch.isalpha() for ch in text)


#: Characters between two letters that join them into one token for the model ("take-direction-from",
#: "your_orders"): a run of anything but a letter, a digit, a space or an apostrophe.
_JOINER: Final = re.compile(r"(?<=[^\W\d_])(?:[^\w\s']|_)+(?=[^\W\d_])")
_LETTER_RUN: Final = re.compile(r"[^\W\d_]+")
#: A window of at least this many letter runs, twice as many as its words between spaces, is written joined.
_MIN_JOINED: Final = 4


def _unjoined(text: str) -> str:
    """``text`` with a space between each two words when they are written joined ("Your-orders-were",
    "your_orders", em dashes, middle dots: at least twice as many runs of letters as words between spaces),
    unless it is code (markup, JSON, assignments: read as written)."""
    runs = len(_LETTER_RUN.findall(text))
    if runs >= _MIN_JOINED and 2 * len(text.split()) <= runs and _CODE.search(text) is None:
        return _JOINER.sub(" ", text)
    return text


#: A word, and a letter of ASCII beside one outside it in it: a word that may mix scripts ("password" with its
#: a in Cyrillic). Each word is tested on its own (one pattern for the word around the pair walked the rest of
#: a long word from every letter of it: quadratic).
_WORD: Final = re.compile(r"\w+")
_MIXED_PAIR: Final = re.compile(r"[A-Za-z][^\x00-\x7f]|[^\x00-\x7f][A-Za-z]")


def _unmixed(word: re.Match[str]) -> str:
    """A word of Latin letters and look-alikes of another script, folded (UTS #39's mixed script); a word of
    one script (with accents or without) as written."""
    text = word.group()
    if (
        not text.isascii()
        and _MIXED_PAIR.search(text) is not None
        and any(ch.isalpha() and "LATIN" not in unicodedata.name(ch, "LATIN") for ch in text if not ch.isascii())
    ):
        return fold(text)
    return text


def as_read(text: str) -> str:
    """A window in another language as the char model reads it, as a person reads it: words written joined
    parted (:func:`_unjoined`), and words that mix Latin letters with look-alikes of other scripts (Cyrillic,
    Greek) folded to ASCII, which leaves Russian or Greek words, and accented ones, as written. Before, an
    attack in Spanish with its words joined by dashes, or its a, e and o in Cyrillic, passed the char model.
    """
    if not text.isascii():
        text = _WORD.sub(_unmixed, text)
    return _unjoined(text)


def readable(text: str) -> str | None:
    """``text`` as the sentence model reads it when it is written in English in disguise, else ``None``.

    - Characters outside ASCII: the rules' fold (:func:`memvault.scanner.normalise.fold`: Cyrillic or Greek
      look-alikes mapped to ASCII, marks dropped, spaces of every width made plain), and a space for each
      other character outside ASCII that is not a letter (an em dash, a middle dot).
    - Words joined into one ("Your-orders-were-withdrawn", "your_orders"; at least twice as many runs of
      letters as words between spaces), not code (markup, JSON, assignments: read as written): a space
      between each two.

    The result counts only when it reads as English and has one of :data:`ENGLISH_WORDS`: a short line in
    Spanish or Vietnamese is not read as English for losing its accents. Before, a paraphrase with its a, e
    and o in Cyrillic was left to the char model as another language, and one with its words joined by
    dashes reached the sentence model as a few long tokens; both were stored.
    """
    seen = _unjoined(text if text.isascii() else _NOT_ASCII_SEPARATOR.sub(" ", fold(text)))
    if seen == text or _foreign(seen) or _ENGLISH.isdisjoint(_letters(seen).split()):
        return None
    return seen


def english(text: str) -> bool:
    """Whether the check by meaning reads ``text`` as English (the sentence model's), not for the char model."""
    return not _foreign(text) or readable(text) is not None


def windows(text: str) -> list[tuple[int, int]]:
    """The (start, end) of each window of ``text``: a line, or a long line's sentences grouped up to
    :data:`WINDOW_CHARS` (a sentence longer than that is cut)."""
    out: list[tuple[int, int]] = []
    start = 0
    for line in text.split("\n"):
        end = start + len(line)
        if len(line.strip()) >= MIN_WINDOW_CHARS:
            if len(line) <= WINDOW_CHARS:
                out.append((start, end))
            else:
                group_start = start
                position = start
                for match in _SENTENCE_END.finditer(line):
                    sentence_end = start + match.end()
                    if sentence_end - group_start > WINDOW_CHARS and position > group_start:
                        out.append((group_start, position))
                        group_start = position
                    position = sentence_end
                for cut in range(group_start, end, WINDOW_CHARS):
                    out.append((cut, min(end, cut + WINDOW_CHARS)))
        start = end + 1
    return [(s, e) for s, e in out if len(text[s:e].strip()) >= MIN_WINDOW_CHARS]


def most_suspicious(chars: CharModel, chosen: list[tuple[int, int, str]], limit: int) -> list[tuple[int, int, str]]:
    """Of ``chosen`` windows (start, end, text), the ``limit`` the char model finds most like an attack, in
    text order (among equal scores the earlier one): a cap on the windows a model embeds that an attack cannot
    hide behind ordinary windows."""
    if len(chosen) <= limit:
        return chosen
    attack = 1.0 - chars.batch_probabilities([w for _, _, w in chosen])[:, 0]
    ranked = sorted(range(len(chosen)), key=lambda i: -float(attack[i]))[:limit]  # stable: ties keep text order
    return [chosen[i] for i in sorted(ranked)]


def passes_cascade(window: str) -> bool:
    """Whether a window's words make it worth the model's time (:data:`STRONG_WORDS`, two of :data:`WEAK_WORDS`);
    a window outside ASCII is read folded as the rules read it (look-alike letters mapped to ASCII)."""
    words = set(_letters(window if window.isascii() else fold(window)).split())
    if not words.isdisjoint(_STRONG):
        return True
    return len(words & _WEAK) >= 2


class SemanticCheck:
    """One scanner's second opinion by meaning: windows of a text against the shipped intents.

    :param embedder: the vault's embedder (thread-safe).
    :param intents: the intent vectors (default: the shipped ones).
    :param head: the trained head over sentence vectors (default: the shipped one, when it was trained on
        ``embedder``'s model).
    :param chars: the trained character model (default: the shipped one).
    :param trained: ``False``: the intents alone, no trained model.
    """

    def __init__(
        self,
        embedder: Embedder,
        intents: Intents | None = None,
        head: HeadModel | None = None,
        chars: CharModel | None = None,
        trained: bool = True,
    ) -> None:
        self.embedder = embedder
        self.intents = intents if intents is not None else load_intents()
        self.usable = embedder.model_id == self.intents.model_id and embedder.dimensions == self.intents.dimensions
        #: The trained head over this model's sentence vectors (:mod:`memvault.scanner.learned`).
        self.head: HeadModel | None = None
        #: The trained char model: judges the windows the sentence model cannot read (not in English).
        self.chars: CharModel | None = None
        if trained:
            self.head = head if head is not None else load_head_model()
            if self.head.model_id != embedder.model_id:
                self.head = None
            self.chars = chars if chars is not None else load_char_model()
        self.windows_by_chars = 0
        self._cache: OrderedDict[str, tuple[str, float, float] | None] = OrderedDict()
        self._chars_cache: OrderedDict[str, tuple[str, float] | None] = OrderedDict()
        #: Per line: whether the char model finds an attack in a window of it (cleared when full).
        self._foreign_lines: dict[str, bool] = {}
        self._lock = threading.Lock()
        after_fork_in_child(self, _new_lock)
        self.texts = 0  # texts judged
        self.texts_reaching_model = 0  # texts with at least one window the cascade let through
        self.windows_embedded = 0
        if not self.usable:
            _warn_model(embedder.model_id, self.intents.model_id)

    def hits(self, text: str, suspicious: bool = False, words: AbstractSet[str] | None = None) -> list[Hit]:
        """Semantic hits for ``text``'s windows (none when the check is not usable).

        :param suspicious: the rules found something below threshold: every window reaches the model.
        :param words: the text's words the rules already looked up (:func:`memvault.scanner.engine.scan_hits`
            collects them), so the common case (no window can pass) costs two set intersections.
        """
        return self.judge(text, suspicious, words)[0]

    def judge(
        self, text: str, suspicious: bool = False, words: AbstractSet[str] | None = None
    ) -> tuple[list[Hit], bool]:
        """Like :meth:`hits`, and whether a model read a window of ``text`` (the sentence model one the
        cascade let through, or the char model one in another language)."""
        if not self.usable:
            return [], False
        if words is not None:
            whole = not words.isdisjoint(STRONG_WORDS) or len(words & WEAK_WORDS) >= 2
            if not whole and "_" in text:
                # The rules keep a name in snake_case whole: words joined by underscores are read here.
                whole = passes_cascade(text)
        else:
            whole = passes_cascade(text)
        if not suspicious and not whole and not self._flags_a_foreign_window(text):
            # No window of the text can pass the cascade if the whole does not, and the char model finds no
            # attack in any line the sentence model cannot read (anywhere, not only the last line: an attack
            # between two English lines went unjudged): the common case costs a split and a lookup a line.
            with self._lock:
                self.texts += 1
            return [], False
        chosen: list[tuple[int, int, str]] = []
        foreign: list[tuple[int, int, str]] = []
        found: list[Hit] = []
        for start, end in windows(text):
            window = text[start:end].strip()
            folded = readable(window)
            if folded is not None:
                window = folded  # English in disguise: the model reads it as a person does
            elif _foreign(window):
                # The sentence model reads English: the char model judges the window (one with letters).
                if self.chars is not None and _has_letters(window):
                    foreign.append((start, end, as_read(window)))
                continue
            if suspicious or passes_cascade(window):
                chosen.append((start, end, window))
        chosen = self._most_suspicious(chosen)
        # Every such window, in one batch (a long write in another language costs about what the rules do).
        for (start, end, window), by_chars in zip(foreign, self._by_chars([w for _, _, w in foreign]), strict=True):
            if by_chars is not None:
                found.append(_hit(by_chars[0], "characters", window, (start, end), 1.0, by_chars[1]))
        with self._lock:
            self.texts += 1
            if chosen:
                self.texts_reaching_model += 1
        if not chosen:
            return found, bool(foreign)
        verdicts = self._judge([w for _, _, w in chosen])
        for (start, end, window), verdict in zip(chosen, verdicts, strict=True):
            if verdict is None:
                continue
            category, similarity, margin = verdict
            if margin < 0:  # the trained head's verdict: ``similarity`` is its probability
                found.append(_hit(category, "meaning", window, (start, end), 1.0, similarity))
                continue
            weight = 1.0 if similarity >= STRONG_SIMILARITY and margin >= STRONG_MARGIN else 0.5
            found.append(
                Hit(
                    category=category,
                    pattern=PATTERN_PREFIX + category,
                    form="meaning",
                    excerpt=_excerpt(window, similarity, margin),
                    span=(start, end),
                    weight=weight,
                )
            )
        return found, True

    def _flags_a_foreign_window(self, text: str) -> bool:
        """Whether the char model finds an attack in a window of ``text`` it judges (one the sentence model
        cannot read), in any line: its verdicts are cached by window, and each line's answer too (an
        append's tail repeats the lines before it)."""
        if self.chars is None:
            return False
        known = self._foreign_lines
        for line in text.split("\n"):
            if len(line) < MIN_WINDOW_CHARS:
                continue  # no window
            flagged = known.get(line)
            if flagged is None:
                if len(line) <= WINDOW_CHARS:  # one window (the common case: no list, no generator)
                    window = line.strip()
                    flagged = (
                        len(window) >= MIN_WINDOW_CHARS
                        and _foreign(window)
                        and readable(window) is None
                        and _has_letters(window)
                        and self._by_chars([as_read(window)])[0] is not None
                    )
                else:  # several, as :func:`windows` cuts a long line
                    cut = [line[s:e].strip() for s, e in windows(line)]
                    foreign = [as_read(w) for w in cut if _foreign(w) and readable(w) is None and _has_letters(w)]
                    flagged = any(v is not None for v in self._by_chars(foreign))
                if len(known) >= CACHE_SIZE:
                    known.clear()
                known[line] = flagged
            if flagged:
                return True
        return False

    def _most_suspicious(self, chosen: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
        """At most :data:`MAX_WINDOWS` of the windows the cascade let through, in text order: when there are
        more, the ones the char model finds most like an attack (one batch: a few numpy passes), not the
        first ones, which let an attack through behind six ordinary windows with the cascade's words."""
        if len(chosen) <= MAX_WINDOWS:
            return chosen
        if self.chars is None:
            return chosen[:MAX_WINDOWS]
        return most_suspicious(self.chars, chosen, MAX_WINDOWS)

    def _by_chars(self, texts: Sequence[str]) -> list[tuple[str, float] | None]:
        """The char model's verdicts on windows (cached with the others, by the window's text); the windows
        not in the cache are judged in one batch."""
        if not texts or self.chars is None:
            return [None] * len(texts)
        keys = ["c:" + hashlib.sha256(t.encode("utf-8", "surrogatepass")).hexdigest() for t in texts]
        results: dict[str, tuple[str, float] | None] = {}
        with self._lock:
            for key in keys:
                if key in self._chars_cache:
                    self._chars_cache.move_to_end(key)
                    results[key] = self._chars_cache[key]
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in results}
        verdicts = self.chars.verdicts(list(missing.values()))
        with self._lock:
            self.windows_by_chars += len(missing)
            for key, verdict in zip(missing, verdicts, strict=True):
                results[key] = verdict
                self._chars_cache[key] = verdict
            while len(self._chars_cache) > CACHE_SIZE:
                self._chars_cache.popitem(last=False)
        return [results[k] for k in keys]

    def _judge(self, texts: Sequence[str]) -> list[tuple[str, float, float] | None]:
        """Per window: (category, similarity, margin) when it matches an intent, else ``None``; cached."""
        keys = [hashlib.sha256(t.encode("utf-8", "surrogatepass")).hexdigest() for t in texts]
        results: dict[str, tuple[str, float, float] | None] = {}
        with self._lock:
            for key in keys:
                if key in self._cache:
                    self._cache.move_to_end(key)
                    results[key] = self._cache[key]
        missing = [(k, t) for k, t in zip(keys, texts, strict=True) if k not in results]
        if missing:
            import numpy as np

            vectors = np.asarray(self.embedder.embed([t for _, t in missing]), dtype=np.float32)
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            to_attacks = vectors @ self.intents.attacks.T
            to_benign = vectors @ self.intents.benign.T
            by_head = self.head.probabilities(vectors) if self.head is not None else None
            if by_head is not None and self.head is not None and self.head.blend_chars and self.chars is not None:
                by_head = (by_head + self.chars.batch_probabilities([t for _, t in missing])) / 2
            with self._lock:
                self.windows_embedded += len(missing)
                for row, (key, _) in enumerate(missing):
                    best = int(to_attacks[row].argmax())
                    similarity = float(to_attacks[row, best])
                    margin = similarity - float(to_benign[row].max())
                    verdict = None
                    if similarity >= MODERATE_SIMILARITY and margin >= MODERATE_MARGIN:
                        verdict = (self.intents.categories[best], round(similarity, 3), round(margin, 3))
                    strong = similarity >= STRONG_SIMILARITY and margin >= STRONG_MARGIN
                    # The head is asked whenever the intents' verdict is not a strong one: a moderate match
                    # (half weight: it rejects only beside a rule) must not hide the head's full verdict.
                    if self.head is not None and by_head is not None and (verdict is None or not strong):
                        learned = head_verdict(self.head, by_head[row])
                        if learned is not None:  # a negative margin marks the head's verdict
                            verdict = (learned[0], round(learned[1], 3), -1.0)
                    results[key] = verdict
                    self._cache[key] = verdict
                    while len(self._cache) > CACHE_SIZE:
                        self._cache.popitem(last=False)
        return [results[k] for k in keys]


def _shown(window: str, limit: int = 80) -> str:
    shown = "".join(ch if ch.isprintable() else f"<U+{ord(ch):04X}>" for ch in window[:limit])
    return shown + "..." if len(window) > limit else shown


def _excerpt(window: str, similarity: float, margin: float) -> str:
    return (
        f"{_shown(window)} (similarity {similarity:.2f} to a known attack, {margin:.2f} above the nearest benign text)"
    )


def _hit(category: str, form: str, window: str, span: tuple[int, int], weight: float, probability: float) -> Hit:
    """A trained model's hit (``form``: "meaning" for the head, "characters" for the char model)."""
    model = "sentence" if form == "meaning" else "character"
    return Hit(
        category=category,
        pattern=PATTERN_PREFIX + category,
        form=form,
        excerpt=f"{_shown(window)} (the trained {model} classifier: {probability:.2f} {category})",
        span=span,
        weight=weight,
    )


def _new_lock(check: SemanticCheck) -> None:
    """In a forked child (P35): the counters' and caches' lock, not one held by a thread the child lost."""
    check._lock = threading.Lock()


_WARNED: set[tuple[str, str]] = set()
_WARNED_LOCK = threading.Lock()


def _new_warned_lock() -> None:
    global _WARNED_LOCK
    _WARNED_LOCK = threading.Lock()  # in a forked child (P35)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_warned_lock)


def _warn_model(running: str, shipped: str) -> None:
    """One WARNING per process and pair of models: the check is skipped, not silently."""
    with _WARNED_LOCK:
        if (running, shipped) in _WARNED:
            return
        _WARNED.add((running, shipped))
    log.warning(
        "the scanner's check by meaning is off: the vault's embedder is model %r but the shipped attack "
        "intents were embedded with %r (vectors of two models are never compared); the rules still run. "
        "Use the default embedder (memvault-embed-minilm), or rebuild the intents for this model with "
        "core/scripts/build_scan_intents.py",
        running,
        shipped,
    )
