#!/usr/bin/env python3
"""Interop test: the shipped Reservo catalog, driven by the official Python MCP SDK.

Usage:
    python tests/interop/reservo.py [--mode legacy|2026-07-28|all] -- <server command> [args...]
e.g.
    python tests/interop/reservo.py -- target/release/carte serve catalogs/reservo.yaml

Each mode gets a fresh server process (the protocol era of a stdio connection
is fixed by its first request) and its own temporary SQLite database, passed
as RESERVO_DATABASE_URL, so nothing is written inside the repository:

  legacy      `initialize` handshake (the client offers 2025-11-25), plus the
              legacy-only logging/setLevel and resources/subscribe/unsubscribe.
  2026-07-28  `server/discover`, then every request carries the `_meta`
              envelope; the client validates results against the 2026 schema.

Every wait is bounded. Each check prints one line; the last line is
`N passed, M failed`, and the exit status is non-zero if anything failed.
Requires mcp==2.3.0 (tests/interop/requirements.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import traceback
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp import ClientSession, MCPDeprecationWarning, MCPError, StdioServerParameters, stdio_client
from mcp_types import PromptReference, ResourceTemplateReference

from checks import Checks, describe, text_of

# logging/setLevel and resources/(un)subscribe are deprecated at 2026-07-28 but
# are exactly what the legacy mode means to exercise.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

LEGACY = "legacy"
MODERN = "2026-07-28"

CALL_TIMEOUT = 15.0  # seconds for any single request or wait
MODE_TIMEOUT = 120.0  # seconds for a whole mode, server start to exit

ROOMS = ["Focus", "Studio", "Boardroom"]
ROOM = {"type": "string", "enum": ROOMS}
TIER = {"type": "string", "enum": ["basic", "pro"]}
EXPECTED_TOOLS: list[tuple[str, dict[str, Any]]] = [
    ("list_rooms", {"type": "object", "properties": {}}),
    (
        "get_quote",
        {
            "type": "object",
            "properties": {"room": ROOM, "tier": TIER, "hours": {"type": "integer"}},
            "required": ["room", "tier", "hours"],
        },
    ),
    (
        "book_room",
        {
            "type": "object",
            "properties": {"room": ROOM, "tier": TIER, "hours": {"type": "integer"}, "member": {"type": "string"}},
            "required": ["room", "tier", "hours", "member"],
        },
    ),
    (
        "cancel_booking",
        {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
    ),
]
RATES = {"Focus": {"rate_cents": 2500}, "Studio": {"rate_cents": 4000}, "Boardroom": {"rate_cents": 9000}}
UNKNOWN_BOOKING = 987654321

T = TypeVar("T")


async def bounded(awaitable: Awaitable[T]) -> T:
    with anyio.fail_after(CALL_TIMEOUT):
        return await awaitable


class Logs:
    """notifications/message seen by the client, with a bounded wait."""

    def __init__(self) -> None:
        self.seen: list[types.LoggingMessageNotificationParams] = []
        self.notes: list[types.ServerNotification | Exception] = []

    async def logging_callback(self, params: types.LoggingMessageNotificationParams) -> None:
        self.seen.append(params)

    async def message_handler(self, message: types.ServerNotification | Exception) -> None:
        self.notes.append(message)

    async def wait_for(
        self, predicate: Callable[[types.LoggingMessageNotificationParams], bool]
    ) -> types.LoggingMessageNotificationParams:
        with anyio.fail_after(CALL_TIMEOUT):
            while True:
                for params in self.seen:
                    if predicate(params):
                        return params
                await anyio.sleep(0.02)


def tool_log(tool: str) -> Callable[[types.LoggingMessageNotificationParams], bool]:
    def matches(params: types.LoggingMessageNotificationParams) -> bool:
        return params.logger == "carte.tools" and isinstance(params.data, dict) and params.data.get("tool") == tool

    return matches


async def exercise(mode: str, session: ClientSession, logs: Logs, checks: Checks) -> None:
    p = f"[{mode}]"

    # Handshake: nothing else makes sense if it fails.
    if mode == LEGACY:
        init = await bounded(session.initialize())
        checks.equal(f"{p} initialize negotiates 2025-11-25", init.protocol_version, "2025-11-25")
        checks.equal(f"{p} session protocol_version", session.protocol_version, "2025-11-25")
    else:
        disc = await bounded(session.discover())
        checks.equal(f"{p} discover negotiates 2026-07-28", session.protocol_version, MODERN)
        checks.check(
            f"{p} discover lists 2026-07-28 in supportedVersions",
            MODERN in disc.supported_versions,
            f"supportedVersions={disc.supported_versions!r}",
        )
    info = session.server_info
    checks.equal(f"{p} serverInfo name/version", (info.name, info.version) if info else None, ("reservo", "1.0.0"))
    caps = session.server_capabilities
    checks.check(
        f"{p} capabilities: tools, prompts, resources, completions",
        caps is not None and None not in (caps.tools, caps.prompts, caps.resources, caps.completions),
        f"capabilities={caps!r}",
    )

    with checks.step(f"{p} tools/list"):
        listed = await bounded(session.list_tools())
        checks.equal(f"{p} tools/list names in order", [t.name for t in listed.tools], [n for n, _ in EXPECTED_TOOLS])
        schemas = {t.name: t.input_schema for t in listed.tools}
        for name, schema in EXPECTED_TOOLS:
            checks.equal(f"{p} tools/list inputSchema of {name}", schemas.get(name), schema)
        if mode == MODERN:
            checks.check(
                f"{p} tools/list ttlMs/cacheScope",
                listed.ttl_ms >= 0 and listed.cache_scope in ("public", "private"),
                f"ttlMs={listed.ttl_ms!r} cacheScope={listed.cache_scope!r}",
            )

    with checks.step(f"{p} call list_rooms"):
        result = await bounded(session.call_tool("list_rooms", {}))
        text = text_of(result)
        checks.check(
            f"{p} list_rooms lists every room and rate",
            not result.is_error and all(f"{room}: {RATES[room]['rate_cents']}" in text for room in ROOMS),
            f"isError={result.is_error} text={text!r}",
        )

    with checks.step(f"{p} call get_quote Focus/pro/3"):
        result = await bounded(session.call_tool("get_quote", {"room": "Focus", "tier": "pro", "hours": 3}))
        text = text_of(result)
        checks.check(
            f"{p} get_quote Focus/pro/3 quotes 11250",
            not result.is_error and "11250" in text,
            f"isError={result.is_error} text={text!r}",
        )

    if mode == MODERN:
        # 2026-07-28: the session sends `_meta` logLevel=debug with every request.
        with checks.step(f"{p} per-request log for tools/call"):
            params = await logs.wait_for(tool_log("get_quote"))
            checks.equal(f"{p} per-request log for tools/call is debug", params.level, "debug")

    with checks.step(f"{p} call get_quote hours=0"):
        result = await bounded(session.call_tool("get_quote", {"room": "Focus", "tier": "pro", "hours": 0}))
        checks.check(
            f"{p} get_quote hours=0 is a tool error",
            result.is_error is True and "at least 1" in text_of(result),
            f"isError={result.is_error} text={text_of(result)!r}",
        )

    with checks.step(f"{p} book_room then cancel_booking"):
        booked = await bounded(
            session.call_tool("book_room", {"room": "Studio", "tier": "basic", "hours": 2, "member": "Ada"})
        )
        text = text_of(booked)
        found = re.search(r"#(\d+)", text)
        if checks.check(
            f"{p} book_room returns a booking id",
            not booked.is_error and found is not None,
            f"isError={booked.is_error} text={text!r}",
        ):
            booking = int(found.group(1))
            cancelled = await bounded(session.call_tool("cancel_booking", {"id": booking}))
            text = text_of(cancelled)
            checks.check(
                f"{p} cancel_booking #{booking}",
                not cancelled.is_error and f"#{booking}" in text and "Ada" in text,
                f"isError={cancelled.is_error} text={text!r}",
            )
            again = await bounded(session.call_tool("cancel_booking", {"id": booking}))
            checks.equal(f"{p} cancel_booking #{booking} twice is a tool error", again.is_error, True)

    with checks.step(f"{p} cancel_booking unknown id"):
        result = await bounded(session.call_tool("cancel_booking", {"id": UNKNOWN_BOOKING}))
        checks.check(
            f"{p} cancel_booking unknown id is a tool error",
            result.is_error is True and str(UNKNOWN_BOOKING) in text_of(result),
            f"isError={result.is_error} text={text_of(result)!r}",
        )

    with checks.step(f"{p} prompts/list"):
        prompts = await bounded(session.list_prompts())
        checks.equal(f"{p} prompts/list names", [pr.name for pr in prompts.prompts], ["plan_booking"])
        arguments = (prompts.prompts[0].arguments or []) if prompts.prompts else []
        checks.equal(
            f"{p} plan_booking arguments", [(a.name, bool(a.required)) for a in arguments], [("room", False)]
        )

    for room in ("Boardroom", None):
        label = f"{p} prompts/get plan_booking " + (f"room={room}" if room else "without room")
        with checks.step(label):
            got = await bounded(session.get_prompt("plan_booking", {"room": room} if room else None))
            checks.equal(f"{label}: two messages", len(got.messages), 2)
            first = got.messages[0].content
            first_text = first.text if isinstance(first, types.TextContent) else ""
            if room:
                checks.check(f"{label}: text mentions the room", room in first_text, f"text={first_text!r}")
            else:
                checks.check(
                    f"{label}: text points to list_rooms, names no room",
                    "list_rooms" in first_text and not any(r in first_text for r in ROOMS),
                    f"text={first_text!r}",
                )
            second = got.messages[1].content if len(got.messages) > 1 else None
            checks.check(
                f"{label}: second message embeds reservo://policy",
                isinstance(second, types.EmbeddedResource)
                and str(second.resource.uri) == "reservo://policy"
                and "booking policy" in getattr(second.resource, "text", ""),
                f"content={second!r}",
            )

    with checks.step(f"{p} resources/list"):
        resources = await bounded(session.list_resources())
        checks.equal(
            f"{p} resources/list uris",
            [str(r.uri) for r in resources.resources],
            ["reservo://policy", "reservo://rooms", "reservo://bookings"],
        )
    with checks.step(f"{p} resources/templates/list"):
        templates = await bounded(session.list_resource_templates())
        checks.equal(
            f"{p} resources/templates/list",
            [t.uri_template for t in templates.resource_templates],
            ["reservo://rooms/{room}"],
        )

    with checks.step(f"{p} read reservo://policy"):
        read = await bounded(session.read_resource("reservo://policy"))
        content = read.contents[0]
        checks.check(
            f"{p} read reservo://policy",
            len(read.contents) == 1
            and str(content.uri) == "reservo://policy"
            and content.mime_type == "text/markdown"
            and "# Reservo booking policy" in getattr(content, "text", ""),
            f"contents={read.contents!r}",
        )
    with checks.step(f"{p} read reservo://rooms"):
        read = await bounded(session.read_resource("reservo://rooms"))
        checks.equal(f"{p} read reservo://rooms", json.loads(read.contents[0].text), RATES)
    with checks.step(f"{p} read reservo://rooms/Studio"):
        read = await bounded(session.read_resource("reservo://rooms/Studio"))
        checks.check(
            f"{p} read reservo://rooms/Studio",
            str(read.contents[0].uri) == "reservo://rooms/Studio"
            and json.loads(read.contents[0].text) == RATES["Studio"],
            f"contents={read.contents!r}",
        )
    with checks.step(f"{p} read an unknown URI"):
        try:
            read = await bounded(session.read_resource("reservo://nowhere"))
        except MCPError as err:
            checks.check(f"{p} read an unknown URI raises MCPError (code {err.code})", True)
        else:
            checks.fail(f"{p} read an unknown URI raises MCPError", f"got a result: {read!r}")

    with checks.step(f"{p} complete prompt argument room"):
        done = await bounded(
            session.complete(PromptReference(type="ref/prompt", name="plan_booking"), {"name": "room", "value": "S"})
        )
        checks.equal(f"{p} complete plan_booking room 'S'", done.completion.values, ["Studio"])
    with checks.step(f"{p} complete template variable room"):
        done = await bounded(
            session.complete(
                ResourceTemplateReference(type="ref/resource", uri="reservo://rooms/{room}"),
                {"name": "room", "value": ""},
            )
        )
        checks.equal(f"{p} complete reservo://rooms/{{room}} room ''", sorted(done.completion.values), sorted(ROOMS))

    if mode == LEGACY:
        with checks.step(f"{p} logging/setLevel debug"):
            await bounded(session.set_logging_level("debug"))
            checks.check(f"{p} logging/setLevel debug", True)
            await bounded(session.call_tool("list_rooms", {}))
            params = await logs.wait_for(tool_log("list_rooms"))
            checks.equal(f"{p} tools/call logs at debug to carte.tools", params.level, "debug")
        with checks.step(f"{p} resources/subscribe"):
            await bounded(session.subscribe_resource("reservo://policy"))
            checks.check(f"{p} resources/subscribe reservo://policy", True)
        with checks.step(f"{p} resources/unsubscribe"):
            await bounded(session.unsubscribe_resource("reservo://policy"))
            checks.check(f"{p} resources/unsubscribe reservo://policy", True)

    # The connection is still healthy after everything above.
    with checks.step(f"{p} final tools/list"):
        listed = await bounded(session.list_tools())
        checks.equal(f"{p} connection still answers", len(listed.tools), len(EXPECTED_TOOLS))


async def run_mode(mode: str, command: list[str], workdir: str, checks: Checks) -> None:
    print(f"== {mode}", flush=True)
    database = os.path.join(workdir, f"reservo-{mode}.db")
    params = StdioServerParameters(
        command=command[0], args=command[1:], env={"RESERVO_DATABASE_URL": f"sqlite:{database}"}
    )
    logs = Logs()
    failed_before = len(checks.failed)
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            with anyio.fail_after(MODE_TIMEOUT):
                async with stdio_client(params, errlog=errlog) as (read, write):
                    async with ClientSession(
                        read,
                        write,
                        read_timeout_seconds=CALL_TIMEOUT,
                        message_handler=logs.message_handler,
                        logging_callback=logs.logging_callback,
                        client_info=types.Implementation(name="carte-interop", version="0.1.0"),
                        log_level="debug" if mode == MODERN else None,
                    ) as session:
                        await exercise(mode, session, logs, checks)
        except Exception as err:  # noqa: BLE001
            checks.fail(f"[{mode}] session", describe(err))
            traceback.print_exc()
        transport_errors = [n for n in logs.notes if isinstance(n, Exception)]
        checks.check(
            f"[{mode}] no transport errors (every stdout line is JSON-RPC)",
            not transport_errors,
            "; ".join(describe(e) for e in transport_errors),
        )
        if len(checks.failed) > failed_before:
            errlog.seek(0)
            tail = errlog.read().splitlines()[-40:]
            print(f"-- server stderr ({mode}, last {len(tail)} lines):", flush=True)
            for line in tail:
                print(f"   {line}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=[LEGACY, MODERN, "all"], default="all")
    parser.add_argument("server", nargs=argparse.REMAINDER, help="-- <server command> [args...]")
    args = parser.parse_args()
    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    if not command:
        parser.error("missing the server command after --")
    modes = [LEGACY, MODERN] if args.mode == "all" else [args.mode]

    checks = Checks()
    with tempfile.TemporaryDirectory(prefix="carte-interop-") as workdir:
        for mode in modes:
            anyio.run(run_mode, mode, command, workdir, checks)

    if checks.failed:
        print(f"{len(checks.failed)} failed:", flush=True)
        for failure in checks.failed:
            print(f"  {failure}", flush=True)
    print(f"{checks.passed} passed, {len(checks.failed)} failed", flush=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
