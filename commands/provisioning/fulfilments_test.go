package provisioning_test

import (
	"slices"
	"testing"
	"time"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// paidOrder opens an order of n phones for org and delivers its payment.
func (e *fulEnv) paidOrder(t *testing.T, org string, choice domain.PurchaseChoice, n int) []string {
	t.Helper()
	order, ids := e.openOrder(t, org, choice, n)
	mode, extra := "payment", map[string]any{"payment_intent": "pi_" + order}
	if choice.Billing == domain.BillingSubscription {
		mode, extra = "subscription", map[string]any{"subscription": "sub_" + order}
	}
	e.mustDeliver(t, stripeEvent(t, "evt_paid_"+order, payments.EventCheckoutCompleted, session(org, order, mode, "paid", extra),
		e.clock.Now()), provisioning.ProviderEventApplied)
	return ids
}

var (
	emulatorMonthly = domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription}
	emulatorDay     = domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay}
	cloudDay        = domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingDay}
)

func wantWrongState(t *testing.T, what string, err error, state string) {
	t.Helper()
	de := domain.AsError(err)
	if de.Code != domain.CodeWrongState || de.Extra["state"] != state {
		t.Errorf("%s: got %v (extra %v); want wrong_state with state %s", what, err, de.Extra, state)
	}
}

// TestCustomerCancelAndReturn: Return ends only a provisioned phone
// (notified); Cancel ends a live one (notified), except a cloud phone never
// delivered (cloud_undelivered, no event); an ended one answers
// wrong_state naming its state. Each ended phone's device leaves the
// organisation.
func TestCustomerCancelAndReturn(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	admin := fulAdmin(org)
	ctx := testutil.Context(t)
	c := e.app.Provisioning

	first := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	device := e.fulfilment(t, org, first).DeviceID
	v, err := c.ReturnFulfilment.Handle(ctx, provisioning.ReturnFulfilment{Auth: admin, FulfilmentID: first})
	if err != nil {
		t.Fatal(err)
	}
	if v.State != domain.FulfilmentCancelledState || v.CancelledReason != domain.EndCustomerReturn || v.DeviceID != "" {
		t.Errorf("returned: %+v", v)
	}
	if ev := e.cancelled(t, first); !ev.Notify || ev.By == nil || ev.By.ID != admin.UserID || ev.DeviceID != device {
		t.Errorf("fulfilment.cancelled %+v; want notified, by the admin, naming %s", ev, device)
	}
	if e.deviceVisible(t, org, device) {
		t.Errorf("returned phone's device %s is still the organisation's", device)
	}
	_, err = c.CancelFulfilment.Handle(ctx, provisioning.CancelFulfilment{Auth: admin, FulfilmentID: first})
	wantWrongState(t, "cancelling a returned phone", err, domain.FulfilmentCancelledState)
	_, err = c.ReturnFulfilment.Handle(ctx, provisioning.ReturnFulfilment{Auth: admin, FulfilmentID: first})
	wantWrongState(t, "returning a returned phone", err, domain.FulfilmentCancelledState)

	// The one cloud phone unit goes to the first order; the second awaits.
	shipped := e.paidOrder(t, org, cloudDay, 1)[0]
	waiting := e.paidOrder(t, org, cloudDay, 1)[0]
	if s := e.fulfilment(t, org, waiting).State; s != domain.FulfilmentAwaitingState {
		t.Fatalf("second cloud phone is %s; want awaiting_provisioning", s)
	}
	_, err = c.ReturnFulfilment.Handle(ctx, provisioning.ReturnFulfilment{Auth: admin, FulfilmentID: waiting})
	wantWrongState(t, "returning a phone never delivered", err, domain.FulfilmentAwaitingState)
	v, err = c.CancelFulfilment.Handle(ctx, provisioning.CancelFulfilment{Auth: admin, FulfilmentID: waiting})
	if err != nil || v.CancelledReason != domain.EndCloudUndelivered {
		t.Errorf("cancelling an undelivered cloud phone: %+v, %v; want cloud_undelivered", v, err)
	}
	if ev := e.cancelled(t, waiting); ev.Notify {
		t.Errorf("cloud_undelivered is notified: %+v", ev)
	}
	v, err = c.CancelFulfilment.Handle(ctx, provisioning.CancelFulfilment{Auth: admin, FulfilmentID: shipped})
	if err != nil || v.CancelledReason != domain.EndCustomerCancel {
		t.Errorf("cancelling a delivered cloud phone: %+v, %v; want customer_cancel", v, err)
	}
	if ev := e.cancelled(t, shipped); !ev.Notify {
		t.Errorf("customer_cancel is not notified: %+v", ev)
	}

	// An emulator never delivered is cancelled customer_cancel, notified.
	e.paidOrder(t, org, emulatorMonthly, 1)
	queued := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	if _, err := c.CancelFulfilment.Handle(ctx, provisioning.CancelFulfilment{Auth: admin, FulfilmentID: queued}); err != nil {
		t.Fatal(err)
	}
	if ev := e.cancelled(t, queued); ev.Reason != domain.EndCustomerCancel || !ev.Notify {
		t.Errorf("cancelling an awaiting emulator: %+v", ev)
	}
}

// TestFulfilmentPermissions: changes are a signed-in admin's only (a
// member, a key and an app are refused); reads are any signed-in
// person's and a key's with orders:place; another organisation's
// fulfilment answers exactly as one that does not exist, and is left
// unchanged.
func TestFulfilmentPermissions(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	id := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	ctx := testutil.Context(t)
	c, q := e.app.Provisioning, e.app.Provisioning

	member := fulAdmin(org)
	member.Role = domain.RoleMember
	key := domain.Auth{OrgID: org, Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: domain.AllScopes}
	readKey := domain.Auth{OrgID: org, Kind: domain.PrincipalAPIKey, APIKeyID: "key_2", Scopes: []domain.Scope{domain.ScopeDevicesRead}}
	app := domain.Auth{OrgID: org, Kind: domain.PrincipalApp, UserID: "u", ClientID: "client", Scopes: domain.AllScopes}
	for name, a := range map[string]domain.Auth{"member": member, "API key": key, "OAuth app": app} {
		_, err1 := c.CancelFulfilment.Handle(ctx, provisioning.CancelFulfilment{Auth: a, FulfilmentID: id})
		_, err2 := c.ReturnFulfilment.Handle(ctx, provisioning.ReturnFulfilment{Auth: a, FulfilmentID: id})
		_, err3 := c.CancelFulfilmentRenewal.Handle(ctx, provisioning.CancelFulfilmentRenewal{Auth: a, FulfilmentID: id})
		for _, err := range []error{err1, err2, err3} {
			if domain.ErrorCode(err) != domain.CodePermissionDenied {
				t.Errorf("%s: got %v; want permission_denied", name, err)
			}
		}
	}
	for name, a := range map[string]domain.Auth{"member": member, "key with orders:place": key} {
		page, err := q.ListFulfilments.Handle(ctx, provisioning.ListFulfilments{Auth: a})
		if err != nil || len(page.Fulfilments) != 1 {
			t.Errorf("%s lists %d, %v; want 1", name, len(page.Fulfilments), err)
		}
	}
	if _, err := q.ListFulfilments.Handle(ctx, provisioning.ListFulfilments{Auth: readKey}); domain.ErrorCode(err) != domain.CodePermissionDenied {
		t.Errorf("a key without orders:place: got %v; want permission_denied", err)
	}

	other := fulAdmin(domain.NewID(domain.PrefixOrganisation))
	missing := domain.NewID(domain.PrefixFulfilment)
	same := func(what string, foreign, none error) {
		t.Helper()
		f, n := domain.AsError(foreign), domain.AsError(none)
		if f.Code != domain.CodeNotFound || f.Code != n.Code || f.Message != n.Message || len(f.Extra) != len(n.Extra) {
			t.Errorf("%s: another organisation's answers %v; a missing one %v", what, foreign, none)
		}
	}
	for _, pair := range []struct {
		what string
		run  func(id string) error
	}{
		{"cancel", func(id string) error {
			_, err := c.CancelFulfilment.Handle(ctx, provisioning.CancelFulfilment{Auth: other, FulfilmentID: id})
			return err
		}},
		{"return", func(id string) error {
			_, err := c.ReturnFulfilment.Handle(ctx, provisioning.ReturnFulfilment{Auth: other, FulfilmentID: id})
			return err
		}},
		{"cancel-renewal", func(id string) error {
			_, err := c.CancelFulfilmentRenewal.Handle(ctx, provisioning.CancelFulfilmentRenewal{Auth: other, FulfilmentID: id})
			return err
		}},
		{"estimate-history", func(id string) error {
			_, err := q.GetFulfilmentEstimates.Handle(ctx, provisioning.GetFulfilmentEstimates{Auth: other, FulfilmentID: id})
			return err
		}},
		{"renewal-status", func(id string) error {
			_, err := q.GetFulfilmentRenewal.Handle(ctx, provisioning.GetFulfilmentRenewal{Auth: other, FulfilmentID: id})
			return err
		}},
	} {
		same(pair.what, pair.run(id), pair.run(missing))
	}
	if page, err := q.ListFulfilments.Handle(ctx, provisioning.ListFulfilments{Auth: other}); err != nil || len(page.Fulfilments) != 0 {
		t.Errorf("another organisation lists %+v, %v", page, err)
	}
	if f := e.fulfilment(t, org, id); f.State != domain.FulfilmentProvisionedState || f.RenewalCancelled {
		t.Errorf("refused calls changed the fulfilment: %+v", f)
	}
}

// TestCancelRenewal: a subscription phone renews monthly from its payment
// until its renewal is cancelled; then it ends at the end of the paid
// period. Repeating it changes nothing; a day pass does not renew.
func TestCancelRenewal(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	admin := fulAdmin(org)
	ctx := testutil.Context(t)
	c, q := e.app.Provisioning, e.app.Provisioning
	monthly := e.paidOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription,
		Model: "pixel-8", Region: "US"}, 1)[0]
	day := e.paidOrder(t, org, emulatorDay, 1)[0]

	e.clock.Advance(40 * 24 * time.Hour) // into the second month
	r, err := q.GetFulfilmentRenewal.Handle(ctx, provisioning.GetFulfilmentRenewal{Auth: admin, FulfilmentID: monthly})
	if want := fulStart.AddDate(0, 2, 0); err != nil || !r.Renews || !r.NextRenewalAt.Equal(want) || !r.EndsAt.IsZero() {
		t.Errorf("renewal status %+v, %v; want renews at %s", r, err, want)
	}
	r, err = c.CancelFulfilmentRenewal.Handle(ctx, provisioning.CancelFulfilmentRenewal{Auth: admin, FulfilmentID: monthly})
	if want := fulStart.AddDate(0, 2, 0); err != nil || r.Renews || !r.EndsAt.Equal(want) || !r.Fulfilment.RenewalCancelled {
		t.Errorf("after cancel-renewal %+v, %v; want ends at %s", r, err, want)
	}
	before := e.eventCount(t)
	if _, err := c.CancelFulfilmentRenewal.Handle(ctx, provisioning.CancelFulfilmentRenewal{Auth: admin, FulfilmentID: monthly}); err != nil {
		t.Fatal(err)
	}
	if after := e.eventCount(t); after != before {
		t.Errorf("repeating cancel-renewal recorded %d events", after-before)
	}
	if f := e.fulfilment(t, org, monthly); f.State != domain.FulfilmentProvisionedState || f.EndsAt == nil {
		t.Errorf("fulfilment %+v; want provisioned until endsAt", f)
	}
	_, err = c.CancelFulfilmentRenewal.Handle(ctx, provisioning.CancelFulfilmentRenewal{Auth: admin, FulfilmentID: day})
	wantWrongState(t, "cancel-renewal of a day pass", err, domain.FulfilmentProvisionedState)
	r, err = q.GetFulfilmentRenewal.Handle(ctx, provisioning.GetFulfilmentRenewal{Auth: admin, FulfilmentID: day})
	if err != nil || r.Renews || !r.EndsAt.Equal(fulStart.Add(domain.DayPassLength)) {
		t.Errorf("day pass renewal status %+v, %v", r, err)
	}
}

// TestOwnerRefund: the owner's refund cancels a phone without an event
// and retires its device; a second refund answers wrong_state.
func TestOwnerRefund(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	id := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	device := e.fulfilment(t, org, id).DeviceID
	f, err := e.app.Provisioning.RefundFulfilment.Handle(testutil.Context(t), provisioning.RefundFulfilment{FulfilmentID: id})
	if err != nil || f.State != domain.FulfilmentCancelledState || f.CancelledReason != domain.EndOwnerRefund {
		t.Fatalf("refund: %+v, %v", f, err)
	}
	if ev := e.cancelled(t, id); ev.Notify || ev.By == nil {
		t.Errorf("owner refund %+v; want no event, with its actor", ev)
	}
	if e.deviceVisible(t, org, device) {
		t.Error("the refunded phone's device is still the organisation's")
	}
	_, err = e.app.Provisioning.RefundFulfilment.Handle(testutil.Context(t), provisioning.RefundFulfilment{FulfilmentID: id})
	wantWrongState(t, "a second refund", err, domain.FulfilmentCancelledState)
	if _, err := e.app.Provisioning.RefundFulfilment.Handle(testutil.Context(t),
		provisioning.RefundFulfilment{FulfilmentID: domain.NewID(domain.PrefixFulfilment)}); domain.ErrorCode(err) != domain.CodeNotFound {
		t.Errorf("refunding nothing: got %v; want not_found", err)
	}
}

// TestListFulfilments: newest first, paged by cursor, filtered by state.
func TestListFulfilments(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	admin := fulAdmin(org)
	ctx := testutil.Context(t)
	var all []string
	for range 3 {
		ids := e.paidOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuCloudPhone, Billing: domain.BillingSubscription,
			Model: "pixel-8", Region: "US"}, 1)
		all = append(ids, all...) // newest first
		e.clock.Advance(time.Minute)
	}
	var got []string
	query := projections.FulfilmentQuery{Limit: 2}
	for pages := 0; ; pages++ {
		page, err := e.app.Provisioning.ListFulfilments.Handle(ctx, provisioning.ListFulfilments{Auth: admin, FulfilmentQuery: query})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range page.Fulfilments {
			got = append(got, f.FulfilmentID)
		}
		if page.Next == nil {
			break
		}
		if pages > 3 {
			t.Fatal("paging does not end")
		}
		query.Before = page.Next
	}
	if !slices.Equal(got, all) {
		t.Errorf("listed %v; want newest first %v", got, all)
	}
	page, err := e.app.Provisioning.ListFulfilments.Handle(ctx, provisioning.ListFulfilments{Auth: admin,
		FulfilmentQuery: projections.FulfilmentQuery{State: domain.FulfilmentAwaitingState}})
	if err != nil || len(page.Fulfilments) != 1 || page.Fulfilments[0].FulfilmentID != all[0] {
		t.Errorf("awaiting: %+v, %v; want only %s (the region has two units)", page, err, all[0])
	}
	if _, err := e.app.Provisioning.ListFulfilments.Handle(ctx, provisioning.ListFulfilments{Auth: admin,
		FulfilmentQuery: projections.FulfilmentQuery{State: "lost"}}); domain.ErrorCode(err) != domain.CodeInvalidArgument {
		t.Errorf("an unknown state: got %v; want invalid_argument", err)
	}
}

// TestSweepFulfilment: a freed unit goes to the first phone waiting for
// its slot; a passed estimate moves; a phone awaiting a week is given up
// (no event); a day pass ends 24 hours after delivery (no event); a
// subscription whose renewal was cancelled ends at its end (notified).
func TestSweepFulfilment(t *testing.T) {
	e := newFulEnv(t)
	org := domain.NewID(domain.PrefixOrganisation)
	admin := fulAdmin(org)
	ctx := testutil.Context(t)
	c := e.app.Provisioning
	sweep := func(id string) string {
		t.Helper()
		did, err := c.SweepFulfilment.Handle(ctx, provisioning.SweepFulfilment{FulfilmentID: id})
		if err != nil {
			t.Fatalf("sweep %s: %v", id, err)
		}
		return did
	}

	held := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	e.clock.Advance(time.Minute)
	next := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	e.clock.Advance(time.Minute)
	last := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	if did := sweep(next); did != provisioning.SweptNothing {
		t.Errorf("no unit is free, yet the sweep did %q", did)
	}
	if _, err := c.ReturnFulfilment.Handle(ctx, provisioning.ReturnFulfilment{Auth: admin, FulfilmentID: held}); err != nil {
		t.Fatal(err)
	}
	if did := sweep(last); did != provisioning.SweptNothing {
		t.Errorf("the freed unit went to the later phone (%q)", did)
	}
	if did := sweep(next); did != provisioning.SweptProvisioned {
		t.Fatalf("the freed unit: sweep did %q; want provisioned", did)
	}
	// The sweep is a background reaction that waits for no read model:
	// the device shows once the devices read model has caught up.
	e.Settle(t)
	if f := e.fulfilment(t, org, next); f.State != domain.FulfilmentProvisionedState || !e.deviceVisible(t, org, f.DeviceID) {
		t.Errorf("provisioned by the sweep: %+v", f)
	}

	e.clock.Advance(25 * time.Hour)
	if did := sweep(last); did != provisioning.SweptEstimate {
		t.Errorf("a passed estimate: sweep did %q", did)
	}
	est, err := e.app.Provisioning.GetFulfilmentEstimates.Handle(ctx, provisioning.GetFulfilmentEstimates{Auth: admin, FulfilmentID: last})
	if err != nil || len(est.Estimates) != 2 || est.Estimates[1].Reason != domain.EstimateMissed ||
		!est.Estimates[1].EstimatedBy.Equal(e.clock.Now().Add(24*time.Hour)) {
		t.Errorf("estimate history %+v, %v", est, err)
	}
	if did := sweep(last); did != provisioning.SweptNothing {
		t.Errorf("an estimate not passed yet: sweep did %q", did)
	}
	e.clock.Set(fulStart.Add(2*time.Minute + domain.DefaultUndeliveredAfter))
	if did := sweep(last); did != provisioning.SweptUndelivered {
		t.Fatalf("a week awaiting: sweep did %q; want undelivered", did)
	}
	if ev := e.cancelled(t, last); ev.Reason != domain.EndUndelivered || ev.Notify {
		t.Errorf("undelivered: %+v; want no event", ev)
	}

	// next holds the emulator unit: a day pass of a cloud phone, then.
	e.clock.Set(fulStart.Add(30 * 24 * time.Hour))
	day := e.paidOrder(t, org, cloudDay, 1)[0]
	device := e.fulfilment(t, org, day).DeviceID
	e.clock.Advance(domain.DayPassLength - time.Second)
	if did := sweep(day); did != provisioning.SweptNothing {
		t.Errorf("a day pass before its end: sweep did %q", did)
	}
	e.clock.Advance(time.Second)
	if did := sweep(day); did != provisioning.SweptEnded {
		t.Fatalf("a day pass at its end: sweep did %q", did)
	}
	if ev := e.cancelled(t, day); ev.Reason != domain.EndDayPassExpired || ev.Notify {
		t.Errorf("day pass: %+v; want day_pass_expired, no event", ev)
	}
	if e.deviceVisible(t, org, device) {
		t.Error("the expired day pass's device is still the organisation's")
	}

	r, err := c.CancelFulfilmentRenewal.Handle(ctx, provisioning.CancelFulfilmentRenewal{Auth: admin, FulfilmentID: next})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Set(r.EndsAt)
	if did := sweep(next); did != provisioning.SweptEnded {
		t.Fatalf("a cancelled renewal at its end: sweep did %q", did)
	}
	if ev := e.cancelled(t, next); ev.Reason != domain.EndSubscriptionEnded || !ev.Notify {
		t.Errorf("renewal end: %+v; want subscription_ended, notified", ev)
	}
	// Paid on 1 June, cancelled on 2 July: the paid period runs to 1 August.
	if want := fulStart.Add(time.Minute).AddDate(0, 2, 0); !r.EndsAt.Equal(want) {
		t.Errorf("the renewal cancelled on 2 July ends %s; want %s", r.EndsAt, want)
	}
}
