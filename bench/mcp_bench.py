"""A memory tool call over MCP (stdio and streamable HTTP) vs the same call in process.

Builds a sqlite file with one slot's partition (200 lines in the AGENT,
pins and daily documents of principal ``bench``), then times the same tool
call, ``profile__search`` with a selective query, three ways, interleaved in
rounds so machine noise hits all equally:

* ``in-process``: ``ToolSet.call`` from ``memvault.lifecycle`` (what an agent
  loop in Python does: the baseline);
* ``sdk in-memory``: the SDK's client connected to the same server object in
  this process (no transport: the SDK's own dispatch and validation);
* ``stdio``: the official SDK's client talking to ``memvault mcp`` in a
  subprocess over its standard input/output;
* ``http``: the same client over streamable HTTP to ``memvault mcp
  --transport http`` with a bearer token (127.0.0.1).

Each MCP figure is the full round trip the client sees: JSON-RPC encoding,
the transport, the server's dispatch, the hop to a worker thread, the vault
call (scanner included), and the way back.

    python bench/mcp_bench.py [--rounds 20] [--calls 25] [--write]

``--write`` replaces bench/results/mcp.md with the figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import memvault
from memvault.lifecycle import Runtime, Slot, by_principal
from memvault_http_remote.settings import hash_token
from memvault_mcp import MemoryService, build_server, stdio_caller

TOKEN = "mvt_bench-token"
CALL = ("profile__search", {"q": "item 7 42", "limit": 5})
HERE = Path(__file__).resolve().parent


def command(*args: str) -> list[str]:
    return [sys.executable, "-c", "from memvault.cli.main import main; main()", *args]


def write_config(root: Path) -> Path:
    config = root / "mcp.toml"
    config.write_text(
        'workspace = "bench"\nprincipal = "bench"\ntokens_file = "tokens.toml"\n'
        f'[[slots]]\nname = "profile"\ndescription = "Facts."\nprovider = "sqlite"\n'
        f'options = {{ path = "{root / "bench.db"}" }}\n',
        encoding="utf-8",
    )
    (root / "tokens.toml").write_text(
        f'[[tokens]]\nname = "bench"\nsha256 = "{hash_token(TOKEN)}"\nworkspaces = ["bench"]\n', encoding="utf-8"
    )
    return config


def fill(vault: memvault.Vault) -> Runtime:
    runtime = Runtime(
        [Slot(name="profile", description="Facts.", vault=vault, scope=by_principal)], workspace_id="bench"
    )
    tools = runtime.session("fill", principal="bench").turn_started(0, "").tools
    for tier in ("AGENT", "pins"):
        body = "".join(f"item {tier} {i} fact number {i * 7} about {i % 13}\n" for i in range(60))
        assert tools.call("profile__write", {"tier": tier, "content": body, "mode": "replace"}).ok
    for i in range(80):
        assert tools.call("profile__append_daily", {"entry": f"item 7 {i} happened"}).ok
    return runtime


def start_http(config: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        command("mcp", "--slots", str(config), "--transport", "http", "--port", "0"),
        cwd=config.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or []], daemon=True).start()
    line = lines.get(timeout=60)
    return proc, line.split("listening on ", 1)[1].split(" ", 1)[0]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


async def measure(config: Path, url: str, runtime: Runtime, rounds: int, calls: int) -> dict[str, list[float]]:
    tools = runtime.session("bench", principal="bench").turn_started(0, "").tools
    name, arguments = CALL
    samples: dict[str, list[float]] = {"in-process": [], "sdk in-memory": [], "stdio": [], "http": []}
    service = MemoryService(runtime.slots, workspace_id="bench")
    server = build_server(service, stdio_caller("bench"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    argv = command("mcp", "--slots", str(config))
    stdio = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(config.parent))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        Client(server) as in_memory,
        Client(stdio) as over_stdio,
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        Client(streamable_http_client(url, http_client=http)) as over_http,
    ):
        for client in (in_memory, over_stdio, over_http):  # warm up: first calls open the vault's connections
            for _ in range(5):
                assert not (await client.call_tool(name, arguments)).is_error
        for round_no in range(rounds):
            order = ["in-process", "sdk in-memory", "stdio", "http"]
            if round_no % 2:
                order.reverse()
            for path in order:
                for _ in range(calls):
                    start = time.perf_counter()
                    if path == "in-process":
                        ok = tools.call(name, arguments).ok
                    else:
                        client = {"sdk in-memory": in_memory, "stdio": over_stdio}.get(path, over_http)
                        ok = not (await client.call_tool(name, arguments)).is_error
                    samples[path].append((time.perf_counter() - start) * 1000)
                    assert ok
    return samples


def report(samples: dict[str, list[float]], rounds: int, calls: int) -> str:
    base = pct(samples["in-process"], 0.5)
    rows = []
    for path, values in samples.items():
        p50, p95 = pct(values, 0.5), pct(values, 0.95)
        rows.append(f"| {path} | {p50:.3f} | {p95:.3f} | {p50 - base:+.3f} ms | {p50 / base:.1f}x |")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return "\n".join(
        [
            "# MCP: a tool call over stdio and streamable HTTP vs in process",
            "",
            f"Machine: {os.cpu_count()} cores ({platform.machine()}, shared with other jobs), "
            f"Python {platform.python_version()}, {platform.system()}. Loopback (127.0.0.1) for HTTP.",
            f"Call: `{CALL[0]}` {CALL[1]} on sqlite (one partition, 200 lines), the builtin scanner on.",
            f"Latency: {rounds} interleaved rounds x {calls} sequential calls per path "
            f"({rounds * calls} samples each). Load average when run: {load}.",
            "",
            "| path | p50 ms | p95 ms | p50 added vs in-process | p50 ratio |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "Reproduce: `python bench/mcp_bench.py --write` (with `./core`, `./plugins/sqlite`, "
            "`./plugins/http-remote` and `./plugins/mcp` installed).",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=25)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memvault-mcp-bench-") as tmp:
        root = Path(tmp)
        config = write_config(root)
        vault = memvault.open("sqlite", path=str(root / "bench.db"))
        runtime = fill(vault)
        proc, url = start_http(config)
        try:
            samples = anyio.run(measure, config, url, runtime, args.rounds, args.calls)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            vault.close()
    text = report(samples, args.rounds, args.calls)
    print(text)
    if args.write:
        (HERE / "results" / "mcp.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
