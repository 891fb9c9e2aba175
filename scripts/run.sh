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

# Without SYNCHRO_AUTH_MODE: jwt mode. Unless a JWT secret or key file is
# configured, use a development HS256 secret kept in .synchro/dev-jwt-secret
# (git-ignored, created once).
if [ -z "${SYNCHRO_AUTH_MODE:-}" ]; then
  export SYNCHRO_AUTH_MODE=jwt
  if [ -z "${SYNCHRO_JWT_HS256_SECRET:-}" ] && [ -z "${SYNCHRO_JWT_PUBLIC_KEY_FILE:-}" ]; then
    secret_file=.synchro/dev-jwt-secret
    if [ ! -s "$secret_file" ]; then
      (umask 077 && head -c 48 /dev/urandom | od -An -v -tx1 | tr -d ' \n' >"$secret_file.tmp" &&
        mv "$secret_file.tmp" "$secret_file")
    fi
    SYNCHRO_JWT_HS256_SECRET=$(cat "$secret_file")
    export SYNCHRO_JWT_HS256_SECRET
    echo "auth: jwt with the development secret in $secret_file" >&2
    echo "dev token: SYNCHRO_JWT_HS256_SECRET=\$(cat $secret_file) .synchro/bin/synchroctl dev-token --user u1" >&2
  fi
fi

.synchro/bin/synchroctl migrate
exec .synchro/bin/synchrod
