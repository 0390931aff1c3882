"""Every code sample in the README files and docs/ runs, or says why it cannot.

* ```python blocks are executed;
* ```console blocks: every `$ ` line runs in a shell and its shown output is
  checked (a first shown line `error: ...` means the command must fail): each
  shown line must be a whole line the command printed, after both pass through
  :func:`normalise` (times, dates, hashes, durations, rates, free space,
  ports, versions, recall scores, temporary paths and token secrets become placeholders, and
  runs of spaces one space, so a table's rows are compared cell by cell); a
  shown line ending in `...` is the start of a printed line, cut short visibly.
  A page shows what the commands print, not a paraphrase.
  `pip install` lines install into the venv the README's first command made
  (in a fresh copy of the repository, see ``readme_service``); lines that talk
  to `http://127.0.0.1:8765` go to the server that command started;
  `memvault serve` lines start a server, wait until it listens, and stop it;
* ```toml blocks are loaded as memvault.toml and their settings checked.

Any other block, and any block that cannot run here, carries a marker on the
line above it: ``<!-- not run: the reason -->`` (invisible in the rendered
site). A block without either fails :func:`test_every_block_runs_or_says_why_not`.

A block whose marker line is ``<!-- output of the block above -->`` is what
the block right above it prints: a ```python block's standard output, or the
last `$ ` line's of a ```console block. It is not run itself; the block above
is, and every line it printed must equal the page's, in order, after
:func:`normalise` (``...`` alone on a line stands for any lines).

A block that needs a module only some envs install (a plugin's or a framework's
page) says so on a line above it, ``<!-- needs: module, ... -->``: it runs where
those modules import and is skipped elsewhere; the env that installs them runs it.
"""

from __future__ import annotations

import os
import re
import runpy
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import LinePump, ReadmeService, clean_env
from readme import ROOT

DOCS = ROOT / "docs"
#: Generated signature listings, not samples.
NOT_SAMPLES = {"docs/plugin-authors/hooks.md"}
RUN_KINDS = {"python", "console", "toml"}
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
_MARK = re.compile(r"<!-- not run: (.+?) -->\s*$")
_NEEDS = re.compile(r"<!--\s*needs:\s*([\w., ]+?)\s*-->\s*$")
SERVICE = "http://127.0.0.1:8765"
SERVE_DEADLINE = 60.0


def pages() -> list[Path]:
    """README.md, every distribution's README (their PyPI page) and docs/."""
    found = [ROOT / "README.md", ROOT / "core" / "README.md", ROOT / "parity_suite" / "README.md"]
    found += sorted((ROOT / "plugins").glob("*/README.md"))
    found += sorted(DOCS.rglob("*.md"))
    return [p for p in found if p.relative_to(ROOT).as_posix() not in NOT_SAMPLES]


_OUTPUT = re.compile(r"<!--\s*output of the block above\s*-->\s*$")
OUTPUT_REASON = "the output of the block above, checked when that block runs"


class Block:
    def __init__(self, page: str, line: int, kind: str, code: str, reason: str, needs: list[str]) -> None:
        self.page, self.line, self.kind, self.code, self.reason = page, line, kind, code, reason
        self.needs = needs
        #: The page's copy of what this block prints (the output block under it), if any.
        self.output: str | None = None

    def skip_unless_installed(self) -> None:
        for module in self.needs:
            pytest.importorskip(module, reason=f"{self} needs {module}")

    def __repr__(self) -> str:
        return f"{self.page}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for page in pages():
        rel = page.relative_to(ROOT).as_posix()
        source = page.read_text(encoding="utf-8")
        for match in _FENCE.finditer(source):
            # The markers: the run of HTML comment lines right above the fence.
            above = source[: match.start()].rstrip("\n").split("\n")
            comments = []
            while above and above[-1].strip().startswith("<!--"):
                comments.append(above.pop().strip())
            marks = [m.group(1) for c in comments if (m := _MARK.search(c))]
            needs = [n.strip() for c in comments if (m := _NEEDS.search(c)) for n in m.group(1).split(",") if n.strip()]
            line = source[: match.start()].count("\n") + 1
            code = textwrap.dedent(match.group(2))
            if any(_OUTPUT.search(c) for c in comments):
                if not found or found[-1].page != rel:
                    raise AssertionError(f"{rel}:{line}: an output block with no block above it")
                found[-1].output = code
                marks = [OUTPUT_REASON]
            found.append(Block(rel, line, match.group(1), code, marks[0] if marks else "", needs))
    return found


BLOCKS = blocks()


def _runnable(kind: str) -> list[Block]:
    return [b for b in BLOCKS if b.kind == kind and not b.reason]


def test_every_block_runs_or_says_why_not() -> None:
    silent = [repr(b) for b in BLOCKS if b.kind not in RUN_KINDS and not b.reason]
    assert not silent, f"blocks neither run by this test nor marked `<!-- not run: reason -->`: {silent}"


def test_blocks_are_found_on_every_page_kind() -> None:
    """Guard against the fence pattern silently matching nothing."""
    assert len(_runnable("python")) >= 20
    assert len(_runnable("console")) >= 10
    assert {b.page for b in BLOCKS} >= {"README.md", "docs/getting-started.md", "plugins/sqlite/README.md"}


@pytest.mark.parametrize("block", _runnable("python"), ids=repr)
def test_python_sample_runs(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    block.skip_unless_installed()
    for key in [k for k in os.environ if k.startswith("MEMVAULT_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "sample.py"
    script.write_text(block.code)
    runpy.run_path(str(script), run_name="__main__")
    if block.output is not None:
        assert_prints(block, capsys.readouterr().out)


def _commands(code: str) -> list[tuple[str, list[str]]]:
    """Each `$ ` line (with `\\` continuations) and the output lines shown under it."""
    out: list[tuple[str, list[str]]] = []
    lines = code.splitlines()
    index = 0
    while index < len(lines):
        text = lines[index]
        index += 1
        if not text.startswith("$ "):
            continue
        command = text[2:]
        while command.endswith("\\") and index < len(lines):
            command = command[:-1] + " " + lines[index].strip()
            index += 1
        shown = []
        while index < len(lines) and not lines[index].startswith("$ "):
            if lines[index].strip():
                shown.append(lines[index])
            index += 1
        out.append((command, shown))
    return out


#: What differs from one run to the next, in the order applied: (pattern, placeholder).
_VOLATILE = [
    (re.compile(r"mvt_[A-Za-z0-9_-]+"), "<TOKEN>"),
    (re.compile(r"^\s*\d\.\d{3}(?=\s)"), "<SCORE>"),  # a recall hit's score leads its row (it depends on the embedder)
    (re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<TIME>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), "<DATE>"),
    (re.compile(r"\b[0-9a-f]{8,64}\b"), "<HEX>"),
    # A path ends before a closing parenthesis: "Python 3.11.7 (/tmp/.../python)" keeps its ")".
    (re.compile(r"(?:/tmp|/var/folders|/private/var)/[^\s)]+|/[^\s)]*pytest-of-[^\s)]+"), "<PATH>"),
    (re.compile(r"\b\d+(?:\.\d+)? GiB free at \S+"), "<FREE>"),
    (re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|s)\b"), "<DURATION>"),
    (re.compile(r"\(\d+/s\)"), "(<RATE>)"),
    (re.compile(r"(127\.0\.0\.1|localhost|\[::1\]):\d+"), r"\1:<PORT>"),
    (re.compile(r"\b\d+\.\d+\.\d+(?:[.+-][0-9A-Za-z.]+)?\b"), "<VERSION>"),
    (re.compile(r"Python <VERSION> \([^)]*\)"), "Python <VERSION> (<PATH>)"),
]


def normalise(text: str) -> str:
    """``text`` with what changes between runs replaced by placeholders, and spaces collapsed."""
    for pattern, placeholder in _VOLATILE:
        text = pattern.sub(placeholder, text)
    return " ".join(text.split())


def assert_prints(block: Block, printed: str) -> None:
    """``printed`` is the page's output block under ``block``, line for line once normalised."""
    assert block.output is not None
    want = [normalise(line) for line in block.output.splitlines() if line.strip()]
    got = [normalise(line) for line in printed.splitlines() if line.strip()]
    pattern = "".join(".*?\n" if line == "..." else re.escape(line) + "\n" for line in want)
    assert re.fullmatch(pattern, "".join(line + "\n" for line in got), re.S), (
        f"{block}: the page shows another output than the block prints.\npage:\n{block.output}\nprinted:\n{printed}"
    )


def _printed(shown: str, output: str) -> bool:
    """Whether the page's line ``shown`` is a whole line of ``output``, once both are normalised;
    a shown line ending in ``...`` (the page cut it short, visibly) is the start of one."""
    want = normalise(shown)
    if want.endswith("...") and len(want) > 3:
        return any(normalise(line).startswith(want[:-3].rstrip()) for line in output.splitlines())
    return any(normalise(line) == want for line in output.splitlines())


def test_normalise_keeps_the_parenthesis_after_a_temporary_path() -> None:
    """doctor's python row run from a tox env under /tmp matches the page's row from a project's venv."""
    page = "python          ok      Python 3.11.7 (/home/me/project/.venv/bin/python)"
    tox = "python                ok      Python 3.11.7 (/tmp/ci/main/.tox/cross/bin/python)"
    assert normalise(page) == normalise(tox)


def test_normalise_hides_what_changes_between_runs_only() -> None:
    """The placeholders cover times, hashes, durations and paths, and nothing a reader relies on."""
    a = "acme  agent:support  AGENT.md  21  4000  1%  -  2026-11-30 13:07:15"
    b = "acme       agent:support     AGENT.md  21     4000  1%    -            2026-12-03 09:01:59"
    assert normalise(a) == normalise(b)
    assert normalise("stored pins.md (31 bytes)") != normalise("stored pins.md (32 bytes)")
    assert normalise("embedded 3 line(s) in 0.4 s (7/s)") == normalise("embedded 3 line(s) in 12.9 s (1/s)")
    assert normalise("sha256 35ee60af0123") == normalise("sha256 9f86d081884c")
    assert normalise("0.196  pins.md:1  Deploys") == normalise("0.402  pins.md:1  Deploys")
    assert _printed("stored pins.md (31 bytes)", "stored pins.md (31 bytes)\n")
    assert not _printed("stored pins.md", "stored pins.md (31 bytes)\n")  # a whole line, not a part
    assert _printed("stored pins.md ...", "stored pins.md (31 bytes)\n")  # unless visibly cut short


def _serve(command: str, cwd: Path, env: dict[str, str]) -> str:
    """Start a `memvault serve` line, wait until it listens, stop it; its output."""
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    pump = LinePump(proc.stdout)
    try:
        pump.wait_for("listening on", SERVE_DEADLINE)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    output = pump.lines
    text = "".join(output)
    assert "listening on" in text, f"`{command}` did not start listening:\n{text}"
    return text


@pytest.mark.parametrize("block", _runnable("console"), ids=repr)
def test_console_sample_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    block.skip_unless_installed()
    here = Path(sys.executable).parent
    env = {**clean_env(), "PATH": f"{here}{os.pathsep}{os.environ['PATH']}"}
    service: ReadmeService | None = None
    if "pip install" in block.code or SERVICE in block.code:
        service = request.getfixturevalue("readme_service")
    # A serve line binds a free port (the docs show 8765), so parallel runs never collide.
    (tmp_path / "memvault.toml").write_text("[server]\nport = 0\n")
    commands = _commands(block.code)
    assert commands, f"{block}: a console block without any `$ ` line"
    if "pip install" not in block.code:
        # The cross env, which runs these pages, installs no embedder: every env prints the same
        # (a page says what an embedder adds to an output).
        env["MEMVAULT_EMBEDDER"] = "off"
    for command, shown in commands:
        cwd, run_env = tmp_path, env
        if "pip install" in block.code:
            # An install block runs in the clone, with its .venv first on PATH.
            assert service is not None
            cwd = service.checkout
            run_env = {**env, "PATH": f"{service.venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
        if SERVICE in command:
            assert service is not None
            command = command.replace(SERVICE, service.url)
        if "memvault serve" in command:
            output = _serve(command.replace("--port 8765", "--port 0"), cwd, run_env)
            code = 0
            listening = re.search(r"listening on (http://\S+)", output)
            assert listening is not None
            shown = [line.replace(SERVICE, listening.group(1)) for line in shown]
        else:
            proc = subprocess.run(
                ["bash", "-c", command],
                cwd=cwd,
                env=run_env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            output, code = proc.stdout + proc.stderr, proc.returncode
        if shown and shown[0].startswith("error:"):
            assert code != 0, f"{block}: `{command}` should fail:\n{output}"
        else:
            assert code == 0, f"{block}: `{command}` exited {code}:\n{output}"
        for line in shown:
            assert _printed(line, output), f"{block}: `{command}` did not print {line!r}:\n{output}"
    if block.output is not None:
        assert_prints(block, output)


def _config_blocks() -> list[Block]:
    """memvault.toml examples (pyproject snippets are not configs)."""
    # An MCP server's slots file (memvault-mcp tests its own samples) is not a memvault.toml.
    return [b for b in _runnable("toml") if "[project" not in b.code and not b.code.startswith("# mcp.toml")]


@pytest.mark.parametrize("block", _config_blocks(), ids=repr)
def test_config_sample_is_a_valid_memvault_toml(block: Block, tmp_path: Path) -> None:
    """Every memvault.toml in the docs loads, and its provider and server settings are accepted."""
    from memvault.config import load_config
    from memvault.registry import coerce_settings, get_registry
    from memvault_http_remote.settings import ServerSettings

    path = tmp_path / "memvault.toml"
    path.write_text(block.code)
    config = load_config(path)
    for name, settings in config.providers.items():
        coerce_settings(get_registry().get(name), settings)
    ServerSettings.from_table(config.server)


def test_pyproject_snippets_are_marked_or_valid_toml() -> None:
    tomllib = pytest.importorskip("tomllib")

    for block in [b for b in _runnable("toml") if "[project" in b.code]:
        tomllib.loads(block.code)
