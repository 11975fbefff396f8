#!/usr/bin/env bash
# Streamable HTTP, one build against another: each serves its catalog on CPU 0
# while wrk (one thread, on CPU 1) sends the 2026-07-28 `tools/call get_quote`
# of get_quote.lua; rounds alternate between the two. Per round: requests per
# second, latency percentiles, and the server's CPU per request (from
# /proc/PID/stat). Pinning keeps the client from taking the server's CPU, which
# on a 2-core machine moves throughput and p99 by a third from run to run.
#
#   benches/wrk/compare.sh OLD_CARTE OLD_CATALOG NEW_CARTE NEW_CATALOG [ROUNDS] [CONNECTIONS]
#
# e.g. an older build from a worktree:
#   git worktree add /tmp/old d535f98 && (cd /tmp/old && cargo build --release)
#   benches/wrk/compare.sh /tmp/old/target/release/carte /tmp/old/catalogs/reservo.yaml \
#     target/release/carte catalogs/reservo.yaml 3 64
#
# Needs wrk, taskset (util-linux) and bc, and two CPUs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[[ $# -ge 4 ]] || { sed -n '2,13p' "${BASH_SOURCE[0]}" >&2; exit 2; }
old=("$1" "$2"); new=("$3" "$4"); rounds=${5:-3}; connections=${6:-64}
port=${PORT:-18199}
scratch=$(mktemp -d)
trap 'kill "${server:-}" 2>/dev/null || true; rm -rf "$scratch"' EXIT

# One round: NAME CARTE CATALOG
round() {
  local name=$1 carte=$2 catalog=$3
  rm -f "$scratch"/reservo.db*
  RESERVO_DATABASE_URL="sqlite:$scratch/reservo.db" taskset -c 0 "$carte" serve --http "127.0.0.1:$port" "$catalog" \
    2>"$scratch/$name.stderr" &
  server=$!
  for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.05; done
  taskset -c 1 wrk -t1 -c"$connections" -d2s -s "$here/get_quote.lua" "http://127.0.0.1:$port/mcp" >/dev/null
  local before after out answered
  before=$(awk '{print $14 + $15}' "/proc/$server/stat")
  out=$(taskset -c 1 wrk -t1 -c"$connections" -d8s --latency -s "$here/get_quote.lua" "http://127.0.0.1:$port/mcp")
  after=$(awk '{print $14 + $15}' "/proc/$server/stat")
  kill "$server"; wait "$server" 2>/dev/null || true
  if grep -q 'unexpected answer' <<<"$out"; then echo "$name: $(grep 'unexpected answer' <<<"$out")" >&2; exit 1; fi
  answered=$(awk '/requests in/ {print $1}' <<<"$out")
  printf '%-8s %9s req/s   p50 %8s  p90 %8s  p99 %8s   server CPU %5.1f µs/request\n' "$name" \
    "$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
    "$(awk '$1 == "50%" {print $2}' <<<"$out")" "$(awk '$1 == "90%" {print $2}' <<<"$out")" \
    "$(awk '$1 == "99%" {print $2}' <<<"$out")" \
    "$(echo "($after - $before) * 1000000 / $(getconf CLK_TCK) / $answered" | bc -l)"
}

echo "get_quote over Streamable HTTP, $connections connections, server on CPU 0, wrk on CPU 1"
for r in $(seq "$rounds"); do
  round old "${old[@]}"
  round new "${new[@]}"
done
