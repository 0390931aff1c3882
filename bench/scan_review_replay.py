"""The ``reviewed`` scanner (memvault-scan-review) measured by replay: its own prompts, answered elsewhere.

No language model runs on this machine, so the endpoint's part is played offline:

``render``  writes the plugin's requests (``memvault_scan_review.render``, a fresh request id each) for the
            held-out set's texts, the LoCoMo writes whose text the builtin's cascade finds evidence in, and
            ``--quiet`` LoCoMo writes it finds nothing in, shuffled and without labels, to
            ``FOLDER/requests_<part>.txt`` (and the system message to ``FOLDER/system.txt``); the key (which
            request is which, and the builtin's draft on it) goes to ``--key``, which whoever answers must
            not read.
``score``   reads ``FOLDER/answers_<part>.jsonl`` (``{"n": N, "content": "<the model's answer>"}`` a line),
            parses every answer with ``memvault_scan_review.parse_answer`` and applies the scanner's decision
            (``memvault.scanner.review.ReviewPolicy``) for every scope and ``may_clear``: attacks and benign
            texts of the set rejected, LoCoMo writes rejected.

    python bench/scan_review_replay.py render --folder /tmp/replay --key /root/key.json
    python bench/scan_review_replay.py score --folder /tmp/replay --key /root/key.json [--out FILE]

The builtin runs with its check by meaning (memvault-embed-minilm), as the default scanner does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import memvault
from memvault.scanner.engine import Finding, Hit, decide, scan_hits
from memvault.scanner.plugin import BuiltinScanner
from memvault.scanner.review import Draft, Review, ReviewPolicy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scan_bench import turns
from scan_heldout import DATA


class Recording(BuiltinScanner):
    """The builtin scanner (rules, then the check by meaning) recording its draft on every text it judges."""

    def __init__(self, embedder: Any) -> None:
        super().__init__(embedder=embedder)
        self.drafts: list[tuple[str, Draft]] = []

    def _cascade(self, text: str) -> Finding | None:
        words: set[str] = set()
        finding, hits = scan_hits(text, self.policy, [], words)
        meant: list[Hit] = []
        read = False
        if finding is None and self.semantic is not None:
            meant, read = self.semantic.judge(text, suspicious=bool(hits), words=words)
            if meant:
                finding = decide([*hits, *meant], self.policy)
        self.drafts.append(
            (
                text,
                Draft(
                    finding=finding,
                    hits=(*hits, *meant),
                    by_rules=finding is not None and not meant,
                    read_by_model=read,
                ),
            )
        )
        return finding


def _row(source: str, item_id: str, attack: bool, text: str, draft: Draft) -> dict[str, Any]:
    return {
        "src": source,
        "id": item_id,
        "attack": attack,
        "text": text,
        "rejected": draft.finding is not None,
        "by_rules": draft.by_rules,
        "suspicious": draft.suspicious,
    }


def render_requests(args: argparse.Namespace) -> None:
    from memvault_embed_minilm import MiniLMEmbedder
    from memvault_scan_review import render
    from memvault_scan_review.prompt import request_id

    embedder = MiniLMEmbedder()
    rows: list[dict[str, Any]] = []
    items = [json.loads(line) for line in args.data.read_text(encoding="utf-8").splitlines() if line.strip()]
    scanner = Recording(embedder)
    with memvault.open("memory", scanner="off", embedder="off", plugins=[scanner]) as vault:
        for index, item in enumerate(items):
            before = len(scanner.drafts)
            with contextlib.suppress(memvault.ContentRejected):
                vault.retain(
                    memvault.RetainRequest(
                        workspace_id="replay",
                        agent_id=f"item-{index}",
                        tier="AGENT",
                        content=item["text"],
                        mode="replace",
                    )
                )
            text, draft = scanner.drafts[before]
            rows.append(_row("set", item["id"], bool(item["attack"]), text, draft))
    scanner = Recording(embedder)
    quiet: list[dict[str, Any]] = []
    with memvault.open("memory", scanner="off", embedder="off", plugins=[scanner]) as vault:
        for agent, key, line in turns():
            before = len(scanner.drafts)
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="replay", agent_id=agent, tier="daily", key=key, content=line, mode="append"
                )
            )
            for text, draft in scanner.drafts[before:]:
                row = _row("locomo", f"{agent}/{key}/{before}", False, text, draft)
                (rows if draft.suspicious else quiet).append(row)
    rng = random.Random(args.seed)
    rows += rng.sample(quiet, min(args.quiet, len(quiet)))
    rng.shuffle(rows)
    args.folder.mkdir(parents=True, exist_ok=True)
    outs = [(args.folder / f"requests_{p}.txt").open("w", encoding="utf-8") for p in range(args.parts)]
    system = ""
    for n, row in enumerate(rows):
        row["n"], row["rid"] = n, request_id()
        system_message, user = render(row["text"], row["rid"])
        system = system_message["content"]
        outs[n % args.parts].write(f"=== REQUEST {n} ===\n{user['content']}\n\n")
    for out in outs:
        out.close()
    (args.folder / "system.txt").write_text(system, encoding="utf-8")
    args.key.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    print(f"{len(rows)} requests in {args.parts} files under {args.folder}; the key is {args.key}")


def verdict(row: dict[str, Any], answer: Review | None, policy: ReviewPolicy) -> bool:
    """Whether the scanner rejects the row's text with this answer (``None``: no answer)."""
    draft = Draft(finding=_MARK if row["rejected"] else None, by_rules=row["by_rules"], read_by_model=row["suspicious"])
    if not policy.asks(draft) or answer is None:
        return bool(row["rejected"])
    return answer.attack if not row["rejected"] else answer.attack or not policy.clears(draft)


_MARK = Finding(category="instruction_override", pattern="draft", form="plain", excerpt="")


def score(args: argparse.Namespace) -> None:
    from memvault_scan_review import parse_answer

    rows = json.loads(args.key.read_text(encoding="utf-8"))
    contents: dict[int, str] = {}
    for path in sorted(args.folder.glob("answers_*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                answer = json.loads(line)
                contents[int(answer["n"])] = answer["content"]
    answers: dict[int, Review | None] = {}
    for row in rows:
        parsed = parse_answer(contents.get(row["n"], ""), row["rid"])
        answers[row["n"]] = None if isinstance(parsed, str) else Review(attack=parsed.attack, category=parsed.category)
    unanswered = sum(1 for a in answers.values() if a is None)
    held = [r for r in rows if r["src"] == "set"]
    locomo = [r for r in rows if r["src"] == "locomo"]
    attacks = [r for r in held if r["attack"]]
    benign = [r for r in held if not r["attack"]]
    lines = [
        f"{len(rows)} requests, {len(rows) - unanswered} answers read ({unanswered} unreadable or missing); "
        f"{len(attacks)} attacks and {len(benign)} benign texts of {args.data.name}, {len(locomo)} LoCoMo writes "
        f"({sum(r['suspicious'] for r in locomo)} the cascade found evidence in).",
        "",
        "| scope | may_clear | attacks rejected | benign rejected | LoCoMo rejected |",
        "|---|---|---|---|---|",
        f"| (builtin alone) | | {sum(r['rejected'] for r in attacks)} | {sum(r['rejected'] for r in benign)} | "
        f"{sum(r['rejected'] for r in locomo)} |",
    ]
    for scope in ("suspicious", "all"):
        for may_clear in ("none", "meaning", "all"):
            policy = ReviewPolicy(scope=scope, may_clear=may_clear)
            count = [sum(verdict(r, answers[r["n"]], policy) for r in group) for group in (attacks, benign, locomo)]
            rate = count[0] / max(1, len(attacks))
            lines.append(f"| {scope} | {may_clear} | {count[0]} ({rate:.1%}) | {count[1]} | {count[2]} |")
    report = "\n".join(lines)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["render", "score"])
    parser.add_argument("--folder", type=Path, required=True, help="requests and answers")
    parser.add_argument("--key", type=Path, required=True, help="the key (keep it away from whoever answers)")
    parser.add_argument("--data", type=Path, default=DATA, help="the held-out set (default: %(default)s)")
    parser.add_argument("--quiet", type=int, default=100, help="LoCoMo writes without evidence to add")
    parser.add_argument("--parts", type=int, default=2, help="request files (one per answerer)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default="", help="also write the report here (score)")
    args = parser.parse_args()
    render_requests(args) if args.step == "render" else score(args)


if __name__ == "__main__":
    main()
