#!/usr/bin/env bash
# Runs the test command given as arguments (make test: go test …) and, when
# the tests had to start testutil's throwaway PostgreSQL cluster, stops it
# afterwards, so `make test` leaves no server running that it started.
#
# The throwaway cluster lives in ${TMPDIR:-/tmp}/phonefleet-test-pg-<uid>
# (a link to where pgembed placed it, when the server's user could not
# reach that directory). A cluster already running when the tests began
# (someone's own `go test` runs, or another `make test`) is left running;
# so is one another `make test` is still using: every run holds a shared
# lock on that directory's .users file while it runs, and the one that
# ends last stops the cluster (without flock(1) nothing is stopped).
set -uo pipefail
dir="${TMPDIR:-/tmp}"
dir="${dir%/}/phonefleet-test-pg-$(id -u)"
pidfile="$dir/data/postmaster.pid"

running() {
  [ -f "$pidfile" ] || return 1
  local pid
  pid=$(head -n 1 "$pidfile" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

was_running=false
running && was_running=true
have_flock=false
if command -v flock >/dev/null 2>&1; then
  have_flock=true
  exec 9>>"$dir.users"
  flock -s 9
fi

"$@"
status=$?

if ! $was_running && $have_flock && running && flock -n -x 9; then
  pid=$(head -n 1 "$pidfile")
  echo "stopping the throwaway PostgreSQL these tests started ($dir, pid $pid)" >&2
  kill -INT "$pid" 2>/dev/null # fast shutdown
  for _ in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
fi
exit $status
