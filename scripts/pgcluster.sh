#!/usr/bin/env bash
# pgcluster.sh: start, reuse or stop a throwaway PostgreSQL cluster for Synchro.
#
#   scripts/pgcluster.sh start DIR PORT   initdb DIR if needed, start it, print its URL
#   scripts/pgcluster.sh stop DIR         stop the cluster in DIR (no error if not running)
#   scripts/pgcluster.sh crash DIR        immediate shutdown (no checkpoint: the next start
#                                         runs crash recovery), for fault-injection tests
#   scripts/pgcluster.sh url DIR PORT     print the URL only
#
# The cluster has wal_level=logical and room for many replication slots and WAL
# senders (tests create one slot per test). When invoked as root, postgres runs as
# an unprivileged user (postgres if it exists, else a created synchro-pg user).
# Binaries come from PG_BIN, else the newest /usr/lib/postgresql/*/bin.
# PGCLUSTER_FAST=1 (the throwaway clusters of scripts/with-cluster.sh: make test,
# bench, soak) turns fsync off and configures a synchronous standby that never
# connects, which only sessions asking for synchronous_commit = on wait for.
set -euo pipefail

cmd=${1:?usage: pgcluster.sh start|stop|crash|url DIR [PORT]}
dir=${2:?data directory required}
port=${3:-54329}

pg_bin=${PG_BIN:-}
if [ -z "$pg_bin" ]; then
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
fi
if [ -z "$pg_bin" ] || [ ! -x "$pg_bin/initdb" ]; then
  echo "pgcluster: no PostgreSQL server binaries found (set PG_BIN)" >&2
  exit 1
fi

run_user=""
if [ "$(id -u)" = 0 ]; then
  if id postgres >/dev/null 2>&1; then
    run_user=postgres
  else
    id synchro-pg >/dev/null 2>&1 || useradd --system --no-create-home synchro-pg
    run_user=synchro-pg
  fi
fi

as_pg() {
  if [ -n "$run_user" ]; then
    runuser -u "$run_user" -- "$@"
  else
    "$@"
  fi
}

url="postgres://synchro@127.0.0.1:${port}/postgres?sslmode=disable"

case "$cmd" in
  url)
    echo "$url"
    ;;
  start)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if [ -n "$run_user" ]; then
      chown "$run_user" "$dir"
      if ! as_pg test -w "$dir"; then
        echo "pgcluster: $dir is not reachable by $run_user; use a directory it can traverse" >&2
        exit 1
      fi
    fi
    if [ ! -f "$dir/PG_VERSION" ]; then
      as_pg "$pg_bin/initdb" -D "$dir" -U synchro --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$dir.initdb.log" 2>&1 ||
        { cat "$dir.initdb.log" >&2; exit 1; }
      cat >>"$dir/postgresql.conf" <<CONF
# added by scripts/pgcluster.sh
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
wal_level = logical
max_replication_slots = 100
max_wal_senders = 100
max_connections = 300
max_prepared_transactions = 20
shared_buffers = 256MB
log_min_messages = warning
log_statement = none
CONF
      if [ "${PGCLUSTER_FAST:-0}" = 1 ]; then
        printf 'fsync = off\nfull_page_writes = off\n' >>"$dir/postgresql.conf"
        # A synchronous standby that never connects, and synchronous_commit = local
        # by default so that no session waits for it: a test session that sets
        # synchronous_commit = on commits to the WAL (the worker decodes the
        # transaction) but stays invisible to other snapshots until it is
        # cancelled, the window a real synchronous standby opens on every commit.
        printf "synchronous_standby_names = 'synchro_test_absent_standby'\nsynchronous_commit = local\n" >>"$dir/postgresql.conf"
      fi
    fi
    if as_pg "$pg_bin/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
      echo "pgcluster: reusing running cluster in $dir" >&2
    else
      # Exit status 3: the server itself did not start (its port may be
      # taken); scripts/with-cluster.sh tries another port only then.
      as_pg "$pg_bin/pg_ctl" -D "$dir" -o "-p $port" -l "$dir/server.log" -w -t 60 start >&2 ||
        { tail -n 30 "$dir/server.log" >&2; exit 3; }
    fi
    echo "$url"
    ;;
  stop)
    if [ -f "$dir/PG_VERSION" ]; then
      as_pg "$pg_bin/pg_ctl" -D "$dir" -m fast -w stop >/dev/null 2>&1 || true
    fi
    ;;
  crash)
    as_pg "$pg_bin/pg_ctl" -D "$dir" -m immediate -w stop >&2
    ;;
  *)
    echo "pgcluster: unknown command $cmd" >&2
    exit 2
    ;;
esac
