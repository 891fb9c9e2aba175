#!/usr/bin/env bash
# bench.sh: run the capture benchmark on a throwaway PostgreSQL cluster, printing
# one table (and writing it as JSON to .synchro/bench.json). Extra arguments go
# to synchrobench (e.g. --seconds 5).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .synchro
exec scripts/with-cluster.sh sh -c 'go run ./cmd/synchrobench --database-url "$SYNCHRO_TEST_DATABASE_URL" --json .synchro/bench.json "$@"' synchrobench "$@"
