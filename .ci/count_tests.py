"""Sum the JUnit XML files tox wrote and fail when any env ran no test."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def main(folder: str) -> int:
    files = sorted(Path(folder).glob("*.xml"))
    if not files:
        print(f"no JUnit reports in {folder}: no test ran", file=sys.stderr)
        return 1
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    empty = []
    for path in files:
        root = ET.parse(path).getroot()
        suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        env_tests = 0
        for suite in suites:
            for key in totals:
                totals[key] += int(suite.get(key, 0))
            env_tests += int(suite.get("tests", 0))
        if env_tests == 0:
            empty.append(path.stem)
        print(f"{path.stem}: {env_tests} tests")
    passed = totals["tests"] - totals["failures"] - totals["errors"] - totals["skipped"]
    failed = totals["failures"] + totals["errors"]
    print(f"{passed} passed, {failed} failed, {totals['skipped']} skipped")
    if empty:
        print(f"these envs ran no test (pytest exit 5): {', '.join(empty)}", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".tox/junit"))
