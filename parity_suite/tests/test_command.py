"""``memvault parity NAME``, end to end in a subprocess (the console script's own entry)."""

from __future__ import annotations

import re
import subprocess
import sys

from memvault_parity.base import child_env


def _memvault(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from memvault.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
        check=False,
    )


def test_parity_is_a_memvault_command_added_by_the_plugin_hook() -> None:
    """The distribution adds `parity` through memvault_register_commands."""
    done = _memvault("--help")
    assert done.returncode == 0, done.stderr
    assert re.search(r"^\s+parity\s", done.stdout, re.MULTILINE)


def test_parity_on_a_passing_provider_exits_zero_with_a_summary() -> None:
    """A clean run prints the PASS summary with counts and exits 0."""
    done = _memvault("parity", "memory", "-k", "forget")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    match = re.search(r"memvault parity memory: PASS: (\d+) passed, 0 failed, (\d+) skipped", done.stdout)
    assert match
    assert int(match.group(1)) >= 10


def test_parity_failures_exit_one_and_name_the_tests_with_contract_numbers() -> None:
    """Failing tests are listed with the contract lines they check; the exit code is 1."""
    # the memory provider takes no settings, so every test fails to open its vault
    done = _memvault("parity", "memory", "--option", "bogus=1", "-k", "forget_twice or limit_within")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"memvault parity memory: FAIL: 0 passed, 4 failed, 0 skipped", done.stdout)
    assert "FAILED test_forget_twice_removes_zero  [P23]" in done.stdout
    assert "FAILED test_limit_within_range_is_respected[3]  [P15]" in done.stdout


def test_parity_of_an_unknown_provider_exits_two_listing_the_installed_ones() -> None:
    """A misspelt name is input error 2 and the message lists installed providers."""
    done = _memvault("parity", "memroy")
    assert done.returncode == 2
    assert "no provider named 'memroy'" in done.stderr
    assert "memory" in done.stderr


def test_parity_with_a_selection_matching_nothing_fails() -> None:
    """-k that selects no test is not a pass."""
    done = _memvault("parity", "memory", "-k", "no_such_test_anywhere")
    assert done.returncode == 1
    assert "no test matched" in done.stdout
