#!/usr/bin/env bash
# Runs the official MCP conformance suite against carte serving this catalog
# over Streamable HTTP. Needs Node 22+ on PATH (or NODE_BIN pointing at its
# bin folder) and a release build (cargo build --release).
#
#   examples/conformance/run.sh              # the three runs below, each against its baseline
#   examples/conformance/run.sh legacy       # 0.1.16: every active scenario (expected-failures.yml)
#   examples/conformance/run.sh 2026         # 0.2.0-alpha.12 --requirements 2026-07-28: the 37
#                                            # scored scenarios (expected-failures-2026.yml)
#   examples/conformance/run.sh extensions   # 0.2.0-alpha.12: each tasks-* scenario and
#                                            # http-custom-header-server-validation, one by one with
#                                            # --scenario NAME --force (expected-failures-2026-extensions.yml)
#   examples/conformance/run.sh legacy --suite all                  # other suite arguments
#   examples/conformance/run.sh 2026 --scenario tasks-lifecycle --verbose
#
# A baseline lists what still fails (`scenario` or `scenario:check-id`); the
# suite fails the run when something else fails (a WARNING counts) or when a
# listed entry passes, so a baseline can only shrink. The last lines are one
# tally per run. `.ci/run` installs both suite versions under target/conformance;
# without them, npx fetches each version.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

HERE=examples/conformance
LEGACY_VERSION=0.1.16
MODERN_VERSION=0.2.0-alpha.12
CARTE="${CARTE:-target/release/carte}"
CATALOG="${CATALOG:-$HERE/catalog.yaml}"
RESULTS="${RESULTS:-target/conformance/results}"
if [[ -n "${NODE_BIN:-}" ]]; then
  export PATH="$NODE_BIN:$PATH"
fi

# Run and reported by --requirements 2026-07-28 but never scored there
# (requirements/2026-07-28.yaml `not_scored`, frozen): the extension run enforces these.
EXTENSION_SCENARIOS=(
  tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-state-removal
  tasks-mrtr-input tasks-request-headers tasks-dispatch-and-envelope tasks-status-notifications
  tasks-required-task-error tasks-mrtr-composition http-custom-header-server-validation
)
NOT_SCORED=("${EXTENSION_SCENARIOS[@]}" json-schema-2020-12 http-header-validation)

# The suite's CLI at VERSION: the copy .ci/run installed, else npx.
suite() {
  local version=$1
  shift
  local installed=target/conformance/node_modules/conformance-$version/dist/index.js
  if [[ -f "$installed" ]]; then
    node "$installed" "$@"
  else
    npx --yes "@modelcontextprotocol/conformance@$version" "$@"
  fi
}

mode=all
case "${1:-}" in
  legacy | 2026 | extensions | all) mode=$1; shift ;;
  -*) mode=legacy ;; # as before: suite arguments alone are for 0.1.16
  "") ;;
  *) echo "usage: $0 [legacy|2026|extensions|all] [suite arguments…]" >&2; exit 2 ;;
esac
if [[ $# -gt 0 && ( $mode == all || $mode == extensions ) ]]; then
  echo "suite arguments go with \`legacy\` or \`2026\`" >&2
  exit 2
fi

LOG=$(mktemp "${TMPDIR:-/tmp}/carte-conformance.XXXXXX")
"$CARTE" serve --http 127.0.0.1:0 "$CATALOG" 2>"$LOG" &
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

# With suite arguments: that run only, as asked, no baseline, no tally.
if [[ $# -gt 0 ]]; then
  version=$LEGACY_VERSION
  [[ $mode == 2026 ]] && version=$MODERN_VERSION
  suite "$version" server --url "$URL" "$@"
  exit
fi

failed=()
run_legacy() {
  echo
  echo "==> conformance $LEGACY_VERSION: every active scenario"
  rm -rf "$RESULTS/legacy"
  suite "$LEGACY_VERSION" server --url "$URL" --expected-failures "$HERE/expected-failures.yml" \
    -o "$RESULTS/legacy" || failed+=("$LEGACY_VERSION active")
}
run_2026() {
  echo
  echo "==> conformance $MODERN_VERSION: --requirements 2026-07-28"
  rm -rf "$RESULTS/2026"
  suite "$MODERN_VERSION" server --url "$URL" --requirements 2026-07-28 \
    --expected-failures "$HERE/expected-failures-2026.yml" -o "$RESULTS/2026" || failed+=("2026-07-28 requirements")
}
run_extensions() {
  rm -rf "$RESULTS/extensions"
  local scenario
  for scenario in "${EXTENSION_SCENARIOS[@]}"; do
    echo
    echo "==> conformance $MODERN_VERSION: --scenario $scenario --force"
    suite "$MODERN_VERSION" server --url "$URL" --scenario "$scenario" --force \
      --expected-failures "$HERE/expected-failures-2026-extensions.yml" -o "$RESULTS/extensions" ||
      failed+=("$scenario")
  done
}

# One line per run: scenarios without a FAILURE, and the checks by status.
tally() {
  python3 - "$@" <<'EOF'
import json, pathlib, re, sys
name, folder, keep, skip = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3], set(sys.argv[4].split())
scenarios, passed, counts = 0, 0, {}
for checks in sorted(folder.glob("*/checks.json")):
    scenario = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", checks.parent.name).removeprefix("server-")
    if (scenario in skip) != (keep == "only"):
        continue
    statuses = [check.get("status") for check in json.loads(checks.read_text())]
    scenarios += 1
    passed += "FAILURE" not in statuses
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
shown = ", ".join(f"{counts.get(s, 0)} {s.lower()}" for s in ("SUCCESS", "FAILURE", "WARNING", "SKIPPED"))
print(f"{name}: {passed}/{scenarios} scenarios without a failure; checks: {shown}")
EOF
}

case $mode in
  legacy) run_legacy ;;
  2026) run_2026 ;;
  extensions) run_extensions ;;
  all) run_legacy; run_2026; run_extensions ;;
esac

echo
echo "==> tallies"
[[ -d "$RESULTS/legacy" ]] && tally "conformance $LEGACY_VERSION, active suite" "$RESULTS/legacy" except ""
[[ -d "$RESULTS/2026" ]] && tally "conformance $MODERN_VERSION, 2026-07-28 scored" "$RESULTS/2026" except "${NOT_SCORED[*]}"
[[ -d "$RESULTS/extensions" ]] &&
  tally "conformance $MODERN_VERSION, tasks + custom headers" "$RESULTS/extensions" only "${EXTENSION_SCENARIOS[*]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "failed against the baseline: ${failed[*]}"
  exit 1
fi
echo "every run matches its baseline"
