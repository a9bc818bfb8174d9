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

. "$(dirname "$0")/go-tool.sh"

status=0
p=$(go_tool_find nats-server PHONEFLEET_NATS_SERVER) || status=$?
if [ "$status" = 2 ]; then exit 1; fi
if [ "$status" = 0 ]; then
  echo "$p"
  exit 0
fi
go_tool_install nats-server PHONEFLEET_NATS_SERVER "$module" "$version"
