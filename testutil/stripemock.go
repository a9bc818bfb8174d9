package testutil

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

const (
	// envStripeMock names the stripe-mock binary; `make test` sets it to
	// what scripts/ensure-stripe-mock.sh installed or found.
	envStripeMock = "PHONEFLEET_STRIPE_MOCK"
	// StripeMockVersion is the stripe-mock release that pairs with
	// stripe-go v79 (scripts/ensure-stripe-mock.sh installs it).
	StripeMockVersion = "v0.189.0"
	// stripeMockTestKey is a key stripe-mock accepts (any sk_test_ value).
	stripeMockTestKey = "sk_test_phonefleet"
)

// stripeMockServer runs stripe-mock on free loopback ports, HTTP and HTTPS
// (so that the default HTTPS port is not taken), and finds it ready once it
// answers an authenticated list.
var stripeMockServer = supervised{
	name: "stripe-mock",
	env:  envStripeMock,
	hint: "run `make test`, which installs it (scripts/ensure-stripe-mock.sh: go install github.com/stripe/stripe-mock@" +
		StripeMockVersion + "), or set " + envStripeMock + " to its path",
	args:      []string{"-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0"},
	listening: "Listening for HTTP at address: ",
	scheme:    "http",
	probe:     stripeMockLists,
	timeout:   2 * time.Minute,
}

// StripeMock returns the base URL (http://127.0.0.1:PORT) of a private
// stripe-mock, the payment provider's API as Stripe documents it, with
// fixed fixtures (it validates requests but stores nothing). One process
// serves the whole test binary: it is started on free loopback ports on
// the first call and stopped when the test process ends, however it ends
// (even by SIGKILL), by a supervisor holding a pipe from this process: a
// copy of the test binary, like the database reaper. Any sk_test_ key is
// accepted. The binary comes from PHONEFLEET_STRIPE_MOCK, PATH, GOBIN or
// GOPATH/bin; `make test` installs it when missing.
func StripeMock(t testing.TB) string {
	t.Helper()
	return stripeMockServer.url(t)
}

// stripeMockLists asks stripe-mock at addr for a list of customers; nil
// means that it answered 200.
func stripeMockLists(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/customers", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+stripeMockTestKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /v1/customers answered %s", res.Status)
	}
	return nil
}
