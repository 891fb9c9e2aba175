#!/usr/bin/env bash
# run.sh: run synchrod. Without SYNCHRO_DATABASE_URL it starts (or reuses) a local
# cluster under .synchro/pg (git-ignored) and creates the database "synchro".
# Then it applies migrations and starts synchrod on SYNCHRO_LISTEN (default
# 127.0.0.1:8080). With EXAMPLE=<name> (make run EXAMPLE=notes) it also applies
# examples/<name>/schema.sql with psql once the capture stream has started.
set -euo pipefail
cd "$(dirname "$0")/.."

example_sql=""
if [ -n "${EXAMPLE:-}" ]; then
  example_sql="examples/$EXAMPLE/schema.sql"
  if [ ! -f "$example_sql" ]; then
    echo "run: no example \"$EXAMPLE\": $example_sql does not exist (examples: $(ls examples 2>/dev/null | paste -sd ' ' -))" >&2
    exit 1
  fi
fi

# psql of the newest local server binaries (PG_BIN wins), else the one on PATH.
psql_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)/psql
if [ -n "${PG_BIN:-}" ]; then
  psql_bin=$PG_BIN/psql
elif [ ! -x "$psql_bin" ]; then
  psql_bin=$(command -v psql || true)
fi

# The address synchrod will listen on: refuse at once when something listens
# there already (another make run, say), before migrating or starting anything.
listen=${SYNCHRO_LISTEN:-127.0.0.1:8080}
listen_host=${listen%:*}
listen_port=${listen##*:}
case "$listen_host" in "" | 0.0.0.0 | "[::]") listen_host=127.0.0.1 ;; esac
listening() { (: </dev/tcp/"$listen_host"/"$listen_port") 2>/dev/null; }
if listening; then
  echo "run: $listen is already in use (another make run?): stop what listens there, or set SYNCHRO_LISTEN" >&2
  exit 1
fi

mkdir -p .synchro/bin
go build -o .synchro/bin/ ./cmd/synchrod ./cmd/synchroctl

if [ -z "${SYNCHRO_DATABASE_URL:-}" ]; then
  port=${SYNCHRO_PG_PORT:-54329}
  admin=$(scripts/pgcluster.sh start .synchro/pg "$port")
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
    echo "dev token: make token USER=u1" >&2
  fi
fi

.synchro/bin/synchroctl migrate

if [ -n "$example_sql" ] && { [ -z "$psql_bin" ] || [ ! -x "$psql_bin" ]; }; then
  echo "run: EXAMPLE=$EXAMPLE needs psql (set PG_BIN or put psql on PATH)" >&2
  exit 1
fi
.synchro/bin/synchrod &
synchrod_pid=$!
trap 'kill -TERM "$synchrod_pid" 2>/dev/null || true' INT TERM
finish() { # waits for synchrod and exits with its status
  local status=0
  wait "$synchrod_pid" || status=$?
  while kill -0 "$synchrod_pid" 2>/dev/null; do # the wait was interrupted by a signal
    status=0
    wait "$synchrod_pid" || status=$?
  done
  if [ "$status" != 0 ] && [ "$status" != 143 ] && [ "$status" != 130 ]; then
    echo "run: synchrod exited with status $status (its last log line above says why)" >&2
  fi
  exit "$status"
}
stop() {
  kill -TERM "$synchrod_pid" 2>/dev/null || true
  finish
}

# The example is applied once the worker has started the capture stream (created
# the replication slot): rows written before that are never captured, so the
# example's seed rows would not reach any client.
if [ -n "$example_sql" ]; then
  stream_started() {
    [ "$("$psql_bin" -X -q -At "$SYNCHRO_DATABASE_URL" -c "SELECT EXISTS (SELECT FROM synchro.progress)" 2>/dev/null)" = t ]
  }
  for i in $(seq 1 1500); do
    kill -0 "$synchrod_pid" 2>/dev/null || finish
    stream_started && break
    if [ "$i" = 25 ]; then
      echo "run: waiting for the capture worker to start the stream before applying $example_sql" \
        "(creating the replication slot waits for the cluster's open transactions)" >&2
    fi
    sleep 0.2
  done
  if ! stream_started; then
    echo "run: warning: the capture stream has not started after 5 minutes; rows $example_sql writes now will not be captured" >&2
  fi
  if PGOPTIONS="-c client_min_messages=warning" "$psql_bin" -X -q -v ON_ERROR_STOP=1 -o /dev/null \
      "$SYNCHRO_DATABASE_URL" -f "$example_sql"; then
    echo "example $EXAMPLE: applied $example_sql (see examples/$EXAMPLE/README.md)" >&2
  else
    echo "run: applying $example_sql failed; stopping synchrod" >&2
    stop
  fi
fi

# Ready once synchrod answers on its address (it listens before anything else).
for i in $(seq 1 300); do
  kill -0 "$synchrod_pid" 2>/dev/null || finish
  if listening; then
    echo "run: ready on http://$listen_host:$listen_port (Ctrl-C stops synchrod; make stop-db stops the cluster)" >&2
    break
  fi
  sleep 0.1
done
finish
