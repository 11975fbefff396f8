-- wrk script: one 2026-07-28 (stateless) `tools/call get_quote` per request,
-- as README "Performance" measures Streamable HTTP:
--   wrk -t2 -c64 -d10s --latency -s benches/wrk/get_quote.lua http://127.0.0.1:PORT/mcp
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = "get_quote"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_quote",'
  .. '"arguments":{"room":"Focus","tier":"pro","hours":3},"_meta":{'
  .. '"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
  .. '"io.modelcontextprotocol/clientCapabilities":{},'
  .. '"io.modelcontextprotocol/clientInfo":{"name":"wrk","version":"1"}}}}'

-- Count answers that are not 200, or that carry no quote.
local failed = 0
function response(status, headers, body)
  if status ~= 200 or not string.find(body, "11250 cents", 1, true) then
    failed = failed + 1
    if failed == 1 then print("unexpected answer: " .. status .. " " .. body) end
  end
end
