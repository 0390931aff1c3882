"""The ``reviewed`` scanner (memvault-scan-review) measured by replay: its own prompts, answered elsewhere.

The endpoint's part is played by a real model (``ask``) or offline, by whoever answers the rendered requests:

``render``  writes the plugin's requests (``memvault_scan_review.render``, a fresh request id each) for the
            held-out set's texts, the LoCoMo writes whose text a cascade (the builtin's, and the multilingual
            scanner's when it is installed) finds evidence in, and ``--quiet`` LoCoMo writes none finds
            anything in (``--no-locomo``: the set's texts only), shuffled and without labels, to
            ``FOLDER/requests_<part>.txt`` (and the system message to ``FOLDER/system.txt``); the key (which
            request is which, and the builtin's draft on it) goes to ``--key``, which whoever answers must
            not read.
``ask``     sends the requests of ``--key`` to a real endpoint instead (``--url``, ``--model``, as ``[scan.review]``
            names them; ``--api-key-env``), the plugin's way (the same body, timeout and parsing),
            ``--concurrency`` at once, and writes its answers as ``FOLDER/answers_0.jsonl``, with each
            request's seconds, for ``score``. It runs ``memvault doctor``'s probe first and stops when the
            model judges a plain text wrong (``--no-probe`` asks all the same).
``score``   reads ``FOLDER/answers_<part>.jsonl`` (``{"n": N, "content": "<the model's answer>"}`` a line),
            parses every answer with ``memvault_scan_review.parse_answer`` and applies the scanner's decision
            (``memvault.scanner.review.ReviewPolicy``) for every scope and ``may_clear``: attacks and benign
            texts of the set rejected, LoCoMo writes rejected, per cascade.

    python bench/scan_review_replay.py render --folder /tmp/replay --key /root/key.json
    python bench/scan_review_replay.py ask --folder /tmp/replay --key /root/key.json --url URL --model NAME \
        [--concurrency 4]
    python bench/scan_review_replay.py score --folder /tmp/replay --key /root/key.json [--out FILE]

The builtin runs with its check by meaning (memvault-embed-minilm), as the default scanner does; the multilingual
scanner (memvault-scan-multilingual) with its e5 judge. Run with ``OMP_NUM_THREADS=1``.
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
from memvault.scanner.engine import PATTERN_IDS, Finding, Hit, decide, scan_hits
from memvault.scanner.plugin import BuiltinScanner
from memvault.scanner.review import Draft, Review, ReviewPolicy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scan_bench import turns
from scan_heldout import DATA


def recording(base: type[BuiltinScanner]) -> type[BuiltinScanner]:
    """A subclass of scanner class ``base`` recording its cascade's draft on every text it judges."""

    class Recording(base):  # type: ignore[valid-type,misc]
        drafts: list[tuple[str, Draft]]

        def _cascade(self, text: str) -> Finding | None:
            extra = [hit for classify in self.classifiers for hit in classify(text)]
            words: set[str] = set()
            finding, hits = scan_hits(text, self.policy, extra, words)
            meant: list[Hit] = []
            read = False
            if finding is None and self.semantic is not None:
                meant, read = self.semantic.judge(text, suspicious=bool(hits), words=words)
                if meant:
                    finding = decide([*hits, *meant], self.policy)
            by_rules = finding is not None and (
                decide([h for h in (*hits, *finding.hits) if h.pattern in PATTERN_IDS], self.policy) is not None
            )
            self.drafts.append(
                (text, Draft(finding=finding, hits=(*hits, *meant), by_rules=by_rules, read_by_model=read))
            )
            return finding

    return Recording


def scanners(embedder: Any) -> dict[str, BuiltinScanner]:
    """A recording scanner per cascade measured: the builtin, and the multilingual one when installed."""
    made: dict[str, BuiltinScanner] = {"builtin": recording(BuiltinScanner)(embedder=embedder)}
    try:
        from memvault_scan_multilingual import MultilingualScanner
    except ImportError:
        return made
    made["multilingual"] = recording(MultilingualScanner)(embedder=embedder)
    return made


def _draft(draft: Draft) -> dict[str, bool]:
    return {"rejected": draft.finding is not None, "by_rules": draft.by_rules, "suspicious": draft.suspicious}


def _judged(scanner: BuiltinScanner, vault: memvault.Vault, request: memvault.RetainRequest) -> list[tuple[str, Draft]]:
    drafts: list[tuple[str, Draft]] = scanner.drafts  # type: ignore[attr-defined]
    before = len(drafts)
    with contextlib.suppress(memvault.ContentRejected):
        vault.retain(request)
    return drafts[before:]


def render_requests(args: argparse.Namespace) -> None:
    from memvault_embed_minilm import MiniLMEmbedder
    from memvault_scan_review import render
    from memvault_scan_review.prompt import request_id

    embedder = MiniLMEmbedder()
    items = [json.loads(line) for line in args.data.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows: list[dict[str, Any]] = [
        {"src": "set", "id": item["id"], "attack": bool(item["attack"]), "text": item["text"], "drafts": {}}
        for item in items
    ]
    locomo: dict[str, dict[str, Any]] = {}
    for name, scanner in scanners(embedder).items():
        scanner.drafts = []  # type: ignore[attr-defined]
        with memvault.open("memory", scanner="off", embedder="off", plugins=[scanner]) as vault:
            for index, row in enumerate(rows):
                request = memvault.RetainRequest(
                    workspace_id="replay", agent_id=f"item-{index}", tier="AGENT", content=row["text"], mode="replace"
                )
                [(_, draft)] = _judged(scanner, vault, request)
                row["drafts"][name] = _draft(draft)
            for agent, key, line in () if args.no_locomo else turns():
                request = memvault.RetainRequest(
                    workspace_id="replay", agent_id=agent, tier="daily", key=key, content=line, mode="append"
                )
                for text, draft in _judged(scanner, vault, request):
                    entry = locomo.setdefault(text, {"src": "locomo", "id": agent, "attack": False, "text": text})
                    entry.setdefault("drafts", {})[name] = _draft(draft)
    suspicious = [e for e in locomo.values() if any(d["suspicious"] for d in e["drafts"].values())]
    quiet = [e for e in locomo.values() if not any(d["suspicious"] for d in e["drafts"].values())]
    rng = random.Random(args.seed)
    rows += suspicious + rng.sample(quiet, min(args.quiet, len(quiet)))
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


def verdict(draft: dict[str, bool], answer: Review | None, policy: ReviewPolicy) -> bool:
    """Whether the scanner rejects a text with this draft and answer (``None``: no answer)."""
    shape = Draft(
        finding=_MARK if draft["rejected"] else None, by_rules=draft["by_rules"], read_by_model=draft["suspicious"]
    )
    if not policy.asks(shape) or answer is None:
        return draft["rejected"]
    return answer.attack if not draft["rejected"] else answer.attack or not policy.clears(shape)


_MARK = Finding(category="instruction_override", pattern="draft", form="plain", excerpt="")


def score(args: argparse.Namespace) -> None:
    from memvault_scan_review import parse_answer

    rows = json.loads(args.key.read_text(encoding="utf-8"))
    contents: dict[int, str] = {}
    seconds: list[float] = []
    for path in sorted(args.folder.glob("answers_*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                answer = json.loads(line)
                contents[int(answer["n"])] = answer["content"]
                if "seconds" in answer:  # answered by ``ask``, from a real endpoint
                    seconds.append(float(answer["seconds"]))
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
        f"{len(attacks)} attacks and {len(benign)} benign texts of {args.data.name}, {len(locomo)} LoCoMo writes.",
    ]
    if seconds:
        ordered = sorted(seconds)
        lines.append(
            f"The endpoint took {ordered[len(ordered) // 2]:.2f} s a request at the median, "
            f"{ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]:.2f} s at p90."
        )
    for name in sorted({name for r in rows for name in r["drafts"]}):
        lines += [
            "",
            f"The {name} scanner's cascade:",
            "",
            "| scope | may_clear | attacks rejected | benign rejected | LoCoMo rejected |",
            "|---|---|---|---|---|",
        ]
        alone = [sum(r["drafts"][name]["rejected"] for r in group) for group in (attacks, benign, locomo)]
        lines.append(f"| ({name} alone) | | {alone[0]} | {alone[1]} | {alone[2]} |")
        for scope in ("suspicious", "all"):
            for may_clear in ("none", "meaning", "all"):
                policy = ReviewPolicy(scope=scope, may_clear=may_clear)
                count = [
                    sum(verdict(r["drafts"][name], answers[r["n"]], policy) for r in group)
                    for group in (attacks, benign, locomo)
                ]
                rate = count[0] / max(1, len(attacks))
                lines.append(f"| {scope} | {may_clear} | {count[0]} ({rate:.1%}) | {count[1]} | {count[2]} |")
    report = "\n".join(lines)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n", encoding="utf-8")


def ask(args: argparse.Namespace) -> None:
    """Each request of the key, sent to a real endpoint as the plugin sends it (``--concurrency`` at once);
    answers and seconds written in the key's order. The doctor's probe runs first: a model that cannot
    answer plain texts right would only spend the run (``--no-probe`` to ask all the same)."""
    import concurrent.futures
    import os
    import statistics
    import time

    from memvault_scan_review import ChatReviewer

    rows = sorted(json.loads(args.key.read_text(encoding="utf-8")), key=lambda r: r["n"])
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    reviewer = ChatReviewer(
        args.url, args.model, api_key=api_key, timeout=args.timeout, json_mode=not args.no_json_mode
    )
    if not args.no_probe:
        try:
            print(f"probe: {reviewer.probe()}", flush=True)
        except memvault.UpstreamError as exc:
            reviewer.close()
            raise SystemExit(f"probe failed: {exc}\n(--no-probe asks all the same)") from None

    def one(row: dict[str, Any]) -> tuple[int, str, float]:
        body = reviewer.request_body(row["text"], row["rid"])
        started = time.perf_counter()
        try:
            content = reviewer._post(body)
        except Exception as exc:  # noqa: BLE001 - recorded as no answer
            content = ("error", f"{type(exc).__name__}: {exc}")
        answer = content if isinstance(content, str) else f"(no answer: {content[1]})"
        return row["n"], answer, time.perf_counter() - started

    args.folder.mkdir(parents=True, exist_ok=True)
    seconds: list[float] = []
    with (
        (args.folder / "answers_0.jsonl").open("w", encoding="utf-8") as out,
        concurrent.futures.ThreadPoolExecutor(max_workers=args.concurrency) as pool,
    ):
        for done, (n, answer, took) in enumerate(pool.map(one, rows), 1):
            seconds.append(took)
            out.write(json.dumps({"n": n, "content": answer, "seconds": round(took, 3)}) + "\n")
            out.flush()
            if done % 20 == 0 or done == len(rows):
                print(f"{done}/{len(rows)} asked, median {statistics.median(seconds):.2f} s a request", flush=True)
    reviewer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["render", "ask", "score"])
    parser.add_argument("--folder", type=Path, required=True, help="requests and answers")
    parser.add_argument("--key", type=Path, required=True, help="the key (keep it away from whoever answers)")
    parser.add_argument("--data", type=Path, default=DATA, help="the held-out set (default: %(default)s)")
    parser.add_argument("--quiet", type=int, default=100, help="LoCoMo writes without evidence to add")
    parser.add_argument(
        "--no-locomo", action="store_true", help="render the set's texts only, no LoCoMo writes (render)"
    )
    parser.add_argument("--parts", type=int, default=2, help="request files (one per answerer)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default="", help="also write the report here (score)")
    parser.add_argument("--url", default="", help="the endpoint's base URL (ask)")
    parser.add_argument("--model", default="", help="the model it serves (ask)")
    parser.add_argument("--api-key-env", default="", help="the variable holding its key (ask)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a request may take (ask)")
    parser.add_argument("--no-json-mode", action="store_true", help="do not ask for response_format (ask)")
    parser.add_argument("--concurrency", type=int, default=1, help="requests in flight at once (ask)")
    parser.add_argument("--no-probe", action="store_true", help="ask even when the doctor's probe fails (ask)")
    args = parser.parse_args()
    {"render": render_requests, "ask": ask, "score": score}[args.step](args)


if __name__ == "__main__":
    main()
