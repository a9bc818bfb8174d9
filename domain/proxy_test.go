package domain

import (
	"testing"
	"time"
)

// TestProxyOrderKeyFollowsCheckoutsRules: within 24 hours a key answers its
// first order (replay); another request under it is a conflict (not
// retryable); a first attempt still running is a conflict (retryable)
// until it is abandoned, then taken over; a failed order frees its key;
// after 24 hours the key is free.
func TestProxyOrderKeyFollowsCheckoutsRules(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	var a ProxyAccount
	a.Apply(ProxyOrderStarted{OrgID: "org_a", OrderID: "pxo_1", ProxyID: "prx_1", IdempotencyKey: "k", RequestDigest: "d1", At: t0})
	if _, _, err := a.UseOrderKey("k", "d1", t0.Add(time.Second), nil); ErrorCode(err) != CodeIdempotencyConflict || !retryableOf(err) {
		t.Fatalf("running: %v; want a retryable idempotency_conflict", err)
	}
	if _, _, err := a.UseOrderKey("k", "d2", t0.Add(time.Second), nil); ErrorCode(err) != CodeIdempotencyConflict || retryableOf(err) {
		t.Fatalf("another request: %v; want a final idempotency_conflict", err)
	}
	if o, use, err := a.UseOrderKey("k", "d1", t0.Add(CheckoutAbandonedAfter), nil); err != nil || use != KeyRetake || o.OrderID != "pxo_1" {
		t.Fatalf("abandoned: %v %v %v; want it taken over", o, use, err)
	}
	a.Apply(ProxyOrderOpened{OrderID: "pxo_1", SessionID: "cs", CheckoutURL: "https://pay", ExpiresAt: t0.Add(time.Hour), At: t0})
	if o, use, err := a.UseOrderKey("k", "d1", t0.Add(23*time.Hour), nil); err != nil || use != KeyReplay || o.CheckoutURL != "https://pay" {
		t.Fatalf("open: %v %v %v; want the first answer replayed", o, use, err)
	}
	if _, use, err := a.UseOrderKey("k", "d2", t0.Add(CheckoutKeyWindow), nil); err != nil || use != KeyUnused {
		t.Fatalf("after 24 hours: %v %v; want the key free", use, err)
	}
	a.Apply(ProxyOrderFailed{OrderID: "pxo_1", Code: "expired", At: t0.Add(2 * time.Hour)})
	if _, use, err := a.UseOrderKey("k", "d2", t0.Add(3*time.Hour), nil); err != nil || use != KeyUnused {
		t.Fatalf("failed order: %v %v; want the key free", use, err)
	}
}

// TestProxyAssignmentsMoveAndRevoke: a device is behind one proxy at a
// time; an order's end revokes its proxy; operations are refused on a
// revoked proxy and unassigning a device not behind the proxy is
// wrong_state.
func TestProxyAssignmentsMoveAndRevoke(t *testing.T) {
	var a ProxyAccount
	for _, id := range []string{"1", "2"} {
		a.Apply(ProxyOrderStarted{OrgID: "org_a", OrderID: "pxo_" + id, ProxyID: "prx_" + id})
		a.Apply(ProxyOrderPaid{OrderID: "pxo_" + id})
		a.Apply(ProxyIssued{ProxyID: "prx_" + id, OrderID: "pxo_" + id})
	}
	a.Apply(ProxyAssigned{ProxyID: "prx_1", DeviceID: "dev_a"})
	a.Apply(ProxyAssigned{ProxyID: "prx_2", DeviceID: "dev_a"})
	if p, ok := a.ProxyOfDevice("dev_a"); !ok || p.ProxyID != "prx_2" {
		t.Fatalf("dev_a behind %v; want prx_2 only", p)
	}
	if p1, _ := a.Proxy("prx_1"); len(p1.Devices) != 0 {
		t.Fatalf("prx_1 still lists %v", p1.Devices)
	}
	if _, err := a.RequestOperation(ProxyOperationRequested{ProxyID: "prx_1", Kind: ProxyOpUnassign, DeviceIDs: []string{"dev_a"}}); ErrorCode(err) != CodeWrongState {
		t.Fatalf("unassigning a device not behind the proxy: %v; want wrong_state", err)
	}
	if _, err := a.RequestOperation(ProxyOperationRequested{ProxyID: "prx_1", Kind: "reboot"}); ErrorCode(err) != CodeInvalidArgument {
		t.Fatalf("unknown kind: %v; want invalid_argument", err)
	}
	if _, err := a.RequestOperation(ProxyOperationRequested{ProxyID: "prx_1", Kind: ProxyOpRenew}); ErrorCode(err) != CodeWrongState {
		t.Fatalf("renewing an order not cancelled: %v; want wrong_state", err)
	}
	a.Apply(ProxyOrderCancelScheduled{OrderID: "pxo_1"})
	if evs, err := a.RequestOperation(ProxyOperationRequested{ProxyID: "prx_1", Kind: ProxyOpRenew}); err != nil || len(evs) != 1 {
		t.Fatalf("renewing a cancelled order: %v, %v", evs, err)
	}
	a.Apply(ProxyOrderRenewed{OrderID: "pxo_1"})
	if o, _ := a.Order("pxo_1"); o.CancelAtPeriodEnd {
		t.Fatal("a renewed order still ends at the period's end")
	}
	a.Apply(ProxyOrderEnded{OrderID: "pxo_2", Reason: "subscription_ended"})
	if _, err := a.RequestOperation(ProxyOperationRequested{ProxyID: "prx_2", Kind: ProxyOpRotate}); ErrorCode(err) != CodeWrongState {
		t.Fatalf("rotating a revoked proxy: %v; want wrong_state", err)
	}
	if _, err := a.RequestOperation(ProxyOperationRequested{ProxyID: "prx_9", Kind: ProxyOpRotate}); ErrorCode(err) != CodeNotFound {
		t.Fatalf("unknown proxy: %v; want not_found", err)
	}
}

// TestProxyCatalogIsChecked: the embedded catalog's proxy products parse,
// and a bad one is refused when the catalog is read.
func TestProxyCatalogIsChecked(t *testing.T) {
	c := DefaultCatalog()
	p, ok := c.ProxyProduct("us-fixed")
	if !ok || p.Country != "US" || p.MonthlyPrice <= 0 || ProxyQuoteID(c.Currency, p) == "" {
		t.Fatalf("us-fixed: %+v %v", p, ok)
	}
	moved := p
	moved.MonthlyPrice++
	if ProxyQuoteID(c.Currency, moved) == ProxyQuoteID(c.Currency, p) {
		t.Error("a changed price keeps its quoteId")
	}
	if _, err := ParseCatalog([]byte(`{"currency":"usd","skus":[],"proxies":[{"id":"x","name":"X","kind":"sticky","country":"US","protocol":"http","monthlyPrice":1}]}`)); err == nil {
		t.Error("a proxy product of an unknown kind was accepted")
	}
}

func retryableOf(err error) bool {
	e := AsError(err)
	return e.Retryable != nil && *e.Retryable
}
