#!/usr/bin/env python3
"""Interop test: a hot reload heard by the official Python MCP SDK client.

Usage:
    python tests/interop/reload.py -- <server command> [args...]
e.g.
    python tests/interop/reload.py -- target/release/carte serve

The catalog path is appended to the command: the script writes a small catalog
into a temporary folder, connects with the SDK's `ClientSession` (legacy
`initialize` handshake), edits the catalog, and checks that the session's
message handler receives `notifications/tools/list_changed` and that the next
`tools/list` returns the new tool. Every wait is bounded. The last line is
`N passed, M failed`; the exit status is non-zero if anything failed.
Requires mcp==2.3.0 (tests/interop/requirements.txt).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

TIMEOUT = 15.0  # seconds for any single wait


def catalog(tools: list[str]) -> str:
    lines = ["server: { name: reload-interop, version: 1.0.0 }", "tools:"]
    for tool in tools:
        lines += [f"  - name: {tool}", f"    description: The {tool} tool.", f"    run: {{ text: {tool} ran }}"]
    return "\n".join(lines) + "\n"


def method_of(message: Any) -> str | None:
    return getattr(getattr(message, "root", message), "method", None)


async def run(command: list[str], workdir: str) -> tuple[int, list[str]]:
    passed = 0
    failures: list[str] = []

    def check(label: str, ok: bool, detail: str = "") -> None:
        nonlocal passed
        print(f"{'ok  ' if ok else 'FAIL'}  {label}" + ("" if ok else f": {detail}"), flush=True)
        if ok:
            passed += 1
        else:
            failures.append(f"{label}: {detail}")

    path = os.path.join(workdir, "catalog.yaml")
    with open(path, "w", encoding="utf-8") as file:
        file.write(catalog(["alpha"]))
    changed = anyio.Event()
    seen: list[str] = []

    async def message_handler(message: Any) -> None:
        method = method_of(message)
        seen.append(str(method or message))
        if method == "notifications/tools/list_changed":
            changed.set()

    params = StdioServerParameters(command=command[0], args=[*command[1:], path])
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            with anyio.fail_after(4 * TIMEOUT):
                async with stdio_client(params, errlog=errlog) as (read, write):
                    async with ClientSession(
                        read,
                        write,
                        read_timeout_seconds=TIMEOUT,
                        message_handler=message_handler,
                        client_info=types.Implementation(name="carte-reload-interop", version="0.1.0"),
                    ) as session:
                        await session.initialize()
                        before = [tool.name for tool in (await session.list_tools()).tools]
                        check("tools/list before the edit", before == ["alpha"], f"got {before}")
                        # Save the way editors do: a new file renamed over the old one.
                        temporary = os.path.join(workdir, ".catalog.yaml.swp")
                        with open(temporary, "w", encoding="utf-8") as file:
                            file.write(catalog(["alpha", "beta"]))
                        os.replace(temporary, path)
                        try:
                            with anyio.fail_after(TIMEOUT):
                                await changed.wait()
                            check("message handler received notifications/tools/list_changed", True)
                        except TimeoutError:
                            check("message handler received notifications/tools/list_changed", False, f"saw {seen}")
                        after = [tool.name for tool in (await session.list_tools()).tools]
                        check("tools/list after the edit has the new tool", after == ["alpha", "beta"], f"got {after}")
                        result = await session.call_tool("beta", {})
                        text = "".join(b.text for b in result.content if isinstance(b, types.TextContent))
                        check("the new tool answers", text == "beta ran", f"got {text!r}")
        except Exception as err:  # noqa: BLE001 - any error is a failed check
            check("session", False, f"{type(err).__name__}: {err}")
        if failures:
            errlog.seek(0)
            print("-- server stderr:", flush=True)
            for line in errlog.read().splitlines()[-40:]:
                print(f"   {line}", flush=True)
    return passed, failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server", nargs=argparse.REMAINDER, help="-- <server command> [args...]")
    args = parser.parse_args()
    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    if not command:
        parser.error("missing the server command after --")
    with tempfile.TemporaryDirectory(prefix="carte-reload-interop-") as workdir:
        passed, failures = anyio.run(run, command, workdir)
    print(f"{passed} passed, {len(failures)} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
