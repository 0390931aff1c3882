"""The harness that waits for a started server's "listening on" line."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import LinePump


def test_a_line_arriving_in_the_same_read_as_the_one_before_is_seen() -> None:
    # The server's no-token warning and its "listening on" line can reach the pipe together;
    # the second must be found without waiting for more output (the child then stays silent).
    child = (
        "import sys, time; sys.stdout.write('warning: x\\nlistening on http://127.0.0.1:1\\n');"
        " sys.stdout.flush(); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        pump = LinePump(proc.stdout)
        start = time.monotonic()
        found = pump.wait_for(r"listening on (http://\S+)", timeout=20)
        assert found is not None
        assert found.group(1) == "http://127.0.0.1:1"
        assert time.monotonic() - start < 10
        assert pump.lines == ["warning: x\n", "listening on http://127.0.0.1:1\n"]
    finally:
        proc.kill()
        proc.wait()


def test_the_end_of_output_ends_the_wait() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "print('bye')"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pump = LinePump(proc.stdout)
    start = time.monotonic()
    assert pump.wait_for("listening on", timeout=30) is None
    assert time.monotonic() - start < 20
    assert pump.lines == ["bye\n"]
    proc.wait()
