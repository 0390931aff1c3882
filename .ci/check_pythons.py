"""Before tox: every CPython the default tox env list needs is on PATH, or say which is not.

The full test command (README.md, `.ci/run`) runs tox over core on Python 3.10
to 3.13; tox.ini sets `skip_missing_interpreters = false`, so a missing
interpreter must fail the run, and `uv_python_preference = only-system`, so tox
never downloads one. This script turns that failure into a message naming the
missing interpreters and the exact command for the environments that can run.

Exit status: 0 when every interpreter is present, 1 otherwise.
Standard library only; reads tox.ini itself (no tox needed).
"""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_BRACES = re.compile(r"\{([^{}]*)\}")
_PY_FACTOR = re.compile(r"(?:^|-)py3(\d+)(?:-|$)")
_BASE = re.compile(r"^\s*(!?[\w!-]+)\s*:\s*(python3\.\d+)\s*$")


def expand(pattern: str) -> list[str]:
    """tox's generative names: ``py3{10,11}-core`` is ``py310-core``, ``py311-core``."""
    match = _BRACES.search(pattern)
    if match is None:
        return [pattern]
    out = []
    for choice in match.group(1).split(","):
        out.extend(expand(pattern[: match.start()] + choice.strip() + pattern[match.end() :]))
    return out


def read_tox(path: Path) -> tuple[list[str], str]:
    """The default env list, and the interpreter of envs without a ``py3X`` factor."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path, encoding="utf-8")
    envs: list[str] = []
    for line in parser.get("tox", "env_list").splitlines():
        if line.strip():
            envs.extend(expand(line.strip()))
    default = "python3.11"
    for line in parser.get("testenv", "base_python", fallback="").splitlines():
        match = _BASE.match(line)
        if match and match.group(1).startswith("!"):
            default = match.group(2)
    return envs, default


def interpreter(env: str, default: str) -> str:
    match = _PY_FACTOR.search(env)
    return f"python3.{match.group(1)}" if match else default


def works(name: str) -> bool:
    found = shutil.which(name)
    if found is None:
        return False
    try:
        proc = subprocess.run([found, "-c", "import sys"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def main() -> int:
    envs, default = read_tox(ROOT / "tox.ini")
    needed = sorted({interpreter(e, default) for e in envs}, key=lambda n: int(n.split(".")[1]))
    missing = [name for name in needed if not works(name)]
    if not missing:
        print(f"check_pythons: found {', '.join(needed)}")
        return 0
    runnable = [e for e in envs if interpreter(e, default) not in missing]
    print(
        f"error: the full test command needs CPython {', '.join(n.removeprefix('python') for n in needed)}; "
        f"not found on PATH: {', '.join(missing)}.",
        file=sys.stderr,
    )
    print(
        "Install the missing interpreters (your distribution's packages, pyenv, or `uv python install "
        f"{' '.join(n.removeprefix('python') for n in missing)}`), or run the environments this machine can:",
        file=sys.stderr,
    )
    if runnable:
        print(f"  .venv/bin/tox run-parallel --parallel 2 -e {','.join(runnable)}", file=sys.stderr)
    else:
        print("  (none: no interpreter tox.ini asks for is installed)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
