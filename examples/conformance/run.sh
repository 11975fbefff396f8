#!/usr/bin/env bash
# Runs the official MCP conformance suite against carte serving this catalog
# over Streamable HTTP. Needs Node 22+ on PATH (or NODE_BIN pointing at its
# bin folder) and a release build (cargo build --release).
#
#   examples/conformance/run.sh                 # every active scenario, with the baseline
#   examples/conformance/run.sh --suite all     # also the pending ones
#   examples/conformance/run.sh --scenario tools-call-with-progress --verbose
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

SUITE="@modelcontextprotocol/conformance@${CONFORMANCE_VERSION:-0.1.16}"
CARTE="${CARTE:-target/release/carte}"
if [[ -n "${NODE_BIN:-}" ]]; then
  export PATH="$NODE_BIN:$PATH"
fi

LOG=$(mktemp "${TMPDIR:-/tmp}/carte-conformance.XXXXXX")
"$CARTE" serve --http 127.0.0.1:0 examples/conformance/catalog.yaml 2>"$LOG" &
PID=$!
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true' EXIT
URL=""
for _ in $(seq 100); do
  URL=$(sed -n 's|.*serving MCP at \(http://[^ ]*/mcp\).*|\1|p' "$LOG" | head -1)
  [[ -n "$URL" ]] && break
  kill -0 "$PID" 2>/dev/null || { echo "carte exited:"; cat "$LOG"; exit 2; }
  sleep 0.1
done
[[ -n "$URL" ]] || { echo "carte did not start:"; cat "$LOG"; exit 2; }
echo "carte at $URL (log: $LOG)"

args=("$@")
if [[ ${#args[@]} -eq 0 ]]; then
  args=(--expected-failures examples/conformance/expected-failures.yml)
fi
LOCAL=target/conformance/node_modules/.bin/conformance   # what .ci/run installs
if [[ -x "$LOCAL" ]]; then
  "$LOCAL" server --url "$URL" "${args[@]}"
else
  npx --yes "$SUITE" server --url "$URL" "${args[@]}"
fi
