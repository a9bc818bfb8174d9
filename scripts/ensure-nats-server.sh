#!/usr/bin/env bash
# Makes sure nats-server (github.com/nats-io/nats-server, the message bus
# that carries device calls between instances) exists and prints its path
# on stdout: each test binary that needs NATS runs a private server
# (testutil.NATS). It is looked for in PHONEFLEET_NATS_SERVER (which, when
# set, must name it), on PATH, then in $(go env GOBIN) or
# $(go env GOPATH)/bin; when missing, `go install` puts it there (through
# the Go module proxy, built by the local toolchain). Any release from 2.2
# on serves (headers and no-responders); the one installed is below.
#
#   ensure-nats-server.sh        print the binary's path
set -euo pipefail
version=v2.15.2
module=github.com/nats-io/nats-server/v2
GO=${GO:-go}

gobin() {
  local d
  d=$("$GO" env GOBIN)
  if [ -z "$d" ]; then
    d=$("$GO" env GOPATH)
    d="${d%%:*}/bin"
  fi
  echo "$d"
}

# find_it prints the binary's path; status 1 when there is none, 2 when
# PHONEFLEET_NATS_SERVER names something else.
find_it() {
  if [ -n "${PHONEFLEET_NATS_SERVER:-}" ]; then
    if [ -f "$PHONEFLEET_NATS_SERVER" ] && [ -x "$PHONEFLEET_NATS_SERVER" ]; then
      echo "$PHONEFLEET_NATS_SERVER"
      return 0
    fi
    echo "PHONEFLEET_NATS_SERVER=$PHONEFLEET_NATS_SERVER is not an executable file; unset it to have nats-server installed" >&2
    return 2
  fi
  local p
  if p=$(command -v nats-server 2>/dev/null); then
    echo "$p"
    return 0
  fi
  p="$(gobin)/nats-server"
  if [ -f "$p" ] && [ -x "$p" ]; then
    echo "$p"
    return 0
  fi
  return 1
}

p=""
status=0
p=$(find_it) || status=$?
if [ "$status" = 2 ]; then exit 1; fi
if [ "$status" = 0 ]; then
  echo "$p"
  exit 0
fi
echo "installing nats-server $version (go install $module@$version)…" >&2
(cd / && GOTOOLCHAIN=local "$GO" install "$module@$version") >&2
p="$(gobin)/nats-server"
if [ -f "$p" ] && [ -x "$p" ]; then
  echo "$p"
  exit 0
fi
echo "nats-server not found after go install (looked for $p): install it with go install $module@$version and put it on PATH, or set PHONEFLEET_NATS_SERVER to its path" >&2
exit 1
