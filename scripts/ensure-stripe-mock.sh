#!/usr/bin/env bash
# Makes sure stripe-mock (github.com/stripe/stripe-mock, Stripe's API as
# its OpenAPI document describes it, with fixed fixtures) exists and prints
# its path on stdout: the payment tests run it as the payment provider
# (testutil.StripeMock). It is looked for in PHONEFLEET_STRIPE_MOCK (which,
# when set, must name it), on PATH, then in $(go env GOBIN) or
# $(go env GOPATH)/bin; when missing, `go install` puts the release that
# pairs with stripe-go v79 there (through the Go module proxy).
#
#   ensure-stripe-mock.sh                 print the binary's path
#   ensure-stripe-mock.sh --run CMD ARG…  also start it on STRIPE_MOCK_ADDR
#                                         (default 127.0.0.1:12111) and run
#                                         CMD with SERVICE_STRIPE_API_BASE
#                                         and SERVICE_STRIPE_SECRET_KEY
#                                         pointing at it (unless set), then
#                                         stop it (make run STRIPE_MOCK=1)
set -euo pipefail
version=v0.189.0
module=github.com/stripe/stripe-mock
GO=${GO:-go}

. "$(dirname "$0")/go-tool.sh"

ensure() {
  local p status=0
  p=$(go_tool_find stripe-mock PHONEFLEET_STRIPE_MOCK) || status=$?
  if [ "$status" = 2 ]; then exit 1; fi
  if [ "$status" = 0 ]; then
    # A go-installed binary records its module version; another release
    # may answer with other fixtures.
    local v
    v=$("$GO" version -m "$p" 2>/dev/null | awk -v m="$module" '$1 == "mod" && $2 == m { print $3; exit }') || true
    if [ -n "$v" ] && [ "$v" != "$version" ]; then
      echo "warning: $p is stripe-mock $v; the tests expect $version (go install $module@$version)" >&2
    fi
    echo "$p"
    return 0
  fi
  go_tool_install stripe-mock PHONEFLEET_STRIPE_MOCK "$module" "$version"
}

if [ "${1:-}" != --run ]; then
  ensure
  exit 0
fi
shift
bin=$(ensure)
addr=${STRIPE_MOCK_ADDR:-127.0.0.1:12111}
# Its HTTPS listener takes a free port, so that it never competes for 12112.
"$bin" -http-addr "$addr" -https-addr 127.0.0.1:0 >&2 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM
host=${addr%:*}
port=${addr##*:}
for _ in $(seq 1 100); do
  if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then break; fi
  kill -0 "$pid" 2>/dev/null || { echo "stripe-mock did not start on $addr" >&2; exit 1; }
  sleep 0.1
done
export SERVICE_STRIPE_API_BASE="${SERVICE_STRIPE_API_BASE:-http://$addr}"
export SERVICE_STRIPE_SECRET_KEY="${SERVICE_STRIPE_SECRET_KEY:-sk_test_phonefleet}"
echo "stripe-mock at $SERVICE_STRIPE_API_BASE (pid $pid)" >&2
"$@"
