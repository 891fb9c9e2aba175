#!/usr/bin/env bash
# with-cluster.sh CMD...: start a throwaway PostgreSQL cluster (wal_level=logical,
# fsync off) in a temporary directory, export its URL as SYNCHRO_TEST_DATABASE_URL
# (and its data directory and port as SYNCHRO_TEST_PGDATA / SYNCHRO_TEST_PG_PORT,
# for tests that crash and restart it), run CMD, then stop the cluster and remove
# it whatever CMD did.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=$(mktemp -d /tmp/synchro-pg.XXXXXX)
chmod 755 "$dir"
port=${SYNCHRO_TEST_PG_PORT:-$((56000 + RANDOM % 3000))}
cleanup() {
  scripts/pgcluster.sh stop "$dir/data" || true
  rm -rf "$dir"
}
trap cleanup EXIT

SYNCHRO_TEST_DATABASE_URL=$(PGCLUSTER_FAST=1 scripts/pgcluster.sh start "$dir/data" "$port")
export SYNCHRO_TEST_DATABASE_URL SYNCHRO_TEST_PGDATA="$dir/data" SYNCHRO_TEST_PG_PORT="$port"
echo "throwaway cluster: $SYNCHRO_TEST_DATABASE_URL" >&2
"$@"
