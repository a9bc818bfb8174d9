package proxies_test

import (
	"sync"
	"testing"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/proxies"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/forwardproxy"
	"phonefleet/internal/payments"
	"phonefleet/testutil"
)

// TestOrderOfADeadProcessIsTakenOverAtOnce: a managed proxy order runs
// under its claim (domain.AttemptClaim), as a checkout attempt does. While
// the provider is still opening its page, the process running it loses its
// claim's connection (it died: kill -9 closes it); a repeat of the key is
// then not idempotency_conflict but takes the order over at once and asks
// the provider itself, under the order's own provider key.
func TestOrderOfADeadProcessIsTakenOverAtOnce(t *testing.T) {
	pool := testutil.FreshPool(t)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	g := newGate(t)
	// Opened however the test ends, so the gated request never outlives it.
	openGate := sync.OnceFunc(func() { close(g.open) })
	t.Cleanup(openGate)
	fp, err := forwardproxy.Listen("127.0.0.1:0", forwardproxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	box, _ := domain.NewSecretBox(make([]byte, 32))
	h := proxies.New(proxies.Config{Store: store, Supplier: fp, Devices: unreachable{}, Box: box, PublicURL: "http://proxies.test",
		Payments: payments.New(payments.Config{SecretKey: "sk_test_gate", APIBase: g.url})}).Handlers(cqrs.Decorator{})
	ctx := testutil.Context(t)
	cmd := proxies.PlaceProxyOrder{Auth: domain.LocalOperator("org_d"), ProductID: "de-fixed", IdempotencyKey: "k-dead"}
	first := make(chan proxies.PlacedOrder, 1)
	go func() {
		o, _ := h.PlaceProxyOrder.Handle(ctx, cmd) // the dead process's: its answer is never given
		first <- o
	}()
	<-g.arrived
	var killed int
	if err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l
		JOIN advisory_keys k ON l.locktype = 'advisory' AND l.classid::bigint = 1885761652 AND l.objsubid = 2 AND l.objid::bigint = k.key
		WHERE k.name LIKE 'attempt:%' AND l.granted`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("ended %d claim connections, %v; want the running order's one", killed, err)
	}
	// The session ends (and its lock goes) as the server gets to it.
	for held := true; held; {
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN advisory_keys k ON l.locktype = 'advisory'
			AND l.classid::bigint = 1885761652 AND l.objsubid = 2 AND l.objid::bigint = k.key WHERE k.name LIKE 'attempt:%')`).
			Scan(&held); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("the ended session still holds the claim")
		}
		time.Sleep(10 * time.Millisecond)
	}

	taken := make(chan error, 1)
	var o proxies.PlacedOrder
	go func() {
		var err error
		o, err = h.PlaceProxyOrder.Handle(ctx, cmd)
		taken <- err
	}()
	select {
	case <-g.arrived: // the repeat asks the provider: taken over
	case err := <-taken:
		openGate()
		t.Fatalf("the repeat answered %v before asking the provider; want the order taken over at once", err)
	case <-time.After(30 * time.Second):
		openGate()
		t.Fatal("the repeat did not take the order over")
	}
	openGate()
	<-first
	if err := <-taken; err != nil || o.Order.State != domain.ProxyOrderAwaitingPayment || o.Order.CheckoutURL == "" {
		t.Fatalf("taken over: %+v, %v; want the order's page", o, err)
	}
}
