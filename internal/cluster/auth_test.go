package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"phonefleet/internal/devices"
	"phonefleet/testutil"
)

// dialWith dials a node for h (nil: holding nothing) with creds on url,
// closed when the test ends, its log in logs.
func dialWith(t *testing.T, url, clusterID string, creds Credentials, h *holder, logs *testutil.SyncBuffer) *Node {
	t.Helper()
	if h == nil {
		h = &holder{name: "caller"}
	}
	opts, err := creds.Options()
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n, err := Start(t.Context(), Config{URL: url, ClusterID: clusterID, Secret: testSecret,
		Serve: h.Serve, Held: h.Held, Logger: logger, Name: "test " + h.name, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// The NATS server admits only the users its authorization names: an
// instance with the deployment's NKEY joins and forwards, one without
// credentials or with another key is refused, reaches no holder and
// serves nothing.
func TestOnlyInstancesWithCredentialsJoin(t *testing.T) {
	seed, public := testutil.NKeyUser(t)
	otherSeed, _ := testutil.NKeyUser(t)
	url := testutil.NATSConfigured(t, fmt.Sprintf("authorization { users = [ { nkey: %q } ] }\n", public))
	id := newClusterID(t)
	creds := Credentials{NkeySeedFile: seed}

	var logs testutil.SyncBuffer
	a, caller := joinAndForward(t, url, id, creds, &logs, "an instance with credentials")

	if nc, err := nats.Connect(url); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("a client without credentials connected (%v); want an authorization violation", err)
	}
	refuseIntruders(t, url, id, caller, map[string]Credentials{
		"no credentials": {},
		"another NKEY":   {NkeySeedFile: otherSeed},
	})
	if calls := a.calls(); len(calls) != 1 {
		t.Fatalf("the holder served %q; want only the member's call", calls)
	}
}

// With decentralised authentication (an operator trusted by the server,
// accounts signed by it, users by their account), an instance given its
// user's credentials file (SERVICE_NATS_CREDS) joins and forwards; a user
// of an account the server was never told of, or no credentials at all,
// is refused and serves nothing.
func TestInstancesJoinWithACredentialsFile(t *testing.T) {
	op := testutil.NewNATSOperator(t)
	op.Account("fleet", true)
	op.Account("stranger", false)
	url := testutil.NATSConfigured(t, op.ServerConf())
	id := newClusterID(t)

	var logs testutil.SyncBuffer
	a, caller := joinAndForward(t, url, id, Credentials{CredsFile: op.UserCreds("fleet")}, &logs, "an instance with a credentials file")

	refuseIntruders(t, url, id, caller, map[string]Credentials{
		"no credentials":               {},
		"a user of an unknown account": {CredsFile: op.UserCreds("stranger")},
	})
	if calls := a.calls(); len(calls) != 1 {
		t.Fatalf("the holder served %q; want only the member's call", calls)
	}
}

// refuseIntruders checks, for each of intruders' credentials, that an
// instance dialling with them is refused by the server (and logs it), can
// reach no holder, and serves nothing, not even caller's call to a host it
// claims to hold.
func refuseIntruders(t *testing.T, url, id string, caller *Node, intruders map[string]Credentials) {
	t.Helper()
	for name, creds := range intruders {
		t.Run(name, func(t *testing.T) {
			var intruderLogs testutil.SyncBuffer
			b := &holder{name: "B"}
			b.hold("gw.intruder")
			intruder := dialWith(t, url, id, creds, b, &intruderLogs)
			eventually(t, "the server's refusal, logged", func() bool {
				l := strings.ToLower(intruderLogs.String())
				return strings.Contains(l, "cannot reach the message bus") && strings.Contains(l, "authorization violation")
			})
			if _, err := forwardOnce(t, intruder, "sim", "perform_action", []byte("tap"), 2*time.Second); !errors.Is(err, devices.ErrNotDelivered) {
				t.Fatalf("the intruder's call: got %v; want not delivered", err)
			}
			if _, err := forwardOnce(t, caller, "gw.intruder", "perform_action", []byte("tap"), 5*time.Second); !errors.Is(err, devices.ErrNotDelivered) {
				t.Fatalf("a call to the intruder's host: got %v; want not delivered (nobody serves it)", err)
			}
			if calls := b.calls(); len(calls) != 0 {
				t.Fatalf("the intruder served %q", calls)
			}
		})
	}
}

// Over TLS with a CA made for the test, the server verifying clients'
// certificates: instances with the CA and a client certificate forward to
// each other; one that does not trust the server's CA, or brings no
// certificate, does not get on the bus.
func TestInstancesTalkOverTLS(t *testing.T) {
	pki := testutil.NewPKI(t)
	url := testutil.NATSConfigured(t, fmt.Sprintf("tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true, timeout: 5 }\n",
		pki.ServerCert, pki.ServerKey, pki.CAFile))
	id := newClusterID(t)
	creds := Credentials{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}

	var logs testutil.SyncBuffer
	a, _ := joinAndForward(t, url, id, creds, &logs, "over TLS")
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("a client without TLS connected; want it refused")
	}

	for _, tc := range []struct {
		name  string
		creds Credentials
		log   string
	}{
		{"not trusting the server's CA", Credentials{CertFile: pki.ClientCert, KeyFile: pki.ClientKey}, "certificate signed by unknown authority"},
		// The server closes the handshake; how the client words it varies.
		{"without a client certificate", Credentials{CAFile: pki.CAFile}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var outsiderLogs testutil.SyncBuffer
			outsider := dialWith(t, url, id, tc.creds, nil, &outsiderLogs)
			eventually(t, "a failed connection, logged", func() bool {
				return strings.Contains(outsiderLogs.String(), "cannot reach the message bus") && strings.Contains(outsiderLogs.String(), tc.log)
			})
			if _, err := forwardOnce(t, outsider, "sim", "perform_action", []byte("tap"), 2*time.Second); !errors.Is(err, devices.ErrNotDelivered) {
				t.Fatalf("the outsider's call: got %v; want not delivered", err)
			}
		})
	}
	if calls := a.calls(); len(calls) != 1 {
		t.Fatalf("the holder served %q; want only the member's call", calls)
	}
}

func TestCredentialsRefuseWhatCannotBeMeant(t *testing.T) {
	seed, _ := testutil.NKeyUser(t)
	missing := filepath.Join(t.TempDir(), "missing")
	notASeed := testutil.WritePEM(t, t.TempDir(), "x.pem", "CERTIFICATE", []byte("x"))
	for _, tc := range []struct {
		name  string
		creds Credentials
	}{
		{"creds and nkey", Credentials{CredsFile: seed, NkeySeedFile: seed}},
		{"missing creds file", Credentials{CredsFile: missing}},
		{"missing seed file", Credentials{NkeySeedFile: missing}},
		{"a seed file without a seed", Credentials{NkeySeedFile: notASeed}},
		{"certificate without key", Credentials{CertFile: notASeed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.creds.Options(); err == nil {
				t.Fatal("accepted; want an error")
			}
		})
	}
	if opts, err := (Credentials{}).Options(); err != nil || len(opts) != 0 {
		t.Fatalf("no credentials: got %d options, %v; want none", len(opts), err)
	}
}

// joinAndForward joins a holder of "sim" (A) and a caller to the bus with
// creds, and fails the test unless a call from the caller reaches A; it
// returns A and the caller.
func joinAndForward(t *testing.T, url, id string, creds Credentials, logs *testutil.SyncBuffer, what string) (*holder, *Node) {
	t.Helper()
	a := &holder{name: "A"}
	a.hold("sim")
	dialWith(t, url, id, creds, a, logs)
	caller := dialWith(t, url, id, creds, nil, logs)
	if got := string(forwardEventually(t, caller, "sim", "observe_device", []byte("x"))); got != "A observe_device x" {
		t.Fatalf("%s: got %q; want A's echo", what, got)
	}
	return a, caller
}
