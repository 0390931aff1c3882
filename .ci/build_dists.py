"""Build every distribution of the repository (wheel and sdist) and check what PyPI would show.

For each folder with its own pyproject.toml (templates, whose folder starts with
`_`, excepted): `python -m build` makes a wheel and an sdist, `twine check
--strict` validates their metadata and README rendering, and this script checks
the fields a published page needs: license expression and file, classifiers,
project URLs, a Markdown long description, a wheel that installs the package.

Usage: python .ci/build_dists.py OUTDIR. Exit 0 when every distribution passes.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIRED_URLS = {"Homepage", "Source", "Issues", "Documentation"}


def distributions() -> list[Path]:
    found = [p.parent for p in ROOT.glob("*/pyproject.toml")] + [
        p.parent for p in ROOT.glob("plugins/*/pyproject.toml")
    ]
    return sorted(p for p in found if not p.name.startswith("_"))


def check_metadata(dist: Path, wheel: Path, sdist: Path) -> list[str]:
    problems = []
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(archive.read(meta_name).decode())
        if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
            problems.append("the wheel carries no LICENSE file (license-files)")
        if not any(n.endswith(".py") and ".dist-info/" not in n for n in names):
            problems.append("the wheel holds no Python module")
    if not meta.get("License-Expression"):
        problems.append("no license expression (project.license)")
    if not meta.get_all("Classifier"):
        problems.append("no classifiers")
    urls = {u.split(",", 1)[0].strip() for u in meta.get_all("Project-URL") or []}
    if REQUIRED_URLS - urls:
        problems.append(f"project URLs lack {sorted(REQUIRED_URLS - urls)}")
    if meta.get("Description-Content-Type") != "text/markdown" or len(meta.get_payload() or "") < 200:
        problems.append("no Markdown README as the long description")
    with tarfile.open(sdist) as archive:
        members = archive.getnames()
    for needed in ("pyproject.toml", "README.md", "LICENSE"):
        if not any(m.endswith(f"/{needed}") and m.count("/") == 1 for m in members):
            problems.append(f"the sdist lacks {needed}")
    return problems


def main(outdir: str) -> int:
    out = Path(outdir)
    failed = []
    for dist in distributions():
        target = out / dist.name
        target.mkdir(parents=True, exist_ok=True)
        rel = dist.relative_to(ROOT)
        print(f"--- {rel}: python -m build", flush=True)
        built = subprocess.run(
            [sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(target), str(dist)], check=False
        )
        wheels, sdists = sorted(target.glob("*.whl")), sorted(target.glob("*.tar.gz"))
        if built.returncode != 0 or len(wheels) != 1 or len(sdists) != 1:
            failed.append(f"{rel}: build failed")
            continue
        twine = subprocess.run(
            [sys.executable, "-m", "twine", "check", "--strict", str(wheels[0]), str(sdists[0])], check=False
        )
        if twine.returncode != 0:
            failed.append(f"{rel}: twine check failed")
        failed += [f"{rel}: {p}" for p in check_metadata(dist, wheels[0], sdists[0])]
    for problem in failed:
        print(f"error: {problem}", file=sys.stderr)
    print(f"build_dists: {len(distributions())} distributions, {len(failed)} problems")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "dist"))
