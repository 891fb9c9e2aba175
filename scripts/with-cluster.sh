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
cleanup() {
  scripts/pgcluster.sh stop "$dir/data" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

# A random port below the kernel's ephemeral range (32768 and up on Linux), so
# that no outgoing connection holds it; another listener may, so a failed start
# tries other ports. SYNCHRO_TEST_PG_PORT fixes the port (one attempt).
for attempt in 1 2 3 4 5; do
  port=${SYNCHRO_TEST_PG_PORT:-$((20000 + RANDOM % 12000))}
  status=0
  SYNCHRO_TEST_DATABASE_URL=$(PGCLUSTER_FAST=1 scripts/pgcluster.sh start "$dir/data" "$port") || status=$?
  if [ "$status" = 0 ]; then
    break
  fi
  # Only a server that did not start (status 3) may have met a taken port;
  # missing binaries or a failed initdb fail the same way on every port.
  if [ "$status" != 3 ] || [ -n "${SYNCHRO_TEST_PG_PORT:-}" ] || [ "$attempt" = 5 ]; then
    echo "with-cluster: could not start PostgreSQL" >&2
    exit 1
  fi
  echo "with-cluster: port $port unavailable, trying another" >&2
done
export SYNCHRO_TEST_DATABASE_URL SYNCHRO_TEST_PGDATA="$dir/data" SYNCHRO_TEST_PG_PORT="$port"
echo "throwaway cluster: $SYNCHRO_TEST_DATABASE_URL" >&2
"$@"
