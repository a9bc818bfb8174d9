package provisioning_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil"
)

// Issue 26, item (h): an attempt whose process died (kill -9 mid-attempt)
// no longer holds its Idempotency-Key for CheckoutAbandonedAfter: the
// attempt runs under a session lock of its process's, and a repeat that
// finds the lock gone takes the attempt over at once. A live attempt is
// never taken over, however long it runs.

// runningAttempt records a checkout attempt under key as a process of the
// service starts one: the process takes the attempt's claim (a session
// advisory lock, on a connection of its own) and records checkout.started
// naming it. The event is written as its JSON, as the process wrote it.
// It returns the order and the connection holding the claim: closing it is
// the process dying.
func (e *checkoutEnv) runningAttempt(t *testing.T, key, body string) (string, *pgx.Conn) {
	t.Helper()
	req, err := domain.ReadPurchaseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	orderID := domain.NewID(domain.PrefixOrder)
	claim := "attempt:" + orderID
	conn, err := pgx.ConnectConfig(e.ctx, e.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(e.ctx) })
	var got bool
	if err := conn.QueryRow(e.ctx, `SELECT claim_try_lock($1)`, claim).Scan(&got); err != nil || !got {
		t.Fatalf("take the attempt's claim: %v, %v", got, err)
	}
	data, err := json.Marshal(domain.CheckoutStarted{OrgID: e.org, OrderID: orderID, FulfilmentIDs: []string{orderID},
		Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay, Quantity: 1}, Currency: "usd", UnitAmount: 400,
		IdempotencyKey: domain.DigestKey(key), RequestDigest: req.Digest(), At: e.clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatal(err)
	}
	fields["claim"] = claim
	if data, err = json.Marshal(fields); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Append(e.ctx, domain.AccountStream(e.org), eventstore.AnyVersion,
		eventstore.NewEvent{Type: "checkout.started", SchemaVersion: 1, OrgID: e.org, Data: data}); err != nil {
		t.Fatal(err)
	}
	return orderID, conn
}

// TestCheckoutAttemptOfADeadProcessIsTakenOverAtOnce: the repeat of a key
// whose attempt's process is gone is answered at once with the attempt's
// page (the attempt taken over), not idempotency_conflict for two
// minutes; the repeat of a key whose attempt's process is alive is
// idempotency_conflict (retryable) even past CheckoutAbandonedAfter, and
// is taken over once that process dies.
// die closes a process's connection as its death would and waits until
// the server has ended its session: a client's Close returns before the
// backend exits and lets go of its session's advisory locks, and "at once"
// means once the server knows the process is gone.
func (e *checkoutEnv) die(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	pid := conn.PgConn().PID()
	if err := conn.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	for wait := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var alive bool
		if err := e.pool.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive); err != nil {
			t.Fatal(err)
		}
		if !alive {
			return
		}
		if time.Now().After(wait) {
			t.Fatalf("the server still shows backend %d 10 s after its connection closed", pid)
		}
	}
}

func TestCheckoutAttemptOfADeadProcessIsTakenOverAtOnce(t *testing.T) {
	e := newCheckoutEnv(t, testutil.Pool(t))

	dead, conn := e.runningAttempt(t, "dead-key", checkoutDay)
	e.die(t, conn) // kill -9: its connections close
	a, err := e.checkout("dead-key", checkoutDay)
	if err != nil || a.OrderID != dead || a.CheckoutURL == "" || a.Replayed {
		t.Fatalf("repeat of a dead process's attempt: got %+v, %v; want attempt %s taken over at once, its page answered", a, err, dead)
	}
	if again, err := e.checkout("dead-key", checkoutDay); err != nil || !again.Replayed || again.CheckoutURL != a.CheckoutURL {
		t.Fatalf("got %+v, %v; want the page replayed", again, err)
	}

	e.org = domain.NewID(domain.PrefixOrganisation)
	live, conn := e.runningAttempt(t, "live-key", checkoutDay)
	e.clock.Advance(domain.CheckoutAbandonedAfter + time.Minute)
	_, err = e.checkout("live-key", checkoutDay)
	wantCheckoutCode(t, err, domain.CodeIdempotencyConflict, "yes")
	e.die(t, conn)
	a, err = e.checkout("live-key", checkoutDay)
	if err != nil || a.OrderID != live || a.CheckoutURL == "" || a.Replayed {
		t.Fatalf("once its process died: got %+v, %v; want attempt %s taken over", a, err, live)
	}
}
