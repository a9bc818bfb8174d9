package provisioning_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"phonefleet/commands"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// TestInvoiceChargeRefundsAndDisputesAttributed (issue 26, found by the
// payments walk): a subscription's charges are its invoices', and carry
// none of the order's metadata; a refund or a dispute of one (a renewal's,
// say) is traced charge → invoice → subscription → order: through the
// subscription's metadata the invoice carries (subscription_details), or,
// without it, through the order that recorded the subscription. A partial
// refund is recorded on the charge's stream for the order (the phone
// stands); a full refund ends the order refunded and is recorded there
// too, as reconciliation compares refunds charge by charge; a dispute
// ends the order disputed.
func TestInvoiceChargeRefundsAndDisputesAttributed(t *testing.T) {
	e := newFulEnv(t)
	catalog, err := domain.ParseCatalog([]byte(fulCatalog))
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(testutil.StripeMock(t))
	if err != nil {
		t.Fatal(err)
	}
	// The provider: stripe-mock, but for the charges recorded here, read
	// with their invoice expanded as Stripe answers them.
	var mu sync.Mutex
	charges := map[string]string{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		body, ok := charges[strings.TrimPrefix(r.URL.Path, "/v1/charges/")]
		mu.Unlock()
		if ok && r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p := provisioning.New(provisioning.Config{Store: e.Store, Catalog: catalog, Devices: e.Fleet, WebhookSecret: fulSecret, Now: e.clock.Now,
		Payments: payments.New(payments.Config{SecretKey: "sk_test_invoices", APIBase: srv.URL, MaxNetworkRetries: -1}),
		ReadModels: testutil.ReadModels{RM: e.Runner, By: map[string]interface {
			WaitFor(context.Context, string, eventstore.Appended) error
		}{projections.FulfilmentsName: e.fr}}})
	e.p, e.app = p, commands.NewApplication(commands.Capabilities{Fleet: e.Fleet, Provisioning: p})
	org := domain.NewID(domain.PrefixOrganisation)

	// renewal records the charge of a renewal invoice of order's
	// subscription (sub_<order>, as paidOrder pays it), its metadata on the
	// invoice or not.
	renewal := func(order string, withMetadata bool) string {
		details := ""
		if withMetadata {
			details = `,"subscription_details":{"metadata":{"org_id":"` + org + `","order_id":"` + order + `"}}`
		}
		id := "ch_renewal_" + order
		mu.Lock()
		charges[id] = `{"id":"` + id + `","object":"charge","amount":2900,"currency":"usd","status":"succeeded","payment_intent":"pi_renewal_` +
			order + `","invoice":{"id":"in_renewal_` + order + `","object":"invoice","subscription":"sub_` + order + `"` + details + `}}`
		mu.Unlock()
		return id
	}
	refund := func(order, charge string, refunded int64) []byte {
		return stripeEvent(t, "evt_refund_"+charge, payments.EventChargeRefunded, map[string]any{"id": charge, "object": "charge",
			"amount": 2900, "amount_refunded": refunded, "refunded": refunded == 2900, "payment_intent": "pi_renewal_" + order,
			"invoice": "in_renewal_" + order, "currency": "usd", "status": "succeeded"}, e.clock.Now())
	}
	recorded := func(charge string) []domain.ChargeRefunded {
		var got []domain.ChargeRefunded
		e.streamEvents(t, domain.ChargeRefundStream(charge), func(ev domain.Event, _ int64) {
			if r, ok := ev.(domain.ChargeRefunded); ok {
				got = append(got, r)
			}
		})
		return got
	}

	// A partial refund of a renewal: recorded for the order; the phone stands.
	part := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	partOrder := e.fulfilment(t, org, part).OrderID
	ch := renewal(partOrder, true)
	if r := e.mustDeliver(t, refund(partOrder, ch, 100), provisioning.ProviderEventApplied); r.OrderID != partOrder {
		t.Errorf("partial refund applied to %q; want %s", r.OrderID, partOrder)
	}
	if got := recorded(ch); len(got) != 1 || got[0].OrderID != partOrder || got[0].OrgID != org || got[0].AmountRefunded != 100 ||
		got[0].InvoiceID != "in_renewal_"+partOrder || got[0].Full {
		t.Errorf("partial refund of a renewal recorded %+v; want 100 for order %s", got, partOrder)
	}
	if f := e.fulfilment(t, org, part); f.State == domain.FulfilmentCancelledState {
		t.Errorf("a partly refunded renewal's phone %+v; want it live", f)
	}

	// A full refund of a renewal: the order ends refunded, and the refund is recorded.
	full := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	fullOrder := e.fulfilment(t, org, full).OrderID
	ch = renewal(fullOrder, true)
	e.mustDeliver(t, refund(fullOrder, ch, 2900), provisioning.ProviderEventApplied)
	if c := e.cancelled(t, full); c.Reason != domain.EndRefunded {
		t.Errorf("a refunded renewal's phone: %+v; want cancelled refunded", c)
	}
	if got := recorded(ch); len(got) != 1 || got[0].OrderID != fullOrder || got[0].AmountRefunded != 2900 || !got[0].Full {
		t.Errorf("full refund of a renewal recorded %+v; want 2900 for order %s, full", got, fullOrder)
	}

	// A dispute of a renewal whose invoice carries no metadata: the order
	// that recorded the subscription.
	disputed := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	dispOrder := e.fulfilment(t, org, disputed).OrderID
	ch = renewal(dispOrder, false)
	e.mustDeliver(t, stripeEvent(t, "evt_dispute_"+ch, payments.EventDisputeCreated, map[string]any{"id": "dp_" + dispOrder,
		"object": "dispute", "amount": 2900, "charge": ch, "payment_intent": "pi_renewal_" + dispOrder, "currency": "usd",
		"status": "needs_response", "reason": "fraudulent"}, e.clock.Now()), provisioning.ProviderEventApplied)
	if c := e.cancelled(t, disputed); c.Reason != domain.EndDisputed {
		t.Errorf("a disputed renewal's phone: %+v; want cancelled disputed", c)
	}
	if s := e.orderState(t, org, dispOrder); s != domain.OrderEndedState {
		t.Errorf("a disputed renewal's order is %s; want ended", s)
	}
}
