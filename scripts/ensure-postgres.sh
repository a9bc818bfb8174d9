#!/usr/bin/env bash
# Makes sure PostgreSQL server binaries (initdb, pg_ctl, postgres) exist, so
# the service can run its embedded cluster and tests a throwaway one.
# Installs them with the system package manager when it can; otherwise says
# exactly what to install. pgbench (for `make bench`) comes with them.
set -euo pipefail
have() {
  command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}
if have; then exit 0; fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing PostgreSQL server binaries (apt-get install postgresql)…" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql postgresql-contrib >/dev/null
  have && exit 0
fi
if command -v brew >/dev/null 2>&1; then
  brew install postgresql && exit 0
fi
echo "PostgreSQL server binaries not found: install them (Debian/Ubuntu: sudo apt-get install postgresql; macOS: brew install postgresql), or set DATABASE_URL" >&2
exit 1
