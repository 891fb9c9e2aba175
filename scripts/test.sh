#!/usr/bin/env bash
# test.sh: run every test against a throwaway PostgreSQL cluster started here and
# stopped on exit. Extra arguments go to `go test` (default ./...).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=$(mktemp -d /tmp/synchro-test-pg.XXXXXX)
chmod 755 "$dir"
port=${SYNCHRO_TEST_PG_PORT:-$((56000 + RANDOM % 2000))}
cleanup() {
  scripts/pgcluster.sh stop "$dir/data" || true
  rm -rf "$dir"
}
trap cleanup EXIT

url=$(PGCLUSTER_FAST=1 scripts/pgcluster.sh start "$dir/data" "$port")
export SYNCHRO_TEST_DATABASE_URL="$url"
echo "test cluster: $url" >&2

if [ $# -eq 0 ]; then set -- ./...; fi
go test -count=1 -timeout 45m "$@"
