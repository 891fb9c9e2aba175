#!/usr/bin/env bash
# test.sh: run every test against a throwaway PostgreSQL cluster started here and
# stopped on exit. Extra arguments go to `go test` (default ./...).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then set -- ./...; fi
exec scripts/with-cluster.sh go test -count=1 -timeout 45m "$@"
