#!/usr/bin/env bash
# run.sh: run synchrod. Without SYNCHRO_DATABASE_URL it starts (or reuses) a local
# cluster under .synchro/pg (git-ignored) and creates the database "synchro".
# Then it applies migrations and starts synchrod on SYNCHRO_LISTEN (default
# 127.0.0.1:8080).
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p .synchro/bin
go build -o .synchro/bin/ ./cmd/synchrod ./cmd/synchroctl

if [ -z "${SYNCHRO_DATABASE_URL:-}" ]; then
  port=${SYNCHRO_PG_PORT:-54329}
  admin=$(scripts/pgcluster.sh start .synchro/pg "$port")
  psql_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)/psql
  if ! "$psql_bin" -X -q -At "$admin" -c "SELECT 1 FROM pg_database WHERE datname = 'synchro'" | grep -q 1; then
    "$psql_bin" -X -q "$admin" -c "CREATE DATABASE synchro"
  fi
  export SYNCHRO_DATABASE_URL="postgres://synchro@127.0.0.1:${port}/synchro?sslmode=disable"
  echo "local cluster: $SYNCHRO_DATABASE_URL (stop it with: make stop-db)" >&2
fi

.synchro/bin/synchroctl migrate
exec .synchro/bin/synchrod
