package workers_test

import (
	"bufio"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil"
	"phonefleet/workers"
)

// TestWebhookDispatcherChildProcess is not a test on its own: the kill test
// runs the test binary again with PF_WEBHOOK_CHILD_DB set, and this sends
// one delivery, says so on standard output, and hangs before recording it
// until it is killed.
func TestWebhookDispatcherChildProcess(t *testing.T) {
	url := os.Getenv("PF_WEBHOOK_CHILD_DB")
	if url == "" {
		t.Skip("helper process for TestKilledBetweenSendAndRecordResendsWithTheSameID")
	}
	key, err := hex.DecodeString(os.Getenv("PF_WEBHOOK_CHILD_KEY"))
	if err != nil {
		t.Fatal(err)
	}
	box, err := domain.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(os.Getenv("PF_WEBHOOK_CHILD_CA"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	pool := smallPool(t, url, 2)
	d := workers.NewWebhookDispatcher(workers.WebhookDispatcherConfig{
		Pool: pool, Record: commands.NewApplication(commands.Capabilities{Webhooks: &webhooks.Capability{
			Webhooks: webhooks.Webhooks{Store: eventstore.New(pool), Box: box}}}).Webhooks.RecordWebhookAttempt, Box: box, ID: "child",
		Client: workers.NewWebhookClient(workers.WebhookClientOptions{Addresses: domain.AddressPolicy{AllowLoopback: true}, RootCAs: roots}),
	})
	workers.SetAfterSend(d, func(id string) {
		fmt.Println("sent " + id)
		_ = os.Stdout.Sync()
		select {} // until SIGKILL: the attempt is never recorded
	})
	_, _ = d.DispatchOnce(testutil.Context(t))
}

func TestKilledBetweenSendAndRecordResendsWithTheSameID(t *testing.T) {
	e := newEnv(t)
	rcv := newReceiver(t, nil)
	id, secret := e.subscribe(t, rcv.srv.URL)
	dlv := e.test(t, id)

	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rcv.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWebhookDispatcherChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PF_WEBHOOK_CHILD_DB="+e.url, "PF_WEBHOOK_CHILD_CA="+ca, "PF_WEBHOOK_CHILD_KEY="+hex.EncodeToString(e.key))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "sent ") {
				lines <- sc.Text()
				return
			}
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok || l != "sent "+dlv {
			cmd.Process.Kill()
			t.Fatalf("child said %q; want sent %s", l, dlv)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the child never sent the delivery")
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL between send and record
		t.Fatal(err)
	}
	_ = cmd.Wait()

	if n := len(rcv.requests()); n != 1 {
		t.Fatalf("receiver got %d requests from the child; want 1", n)
	}
	evs, err := e.store.Load(testutil.Context(t), domain.DeliveryStream(dlv), 1)
	if err != nil || len(evs) != 0 {
		t.Fatalf("got %d recorded attempts (%v); want none: the child died before recording", len(evs), err)
	}
	var attempt int
	var recorded bool
	var by string
	if err := e.pool.QueryRow(testutil.Context(t), `SELECT attempt, recorded, claimed_by FROM claims WHERE reaction = 'webhook-dispatcher' AND key = $1`, dlv).
		Scan(&attempt, &recorded, &by); err != nil || attempt != 1 || recorded || by != "child" {
		t.Fatalf("got claim attempt %d recorded %v by %q (%v); want attempt 1, unrecorded, held by the child", attempt, recorded, by, err)
	}

	d := e.dispatcher(t, rcv)
	if got := e.dispatch(t, d); len(got) != 0 {
		t.Fatalf("got %d attempts while the dead child's lease lasts; want none", len(got))
	}
	e.clock.Advance(2 * time.Minute) // past the one-minute lease
	got := e.dispatch(t, d)
	if len(got) != 1 || got[0].Event.Attempt != 1 {
		t.Fatalf("got %+v; want attempt 1 sent again", got)
	}
	reqs := rcv.requests()
	if len(reqs) != 2 {
		t.Fatalf("receiver got %d requests; want 2 (the resend)", len(reqs))
	}
	for i, r := range reqs {
		if r.header.Get("Service-Delivery") != dlv || string(r.body) != string(reqs[0].body) {
			t.Errorf("request %d: got delivery %q; want %s with the same body", i+1, r.header.Get("Service-Delivery"), dlv)
		}
	}
	if err := stripeCheck(reqs[1].body, reqs[1].header.Get("Service-Signature"), secret); err != nil {
		t.Errorf("the resend's signature: %v", err)
	}
	if row := e.delivery(t, dlv); row.Status != domain.DeliveryDelivered || row.Attempts != 1 {
		t.Fatalf("got %s after %d attempts; want delivered after 1", row.Status, row.Attempts)
	}
}
