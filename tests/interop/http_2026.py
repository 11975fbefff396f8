#!/usr/bin/env python3
"""Interop test: the official Python MCP SDK's 2026-07-28 client against carte over Streamable HTTP.

Usage:
    python tests/interop/http_2026.py -- <carte binary>
e.g.
    python tests/interop/http_2026.py -- target/release/carte

The script writes a small catalog to a temporary folder, starts
`<carte> serve --http 127.0.0.1:0 CATALOG`, and drives it with
`mcp.Client(url, mode="2026-07-28")` (no `initialize`, every request stateless):

  mrtr     an MRTR round trip (SEP-2322): `tools/call` of a tool with an `elicit`
           step answers `resultType: input_required` with one elicitation/create
           in `inputRequests` and a `requestState`; the SDK hands it to its
           elicitation callback and calls again with `inputResponses` and the
           state; the second answer is the tool's result, naming the answer.
  headers  SEP-2243: the SDK sends the argument of an `x-mcp-header` property in
           `Mcp-Param-Region` too (Base64 for non-ASCII), and carte accepts it.
  url      URL-mode elicitation: a step `elicit: { url, message }` reaches the
           SDK's elicitation callback as `mode: url` with the rendered URL and an
           `elicitationId`; the tool's result says the user went.
  apps     MCP Apps: the SDK reads a tool's `_meta.ui.resourceUri`, the `ui://`
           resource listed as `text/html;profile=mcp-app` with its CSP in
           `_meta.ui`, and reads the page.

Every wait is bounded. Each check prints one line; the last line is
`N passed, M failed`, and the exit status is non-zero if anything failed.
Requires mcp==2.3.0 (tests/interop/requirements.txt): the first release whose
client speaks 2026-07-28 with input-required results.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client

from checks import Checks, text_of

MODERN = "2026-07-28"
CALL_TIMEOUT = 15.0  # seconds for any single call or wait
START_TIMEOUT = 30.0  # seconds for carte to say where it listens

# Input steps without `key:` (their key is `step1`), so that the catalog loads
# on every carte that knows input steps.
CATALOG = """\
server: { name: interop-2026, version: 1.0.0 }
tools:
  - name: ask_name
    description: Asks the user's name, then greets them
    run:
      steps:
        - elicit:
            message: What is your name?
            requestedSchema:
              type: object
              properties:
                name: { type: string }
              required: [name]
      text: >-
        {% if elicited.action == "accept" %}Hello, {{ elicited.content.name }}!{% else
        %}No name ({{ elicited.action }}){% endif %}
  - name: find_rooms
    description: Finds rooms in a region (the region also travels in the Mcp-Param-Region header)
    inputSchema:
      type: object
      properties:
        region: { type: string, x-mcp-header: Region }
      required: [region]
    run:
      text: "rooms in {{ region }}"
  - name: pay
    description: Sends the user to a page to pay for an order
    inputSchema: { type: object, properties: { order: { type: string } }, required: [order] }
    run:
      steps:
        - elicit: { url: "https://shop.example/pay?order={{ order }}", message: "Pay for order {{ order }}" }
      text: "payment {{ elicited.action }}"
  - name: show_cart
    description: Shows the cart in the host's frame
    ui: ui://shop/cart.html
    run: { text: two items }
resources:
  - uri: ui://shop/cart.html
    name: cart
    app: { file: cart.html, csp: { connectDomains: ["https://api.shop.example"] } }
"""

CART_HTML = "<!doctype html><title>Cart</title><p>Two items</p>\n"


class Carte:
    """`carte serve --http 127.0.0.1:0 CATALOG`, and the URL it prints."""

    def __init__(self, binary: str, catalog: Path) -> None:
        self.process = subprocess.Popen(
            [binary, "serve", "--http", "127.0.0.1:0", str(catalog)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.url: str | None = None
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))
            if self.url is None and "serving MCP at " in line:
                self.url = line.split("serving MCP at ", 1)[1].split()[0]
                self.ready.set()
        self.ready.set()  # carte exited

    def wait_url(self) -> str:
        self.ready.wait(START_TIMEOUT)
        if self.url is None:
            raise RuntimeError("carte did not start:\n" + "\n".join(self.lines[-20:]))
        return self.url

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


async def run(url: str, checks: Checks) -> None:
    asked: list[types.ElicitRequestParams] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        if isinstance(params, types.ElicitRequestURLParams):
            return types.ElicitResult(action="accept")
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    client = Client(url, mode=MODERN, elicitation_callback=elicit, read_timeout_seconds=CALL_TIMEOUT)
    with anyio.fail_after(CALL_TIMEOUT * 6):
        async with client:
            # The round trip by hand first, to see each leg on the wire.
            try:
                with anyio.fail_after(CALL_TIMEOUT):
                    first = await client.session.call_tool("ask_name", {}, allow_input_required=True)
                if checks.check(
                    "mrtr: tools/call answers input_required",
                    isinstance(first, types.InputRequiredResult),
                    f"got {first!r}",
                ):
                    requests = first.input_requests or {}
                    checks.equal("mrtr: one input request", len(requests), 1)
                    checks.check(
                        "mrtr: it is elicitation/create asking the name",
                        all(getattr(r, "method", None) == "elicitation/create" for r in requests.values())
                        and "What is your name?" in str(requests),
                        f"got {requests!r}",
                    )
                    checks.check("mrtr: with a requestState", bool(first.request_state), f"got {first.request_state!r}")
            except Exception as err:  # noqa: BLE001 - any error is a failed check
                checks.error("mrtr: tools/call answers input_required", err)
            # Then as an application calls it: the SDK answers through the callback.
            asked.clear()
            try:
                with anyio.fail_after(CALL_TIMEOUT):
                    result = await client.call_tool("ask_name", {})
                checks.equal("mrtr: the elicitation callback ran once", len(asked), 1)
                checks.check("mrtr: the result is no error", not result.is_error, text_of(result))
                checks.equal("mrtr: the result names the answer", text_of(result), "Hello, Ada!")
            except Exception as err:  # noqa: BLE001
                checks.error("mrtr: tools/call round trip", err)
            # SEP-2243: the SDK reads x-mcp-header from tools/list and sends Mcp-Param-Region.
            try:
                with anyio.fail_after(CALL_TIMEOUT):
                    await client.list_tools()
                    plain = await client.call_tool("find_rooms", {"region": "north"})
                    encoded = await client.call_tool("find_rooms", {"region": "Zürich"})
                checks.equal("headers: Mcp-Param-Region accepted", text_of(plain), "rooms in north")
                checks.equal("headers: Base64 Mcp-Param-Region accepted", text_of(encoded), "rooms in Zürich")
            except Exception as err:  # noqa: BLE001
                checks.error("headers: x-mcp-header tool", err)
            # URL-mode elicitation: the SDK's callback gets the page to send the user to.
            asked.clear()
            try:
                with anyio.fail_after(CALL_TIMEOUT):
                    paid = await client.call_tool("pay", {"order": "A7"})
                url_asks = [a for a in asked if isinstance(a, types.ElicitRequestURLParams)]
                checks.equal("url: the callback got one URL-mode elicitation", len(url_asks), 1)
                if url_asks:
                    checks.equal("url: its URL is rendered", url_asks[0].url, "https://shop.example/pay?order=A7")
                    checks.equal("url: its message", url_asks[0].message, "Pay for order A7")
                    checks.check("url: with an elicitationId", bool(url_asks[0].elicitation_id), repr(url_asks[0]))
                checks.equal("url: the result says the user went", text_of(paid), "payment accept")
            except Exception as err:  # noqa: BLE001
                checks.error("url: URL-mode elicitation", err)
            # MCP Apps: the tool names its page; the page is listed and read as an app.
            try:
                with anyio.fail_after(CALL_TIMEOUT):
                    tools = await client.list_tools()
                    resources = await client.list_resources()
                    page = await client.read_resource("ui://shop/cart.html")
                cart = next((t for t in tools.tools if t.name == "show_cart"), None)
                ui = ((cart.meta or {}) if cart else {}).get("ui") or {}
                checks.equal("apps: the tool's _meta.ui.resourceUri", ui.get("resourceUri"), "ui://shop/cart.html")
                listed = next((r for r in resources.resources if str(r.uri) == "ui://shop/cart.html"), None)
                checks.equal("apps: listed as an app", listed.mime_type if listed else None, "text/html;profile=mcp-app")
                csp = (((listed.meta or {}) if listed else {}).get("ui") or {}).get("csp") or {}
                checks.equal("apps: its CSP", csp.get("connectDomains"), ["https://api.shop.example"])
                content = page.contents[0] if page.contents else None
                checks.equal("apps: the page", getattr(content, "text", None), CART_HTML)
                checks.equal("apps: read as an app", getattr(content, "mime_type", None), "text/html;profile=mcp-app")
            except Exception as err:  # noqa: BLE001
                checks.error("apps: MCP Apps", err)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("carte", nargs="+", help="-- then the carte binary")
    args = parser.parse_args()
    binary = args.carte[-1]
    checks = Checks()
    with tempfile.TemporaryDirectory(prefix="carte-interop-2026-") as folder:
        catalog = Path(folder) / "catalog.yaml"
        catalog.write_text(CATALOG, encoding="utf-8")
        (Path(folder) / "cart.html").write_text(CART_HTML, encoding="utf-8")
        carte = Carte(binary, catalog)
        try:
            url = carte.wait_url()
            print(f"carte at {url}", flush=True)
            anyio.run(run, url, checks)
        except Exception as err:  # noqa: BLE001
            checks.error("carte serves the catalog", err)
        finally:
            carte.stop()
    print(f"{checks.passed} passed, {len(checks.failed)} failed", flush=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
