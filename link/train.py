#!/usr/bin/env python3
"""The sessions link/record-profile records carte's profile from.

    link/train.py CARTE CATALOG

Reservo's whole menu, get_quote most of all (the call benches/ceiling
measures), over stdio (pipelined, a 2025-06-18 session) and Streamable HTTP
(2026-07-28 requests without a session, then a 2025-06-18 session): what a
served call runs is what the profile calls hot. Each session checks its
answers, so a profile is never recorded from a carte that failed to serve.
"""

import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

QUOTES = 3000  # get_quote calls over stdio; half as many over HTTP


def request(id, method, params=None):
    message = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def menu(quotes):
    """The lists, then `quotes` quotes with the rest of the menu every 20th."""
    rooms, tiers = ["Focus", "Studio", "Boardroom"], ["basic", "pro"]
    messages = [request(1, "tools/list"), request(2, "prompts/list"), request(3, "resources/list"),
                request(4, "resources/templates/list")]
    id = 10
    for k in range(quotes):
        arguments = {"room": rooms[k % 3], "tier": tiers[k % 2], "hours": 1 + k % 5}
        messages.append(request(id, "tools/call", {"name": "get_quote", "arguments": arguments}))
        id += 1
        if k % 20 == 0:
            booking = {"room": "Focus", "tier": "basic", "hours": 2, "member": "ada"}
            for method, params in [
                ("tools/call", {"name": "list_rooms", "arguments": {}}),
                ("tools/call", {"name": "book_room", "arguments": booking}),
                ("resources/read", {"uri": "reservo://rooms/Studio"}),
                ("resources/read", {"uri": "reservo://bookings"}),
                ("prompts/get", {"name": "plan_booking", "arguments": {"room": "Focus"}}),
                ("tools/call", {"name": "get_quote", "arguments": {"room": "Attic", "tier": "basic", "hours": 1}}),
                ("tools/call", {"name": "cancel_booking", "arguments": {"id": k // 20 + 1}}),
            ]:
                messages.append(request(id, method, params))
                id += 1
    return messages


def check(session, answers, expected):
    results = sum(1 for answer in answers if "result" in answer)
    print(f"train: {session}: {results} results of {expected} requests", file=sys.stderr)
    if results != expected:
        sys.exit(f"train: {session}: expected {expected} results")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    carte, catalog = sys.argv[1], sys.argv[2]
    scratch = tempfile.mkdtemp()
    env = dict(os.environ, RESERVO_DATABASE_URL=f"sqlite:{scratch}/reservo.db")
    initialize = request(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                           "clientInfo": {"name": "train", "version": "1"}})
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}

    session = [initialize, initialized] + menu(QUOTES)
    served = subprocess.run([carte, "serve", catalog], input="".join(json.dumps(m) + "\n" for m in session),
                            capture_output=True, text=True, env=env, timeout=300)
    check("stdio", [json.loads(line) for line in served.stdout.splitlines()], len(session) - 1)

    port = 20000 + os.getpid() % 10000
    server = subprocess.Popen([carte, "serve", "--http", f"127.0.0.1:{port}", catalog], env=env,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                connection.request("GET", "/healthz")
                connection.getresponse().read()
                break
            except OSError:
                time.sleep(0.05)

        def post(message, headers):
            connection.request("POST", "/mcp", json.dumps(message), headers)
            response = connection.getresponse()
            body = response.read().decode()
            # JSON, or a stream of events whose last carries the answer.
            data = [line[5:] for line in body.splitlines() if line.startswith("data:") and line[5:].strip()]
            text = body if body.startswith("{") else (data[-1] if data else "{}")
            return response, json.loads(text)

        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "train", "version": "1"}}
        answers, messages = [], menu(QUOTES // 2)
        for message in messages:
            params = message.setdefault("params", {})
            params["_meta"] = meta
            headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                       "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": message["method"]}
            if "name" in params or "uri" in params:
                headers["Mcp-Name"] = params.get("name") or params["uri"]
            answers.append(post(message, headers)[1])
        check("http 2026-07-28", answers, len(messages))

        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        response, _ = post(initialize, headers)
        headers |= {"Mcp-Session-Id": response.getheader("Mcp-Session-Id") or "",
                    "MCP-Protocol-Version": "2025-06-18"}
        post(initialized, headers)
        messages = menu(QUOTES // 6)
        check("http session", [post(message, headers)[1] for message in messages], len(messages))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
