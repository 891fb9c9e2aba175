#!/usr/bin/env bash
# bench.sh: start a throwaway PostgreSQL cluster and run the capture benchmark,
# printing one table (and writing it as JSON to .synchro/bench.json).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d /tmp/synchro-bench-pg.XXXXXX)
chmod 755 "$dir"
port=${SYNCHRO_BENCH_PG_PORT:-$((58000 + RANDOM % 1000))}
cleanup() {
  scripts/pgcluster.sh stop "$dir/data" || true
  rm -rf "$dir"
}
trap cleanup EXIT
url=$(PGCLUSTER_FAST=1 scripts/pgcluster.sh start "$dir/data" "$port")
mkdir -p .synchro
go run ./cmd/synchrobench --database-url "$url" --json .synchro/bench.json "$@"
