"""The prompt-injection scanner on real conversation text: false positives and cost per retain.

Data: every turn of LoCoMo (``bench/data/locomo/locomo10.json``, CC BY-NC 4.0, or ``--data``;
10 conversations, 5,882 turns). Each conversation is one agent; each session
is one ``daily`` document (key = 2023-01-01 plus the session number, in days);
each turn is appended as ``Speaker: text\\n`` -- the way an agent keeps a
running log, so every append re-scans the whole final body of its session.

Measured, in one run:

1. false positives: how many turns the builtin scanner rejects (each printed
   with its rule, so it can be explained), through ``Vault.retain``;
2. ``scan()`` alone per turn: p50 / p95 microseconds;
3. cost per retain: the same 5,882 appends with the scanner off (baseline)
   and the builtin scanner, on a fresh store each, interleaved over rounds so
   machine noise hits both; per round the median retain time of each, then the
   median over rounds. The builtin runs as a subclass that times its own work
   inside the wrapper and inside the check a ``checks_stored`` provider runs in
   its write (or the stored-body read-back + scan, for a provider without it),
   so its share of a retain is measured directly, not only as a noisy difference. For every provider given
   (``memory`` by default; ``sqlite`` and ``local-disk`` when installed);
4. recall with verdicts cached: 200 recalls over the filled store, off vs builtin.

With ``--baseline REF`` the scanner as it was at git ``REF`` (its ``scanner`` package,
loaded from git) runs as a third contender in the same interleaved rounds, so
"before" and "after" are measured in the same run and conditions. With
``--read-back`` the builtin scanner also runs ignoring the provider's
``checks_stored`` capability (it reads an append's stored body back through the
provider, as before that capability existed): before and after in one run.

    python bench/scan_bench.py [--rounds 5] [--providers memory,sqlite,local-disk] [--read-back]
        [--baseline REF] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import memvault
from memvault.hooks.markers import hookimpl
from memvault.registry import get_registry
from memvault.scanner.engine import scan
from memvault.scanner.plugin import BuiltinScanner

#: The copy in this repository (see bench/data/locomo/SOURCE.md for its origin and license).
DATA = Path(os.environ.get("LOCOMO", Path(__file__).resolve().parent / "data" / "locomo" / "locomo10.json"))
START = dt.date(2023, 1, 1)
QUERIES = [
    "support group",
    "painting",
    "What did Caroline research?",
    "camping trip",
    "adoption agencies",
    "When did Melanie run a charity race?",
    "pottery class",
    "book recommendation",
    "job interview",
    "dog",
]


def turns(path: Path = DATA) -> Iterator[tuple[str, str, str]]:
    """(agent id, daily key, line) for every turn, in conversation order."""
    for index, sample in enumerate(json.loads(path.read_text(encoding="utf-8"))):
        conversation = sample["conversation"]
        session = 1
        while f"session_{session}" in conversation:
            key = (START + dt.timedelta(days=session)).isoformat()
            for turn in conversation[f"session_{session}"]:
                yield f"conv-{index}", key, f"{turn['speaker']}: {turn['text']}\n"
            session += 1


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed_scanner(base: type, *, read_back: bool = False) -> type:
    """A subclass of scanner class ``base`` that times its own work per retain.

    That is the wrapper's work before and after the provider runs (reading the stored body back, when
    it does, and the scan) plus, on a provider with ``checks_stored``, the check the provider runs
    inside its write (``_check_append``: hashing and scanning the final body's tail). ``read_back``:
    ignore the provider's ``checks_stored`` and read the stored body back, as before that capability.
    """

    class TimedScanner(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__()
            self.spent: list[float] = []
            self._in_write = 0.0

        def bind_vault(self, vault: Any) -> None:
            super().bind_vault(vault)
            if read_back:
                self._checks_stored = False

        def _check_append(self, request: Any, stored: str, digest: str) -> Any:
            started = time.perf_counter()
            try:
                return base._check_append(self, request, stored, digest)
            finally:
                self._in_write += time.perf_counter() - started

        @hookimpl(wrapper=True)
        def memvault_retain(self, request: memvault.RetainRequest) -> Generator[None, Any, Any]:
            self._in_write = 0.0
            started = time.perf_counter()
            inner = base.memvault_retain(self, request)
            try:
                next(inner)  # the part before the provider runs (read-back and scan, or installing the check)
            finally:
                own = time.perf_counter() - started
            try:
                result = yield
            except BaseException as exc:  # a rejection inside the provider's write: the wrapper finishes it
                started = time.perf_counter()
                try:
                    inner.throw(exc)
                finally:
                    self.spent.append(own + self._in_write + time.perf_counter() - started)
                raise RuntimeError("the scanner's wrapper swallowed the provider's exception") from exc
            started = time.perf_counter()
            try:
                inner.send(result)
            except StopIteration as stop:
                self.spent.append(own + self._in_write + time.perf_counter() - started)
                return stop.value
            raise RuntimeError("the scanner's wrapper yielded twice")

    return TimedScanner


TimedScanner = timed_scanner(BuiltinScanner)
#: Scanner classes by contender name ("read-back" is added by --read-back, "baseline" by --baseline).
CONTENDERS: dict[str, type] = {"builtin": TimedScanner}


def load_baseline(ref: str) -> type:
    """The ``BuiltinScanner`` of ``core/src/memvault/scanner/plugin.py`` at git ``ref``, timed.

    The scanner package of ``ref`` is extracted whole and imported under another name, so it runs
    against this tree's contract and hooks (a ref from before the layered core, with a flat
    ``scan.py``, cannot run here: its imports name modules that no longer exist).
    """
    root = Path(__file__).resolve().parents[1]
    listing = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{ref}:core/src/memvault/scanner"], cwd=root, capture_output=True, text=True
    )
    if listing.returncode != 0:
        raise SystemExit(
            f"--baseline {ref}: that commit has no core/src/memvault/scanner package (before the layering)"
        )
    folder = Path(tempfile.mkdtemp(prefix="scan-baseline-")) / "memvault_scan_baseline"
    folder.mkdir()
    archive = subprocess.run(
        ["git", "archive", ref, "core/src/memvault/scanner"], cwd=root, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder.parent / "extract", filter="data")
    shutil.copytree(folder.parent / "extract" / "core/src/memvault/scanner", folder, dirs_exist_ok=True)
    for path in folder.glob("*.py"):  # its modules import each other as memvault.scanner.*
        text = path.read_text().replace("memvault.scanner.", "memvault_scan_baseline.")
        path.write_text(text.replace('"memvault.scanner"', '"memvault_scan_baseline"'))
    sys.path.insert(0, str(folder.parent))
    module = importlib.import_module("memvault_scan_baseline.plugin")
    return timed_scanner(module.BuiltinScanner)


def open_store(provider: str, scanner: str, tmp: Path) -> tuple[memvault.Vault, Any]:
    info = get_registry().get(provider)
    settings = dict(info.scratch(tmp)) if info.scratch is not None else {}
    timed = CONTENDERS[scanner]() if scanner in CONTENDERS else None
    vault = memvault.open(provider, scanner="off", plugins=[timed] if timed else [], **settings)
    return vault, timed


def retain_all(vault: memvault.Vault, data: list[tuple[str, str, str]]) -> tuple[list[float], list[tuple[str, Any]]]:
    """Append every turn; per-retain seconds and the rejected turns."""
    times: list[float] = []
    rejected: list[tuple[str, Any]] = []
    clock = time.perf_counter
    for agent, key, line in data:
        request = memvault.RetainRequest(
            workspace_id="bench", agent_id=agent, tier="daily", key=key, content=line, mode="append"
        )
        started = clock()
        try:
            vault.retain(request)
        except memvault.ContentRejected as exc:
            rejected.append((line, exc))
        times.append(clock() - started)
    return times, rejected


def recall_all(vault: memvault.Vault, agents: list[str], repeats: int) -> list[float]:
    times: list[float] = []
    for _ in range(repeats):
        for agent in agents:
            for query in QUERIES[:2]:
                request = memvault.RecallRequest(workspace_id="bench", agent_id=agent, query=query)
                started = time.perf_counter()
                vault.recall(request)
                times.append(time.perf_counter() - started)
    return times


def measure(provider: str, data: list[tuple[str, str, str]], rounds: int) -> dict[str, Any]:
    names = ["off", *CONTENDERS]
    medians: dict[str, list[float]] = {name: [] for name in names}
    p95s: dict[str, list[float]] = {name: [] for name in names}
    recalls: dict[str, list[float]] = {name: [] for name in names}
    own_p50: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    own_p95: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    rejected: list[tuple[str, Any]] = []
    agents = sorted({agent for agent, _, _ in data})
    for round_ in range(rounds):
        order = names if round_ % 2 == 0 else names[::-1]
        for scanner in order:
            with tempfile.TemporaryDirectory(prefix="scan-bench-") as tmp:
                vault, timed = open_store(provider, scanner, Path(tmp))
                with vault:
                    times, rejects = retain_all(vault, data)
                    recall_times = recall_all(vault, agents, repeats=10)
            medians[scanner].append(statistics.median(times))
            p95s[scanner].append(percentile(times, 0.95))
            recalls[scanner].append(statistics.median(recall_times))
            note = ""
            if timed is not None:
                if scanner == "builtin":
                    rejected = rejects
                own_p50[scanner].append(statistics.median(timed.spent))
                own_p95[scanner].append(percentile(timed.spent, 0.95))
                note = f"; scanner's own work p50 {own_p50[scanner][-1] * 1e6:6.1f} us"
            p50, p95 = statistics.median(times) * 1e6, percentile(times, 0.95) * 1e6
            recall_p50 = statistics.median(recall_times) * 1e6
            print(
                f"  {provider} round {round_ + 1} {scanner:8}: retain p50 {p50:8.1f} us, p95 {p95:8.1f} us; "
                f"recall p50 {recall_p50:8.1f} us{note}",
                file=sys.stderr,
            )
    off, on = statistics.median(medians["off"]), statistics.median(medians["builtin"])
    roff, ron = statistics.median(recalls["off"]), statistics.median(recalls["builtin"])
    own = statistics.median(own_p50["builtin"])
    baseline = {}
    if "baseline" in own_p50:
        before = statistics.median(own_p50["baseline"])
        baseline = {
            "baseline_p50_us": before * 1e6,
            "baseline_p95_us": statistics.median(own_p95["baseline"]) * 1e6,
            "baseline_retain_p50_us": statistics.median(medians["baseline"]) * 1e6,
            "growth": own / before - 1,
        }
    if "read-back" in own_p50:
        back = statistics.median(own_p50["read-back"])
        baseline |= {
            "read_back_p50_us": back * 1e6,
            "read_back_p95_us": statistics.median(own_p95["read-back"]) * 1e6,
            "read_back_retain_p50_us": statistics.median(medians["read-back"]) * 1e6,
            "read_back_share": back / off,
        }
    return {
        **baseline,
        "provider": provider,
        "retain_p50_off_us": off * 1e6,
        "retain_p50_builtin_us": on * 1e6,
        "retain_p95_off_us": statistics.median(p95s["off"]) * 1e6,
        "retain_p95_builtin_us": statistics.median(p95s["builtin"]) * 1e6,
        "retain_overhead": on / off - 1,
        "scanner_p50_us": own * 1e6,
        "scanner_p95_us": statistics.median(own_p95["builtin"]) * 1e6,
        "scanner_share": own / off,
        "recall_p50_off_us": roff * 1e6,
        "recall_p50_builtin_us": ron * 1e6,
        "recall_overhead": ron / roff - 1,
        "rejected": rejected,
    }


def scan_cost(data: list[tuple[str, str, str]]) -> tuple[float, float, float]:
    scan("warm up: \u200b")  # build the format-character class once, outside the timing
    times = []
    for _, _, line in data:
        started = time.perf_counter()
        scan(line)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6, percentile(times, 0.95) * 1e6, sum(times) / len(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved off/builtin rounds per provider")
    parser.add_argument("--providers", default="", help="comma-separated (default: memory, and sqlite if installed)")
    parser.add_argument("--out", default="", help="write a Markdown report here")
    parser.add_argument("--data", type=Path, default=DATA, help="locomo10.json (default: %(default)s)")
    parser.add_argument("--baseline", default="", help="also time the scanner of this git ref (before/after)")
    parser.add_argument(
        "--read-back",
        action="store_true",
        help="also time the builtin scanner reading an append's stored body back (as before checks_stored)",
    )
    args = parser.parse_args()
    if args.read_back:
        CONTENDERS["read-back"] = timed_scanner(BuiltinScanner, read_back=True)
    if args.baseline:
        CONTENDERS["baseline"] = load_baseline(args.baseline)
    providers = [p for p in args.providers.split(",") if p] or [
        p for p in ("memory", "sqlite", "local-disk") if p in get_registry().names()
    ]
    data = list(turns(args.data))
    print(f"{len(data)} turns from {args.data}", file=sys.stderr)

    direct = [(line, finding) for _, _, line in data if (finding := scan(line)) is not None]
    p50, p95, mean = scan_cost(data)
    results = [measure(p, data, args.rounds) for p in providers]

    report = render(len(data), direct, (p50, p95, mean), results, args.rounds, args.baseline)
    print(report)
    if args.out:
        Path(args.out).write_text(report, encoding="utf-8")


def render(
    total: int,
    direct: list[tuple[str, Any]],
    cost: tuple[float, float, float],
    results: list[dict[str, Any]],
    rounds: int,
    baseline: str = "",
) -> str:
    p50, p95, mean = cost
    lines = [
        f"Machine: {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}; {rounds} interleaved rounds per provider.",
        "",
        "### False positives",
        "",
        f"LoCoMo turns scanned: {total}. Rejected by `scan()` on the turn alone: {len(direct)}. "
        + ", ".join(
            f"Rejected through `Vault.retain` on `{r['provider']}` (final body of each append): {len(r['rejected'])}"
            for r in results
        )
        + ".",
        "",
    ]
    shown = {line for line, _ in direct}
    for r in results:
        shown |= {line for line, _ in r["rejected"]}
    for line in sorted(shown):
        finding = scan(line)
        rule = f"{finding.category}/{finding.pattern} ({finding.describe()})" if finding else "final-body only"
        lines.append(f"- `{line.strip()[:160]}` -> {rule}")
    lines += [
        "",
        "### `scan()` per turn (mean turn: ~124 characters)",
        "",
        "| p50 | p95 | mean |",
        "|---|---|---|",
        f"| {p50:.1f} us | {p95:.1f} us | {mean:.1f} us |",
        "",
        "### Cost per retain (append of one turn; scanner off = baseline, same run)",
        "",
        "The scanner's own work is timed inside its wrapper and, for a provider with `checks_stored`,",
        "inside the check the provider runs in its write (hashing, scanning the final body's tail);",
        "its share is that p50 over the p50 of a retain with the scanner off. End to end (builtin vs",
        "off) is shown too; on a shared machine fsync-bound retains vary by more than the scanner costs.",
        "",
        "| provider | retain p50 off | retain p50 builtin | p95 off | p95 builtin | end-to-end (p50) "
        "| scanner's own p50 / p95 | share of a retain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['provider']} | {r['retain_p50_off_us']:.1f} us | {r['retain_p50_builtin_us']:.1f} us | "
            f"{r['retain_p95_off_us']:.1f} us | {r['retain_p95_builtin_us']:.1f} us | {r['retain_overhead']:+.1%} | "
            f"{r['scanner_p50_us']:.1f} / {r['scanner_p95_us']:.1f} us | {r['scanner_share']:.1%} |"
        )
    if baseline:
        lines += [
            "",
            f"### Before and after: the scanner at `{baseline}` in the same rounds",
            "",
            "| provider | scanner's own p50 before | after | growth | p95 before | after | retain p50 before | after |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in results:
            lines.append(
                f"| {r['provider']} | {r['baseline_p50_us']:.1f} us | {r['scanner_p50_us']:.1f} us | "
                f"{r['growth']:+.1%} | {r['baseline_p95_us']:.1f} us | {r['scanner_p95_us']:.1f} us | "
                f"{r['baseline_retain_p50_us']:.1f} us | {r['retain_p50_builtin_us']:.1f} us |"
            )
    if any("read_back_p50_us" in r for r in results):
        lines += [
            "",
            "### Before and after `checks_stored`, in the same rounds",
            "",
            "Before: the scanner reads an append's stored body back through the provider (what it does",
            "for a provider without the capability). After: the provider hands it the stored body inside",
            "its own write. Shares are of the p50 retain with the scanner off.",
            "",
            "| provider | retain p50 off | scanner's own p50 before | share before | after | share after "
            "| retain p50 before | after |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in results:
            lines.append(
                f"| {r['provider']} | {r['retain_p50_off_us']:.1f} us | {r['read_back_p50_us']:.1f} us | "
                f"{r['read_back_share']:.1%} | {r['scanner_p50_us']:.1f} us | {r['scanner_share']:.1%} | "
                f"{r['read_back_retain_p50_us']:.1f} us | {r['retain_p50_builtin_us']:.1f} us |"
            )
    lines += [
        "",
        "### Recall with cached verdicts (200 recalls over the filled store)",
        "",
        "| provider | p50 off | p50 builtin | overhead |",
        "|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['provider']} | {r['recall_p50_off_us']:.1f} us | {r['recall_p50_builtin_us']:.1f} us | "
            f"{r['recall_overhead']:+.1%} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
