package provisioning

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/projections"
)

// Reconciliation for finance (`phonefleet fulfilments reconcile`): the
// payment provider's records (subscriptions, payment intents, refunds) are
// compared with the organisations' billing accounts (their orders, from
// the event store) and the fulfilments read model, and every difference is
// listed. A provider record is mapped to an order through the metadata the
// checkout writes (org_id, order_id) or through the subscription or payment
// intent id the order recorded when it was paid; a record with neither
// whose customer is one an account recorded is the organisation's but no
// order's (a renewal's or a metered invoice's payment); any other record is
// not this deployment's and is only counted.
//
// The provider is read first, then our records: a payment reaches the
// provider before its webhook reaches us, so reading ours last leaves the
// webhook the most time to have been applied. Whatever changes while
// reconciliation runs may still show as a difference that a second run no
// longer finds.

// Kinds of difference.
const (
	// ReconcileSubscriptionMissing: a paid subscription order whose
	// subscription the provider does not list.
	ReconcileSubscriptionMissing = "subscription_missing"
	// ReconcileSubscriptionEnded: a live fulfilment whose subscription
	// the provider has ended (canceled, incomplete_expired).
	ReconcileSubscriptionEnded = "subscription_ended"
	// ReconcileSubscriptionNotCurrent: a live fulfilment whose
	// subscription is not being paid (incomplete, unpaid, paused).
	ReconcileSubscriptionNotCurrent = "subscription_not_current"
	// ReconcileSubscriptionUnfulfilled: a subscription the provider will
	// renew (active, trialing, past_due; renewal not cancelled) whose
	// order has no live fulfilment: the customer is charged for nothing.
	ReconcileSubscriptionUnfulfilled = "subscription_unfulfilled"
	// ReconcileSubscriptionUnmatched: a renewing subscription of one of
	// our organisations that no order records.
	ReconcileSubscriptionUnmatched = "subscription_unmatched"
	// ReconcileSubscriptionAmountMismatch: a renewing subscription whose
	// items bill another quantity, price or currency than its order
	// (quantity × unit price, as checkout sold it).
	ReconcileSubscriptionAmountMismatch = "subscription_amount_mismatch"
	// ReconcilePaymentMissing: a paid day order whose payment the
	// provider does not list.
	ReconcilePaymentMissing = "payment_missing"
	// ReconcilePaymentNotSucceeded: a paid order whose payment has not
	// succeeded at the provider.
	ReconcilePaymentNotSucceeded = "payment_not_succeeded"
	// ReconcilePaymentUnmatched: a succeeded payment naming one of our
	// organisations or orders that no order records (no such order, or a
	// second payment for one).
	ReconcilePaymentUnmatched = "payment_unmatched"
	// ReconcilePaidNotRecorded: an order the provider has paid (a
	// succeeded payment, a renewing subscription) that our records do
	// not show paid: its webhook was never applied.
	ReconcilePaidNotRecorded = "paid_not_recorded"
	// ReconcileAmountMismatch: a payment whose amount or currency is not
	// the order's price times its quantity.
	ReconcileAmountMismatch = "amount_mismatch"
	// ReconcileRefundedButLive: the provider refunded more of an order's
	// payment than its cancelled phones and the partial refunds our records
	// show account for, and phones of it are still live.
	ReconcileRefundedButLive = "refunded_but_live"
	// ReconcileRefundMissing: phones cancelled as refunded (by the
	// provider or by the owner) whose refund the provider does not show.
	ReconcileRefundMissing = "refund_missing"
	// ReconcileFulfilmentWithoutOrder: a fulfilment of the read model
	// whose order no billing account holds.
	ReconcileFulfilmentWithoutOrder = "fulfilment_without_order"
	// ReconcileFulfilmentsMissing: a paid prepaid order whose fulfilments
	// are not all in the read model.
	ReconcileFulfilmentsMissing = "fulfilments_missing"
	// ReconcileLiveAfterOrderEnded: a live fulfilment of an order that
	// has ended.
	ReconcileLiveAfterOrderEnded = "fulfilment_live_order_ended"
	// ReconcileFulfilmentPriceMismatch: a fulfilment whose price or
	// currency is not its order's.
	ReconcileFulfilmentPriceMismatch = "fulfilment_price_mismatch"
	// ReconcileRefundAmountMismatch: a charge of ours of which the
	// provider refunded another amount than our records show (the
	// running total payment.charge_refunded recorded for a partial
	// refund, the whole payment for an order ended refunded, nothing for
	// a charge with neither): a refund whose webhook was never applied,
	// or one recorded that the provider does not show.
	ReconcileRefundAmountMismatch = "refund_amount_mismatch"
	// ReconcilePeriodMismatch: a live subscription phone whose renewal
	// (or, its renewal cancelled, its end) is not the end of the
	// provider's current period of its subscription.
	ReconcilePeriodMismatch = "period_mismatch"
	// ReconcileDisputeNotRecorded: a dispute of a payment of one of our
	// orders that our records do not show (the order did not end
	// disputed).
	ReconcileDisputeNotRecorded = "dispute_not_recorded"
	// ReconcileDisputeMissing: an order ended disputed whose payment the
	// provider lists no dispute of.
	ReconcileDisputeMissing = "dispute_missing"
)

// ReconcileKinds are every kind of difference reconciliation reports, in
// the order they are declared above (a test compares it with the
// declarations).
var ReconcileKinds = []string{
	ReconcileSubscriptionMissing, ReconcileSubscriptionEnded, ReconcileSubscriptionNotCurrent,
	ReconcileSubscriptionUnfulfilled, ReconcileSubscriptionUnmatched, ReconcileSubscriptionAmountMismatch,
	ReconcilePaymentMissing, ReconcilePaymentNotSucceeded, ReconcilePaymentUnmatched, ReconcilePaidNotRecorded,
	ReconcileAmountMismatch, ReconcileRefundedButLive, ReconcileRefundMissing, ReconcileFulfilmentWithoutOrder,
	ReconcileFulfilmentsMissing, ReconcileLiveAfterOrderEnded, ReconcileFulfilmentPriceMismatch,
	ReconcileRefundAmountMismatch, ReconcilePeriodMismatch, ReconcileDisputeNotRecorded, ReconcileDisputeMissing,
}

// reconcilePeriodSlack is how far our end of a subscription phone's
// period may lie from the provider's: ours counts from when the phone was
// recorded, the provider's from when the subscription was created, a few
// seconds to hours apart; a period off by a day or more is a difference.
const reconcilePeriodSlack = 24 * time.Hour

// ReconcileDifference is one difference between the provider's records and
// ours.
type ReconcileDifference struct {
	Kind    string
	OrgID   string
	OrderID string
	// FulfilmentIDs are the fulfilments concerned, if any.
	FulfilmentIDs []string
	// ProviderIDs are the provider records concerned (sub_…, pi_…, re_…).
	ProviderIDs []string
	// Detail says what differs, for people.
	Detail string
}

// String is the difference on one line.
func (d ReconcileDifference) String() string {
	var b strings.Builder
	b.WriteString(d.Kind)
	for _, kv := range [][2]string{{"org", d.OrgID}, {"order", d.OrderID},
		{"fulfilments", strings.Join(d.FulfilmentIDs, ",")}, {"provider", strings.Join(d.ProviderIDs, ",")}} {
		if kv[1] != "" {
			b.WriteString(" " + kv[0] + "=" + kv[1])
		}
	}
	b.WriteString(": " + d.Detail)
	return b.String()
}

// ReconcileReport is what reconciliation compared and every difference it
// found.
type ReconcileReport struct {
	// Accounts, Orders and Fulfilments are our records compared.
	Accounts, Orders, Fulfilments int
	// Subscriptions, Payments, Refunds and Disputes are the provider's
	// records read.
	Subscriptions, Payments, Refunds, Disputes int
	// InvoicePayments are payments of our customers that name no order
	// (a subscription renewal, a metered invoice): attributed to the
	// organisation, their amounts not compared.
	InvoicePayments int
	// NotOurs are provider records that name none of our organisations
	// and no customer of ours: not compared.
	NotOurs int
	// Differences, by organisation, order and kind.
	Differences []ReconcileDifference
	// ProviderReadAt is when the provider's lists were read.
	ProviderReadAt time.Time
}

// Clean reports whether nothing differs.
func (r ReconcileReport) Clean() bool { return len(r.Differences) == 0 }

// Reconcile asks for the comparison of the payment provider's records with
// the organisations' orders and fulfilments (phonefleet fulfilments
// reconcile).
type Reconcile struct{}

// ReconcileHandler handles Reconcile.
type ReconcileHandler struct{ *Provisioning }

// Handle compares the payment provider's records with the billing
// accounts and fulfilments and lists every difference. It writes nothing
// and advances no projection: our records are folded from the event log
// itself (the billing-* and fulfilment-* streams) inside one READ ONLY,
// REPEATABLE READ transaction, so they are one consistent snapshot and a
// write in it would fail. It is the operator's (no caller is authorised
// here: the CLI runs it). Errors: no payment provider configured, the
// provider did not answer or refused, the database failed; a report with
// differences is not an error.
func (p ReconcileHandler) Handle(ctx context.Context, _ Reconcile) (ReconcileReport, error) {
	if p.cfg.Payments == nil {
		return ReconcileReport{}, errors.New("reconcile: no payment provider is configured (SERVICE_STRIPE_SECRET_KEY)")
	}
	var in reconcileInput
	var err error
	in.readAt = p.now()
	if in.subs, err = p.cfg.Payments.ListSubscriptions(ctx); err != nil {
		return ReconcileReport{}, fmt.Errorf("reconcile: %w", err)
	}
	if in.pays, err = p.cfg.Payments.ListPayments(ctx); err != nil {
		return ReconcileReport{}, fmt.Errorf("reconcile: %w", err)
	}
	if in.refunds, err = p.cfg.Payments.ListRefunds(ctx); err != nil {
		return ReconcileReport{}, fmt.Errorf("reconcile: %w", err)
	}
	if in.disputes, err = p.cfg.Payments.ListDisputes(ctx); err != nil {
		return ReconcileReport{}, fmt.Errorf("reconcile: %w", err)
	}
	if err = p.readOurRecords(ctx, &in); err != nil {
		return ReconcileReport{}, fmt.Errorf("reconcile: read our records: %w", err)
	}
	if in.chargeSubs, err = p.traceCharges(ctx, in); err != nil {
		return ReconcileReport{}, fmt.Errorf("reconcile: %w", err)
	}
	return reconcile(in), nil
}

// traceCharges asks the provider which subscription's invoice each charge
// paid that a refund or a dispute is of, when no order's payment names
// it: a payment of one of our customers with no metadata of ours (an
// invoice's: a subscription's first or a renewal). One call per charge.
func (p *Provisioning) traceCharges(ctx context.Context, in reconcileInput) (map[string]string, error) {
	named := map[string]bool{}
	customers := map[string]bool{}
	for _, acc := range in.accounts {
		if acc.CustomerID != "" {
			customers[acc.CustomerID] = true
		}
		for _, o := range acc.Orders {
			if o.PaymentIntentID != "" {
				named[o.PaymentIntentID] = true
			}
		}
	}
	untraced := map[string]string{} // payment intent → its charge, for our customers' payments of no order
	for _, pm := range in.pays {
		if !named[pm.ID] && customers[pm.CustomerID] && pm.Metadata[payments.MetaOrderID] == "" && pm.ChargeID != "" {
			untraced[pm.ID] = pm.ChargeID
		}
	}
	var charges []string
	want := func(paymentID, chargeID string) {
		if c, ok := untraced[paymentID]; ok {
			if chargeID == "" {
				chargeID = c
			}
			if !slices.Contains(charges, chargeID) {
				charges = append(charges, chargeID)
			}
		}
	}
	for _, r := range in.refunds {
		want(r.PaymentID, r.ChargeID)
	}
	for _, d := range in.disputes {
		want(d.PaymentIntentID, d.ChargeID)
	}
	out := map[string]string{}
	for _, c := range charges {
		o, err := p.cfg.Payments.OriginOfCharge(ctx, c)
		if err != nil {
			return nil, err
		}
		if o.SubscriptionID != "" {
			out[c] = o.SubscriptionID
		}
	}
	return out, nil
}

// readOurRecords folds every billing account, every fulfilment and every
// charge's recorded refunds from the event log into in, in one read-only
// snapshot.
func (p *Provisioning) readOurRecords(ctx context.Context, in *reconcileInput) error {
	tx, err := p.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	like := func(prefix string) string {
		return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
	}
	rows, err := tx.Query(ctx, `SELECT position, stream_id, stream_version, event_type, schema_version, org_id, data
		FROM events WHERE stream_id LIKE $1 OR stream_id LIKE $2 OR stream_id LIKE $3 ORDER BY stream_id, stream_version`,
		like(domain.AccountStream("")), like(domain.FulfilmentStream("")), like(domain.ChargeRefundStream("")))
	if err != nil {
		return err
	}
	defer rows.Close()
	accounts := map[string]*domain.Account{}
	fulfilments := map[string]*domain.Fulfilment{}
	var accountOrder, fulfilmentOrder []string
	for rows.Next() {
		var e eventstore.Event
		var ver int16
		if err := rows.Scan(&e.Position, &e.StreamID, &e.StreamVersion, &e.Type, &ver, &e.OrgID, (*[]byte)(&e.Data)); err != nil {
			return err
		}
		e.SchemaVersion = int(ver)
		if err := p.store.Upcast(&e); err != nil {
			return err
		}
		ev, err := domain.Events.Decode(e.Type, e.SchemaVersion, e.Data)
		if err != nil {
			return fmt.Errorf("%s: %w", e.StreamID, err)
		}
		if strings.HasPrefix(e.StreamID, domain.ChargeRefundStream("")) {
			if r, ok := ev.(domain.ChargeRefunded); ok {
				in.chargeRefunds = append(in.chargeRefunds, r)
			}
			continue
		}
		if org, ok := strings.CutPrefix(e.StreamID, domain.AccountStream("")); ok {
			a := accounts[e.StreamID]
			if a == nil {
				a = &domain.Account{OrgID: org}
				accounts[e.StreamID], accountOrder = a, append(accountOrder, e.StreamID)
			}
			a.Apply(ev, e.StreamVersion)
			continue
		}
		f := fulfilments[e.StreamID]
		if f == nil {
			f = &domain.Fulfilment{}
			fulfilments[e.StreamID], fulfilmentOrder = f, append(fulfilmentOrder, e.StreamID)
		}
		f.Apply(ev, e.StreamVersion)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, s := range accountOrder {
		in.accounts = append(in.accounts, *accounts[s])
	}
	in.folded = map[string]domain.Fulfilment{}
	for _, s := range fulfilmentOrder {
		// fulfilment-device-… and any other stream under the prefix hold
		// no fulfilment.created: not a fulfilment.
		if f := fulfilments[s]; f.Exists() {
			in.fulfilments = append(in.fulfilments, fulfilmentView(*f))
			in.folded[f.FulfilmentID] = *f
		}
	}
	return tx.Commit(ctx)
}

// fulfilmentView is a fulfilment folded from its stream as the fulfilments
// read model shows it (the fields reconciliation compares, and those
// naming it).
func fulfilmentView(f domain.Fulfilment) projections.FulfilmentView {
	c := f.Choice
	v := projections.FulfilmentView{FulfilmentID: f.FulfilmentID, OrgID: f.OrgID, OrderID: f.OrderID, State: f.State,
		DeviceID: f.DeviceID, Sku: c.Sku, Billing: c.Billing, Model: c.Model, Region: c.Region, AddOns: c.AddOns,
		Currency: f.Currency, UnitAmount: f.UnitAmount, SubscriptionID: f.SubscriptionID, PaymentIntentID: f.PaymentIntentID,
		CreatedAt: f.At, RenewalCancelled: f.RenewalCancelled, CancelledReason: f.CancelledReason}
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	v.ProvisionedAt, v.EndsAt, v.CancelledAt = at(f.ProvisionedAt), at(f.EndsAt), at(f.CancelledAt)
	if c.Billing == domain.BillingDay && !f.ProvisionedAt.IsZero() {
		v.EndsAt = at(f.ProvisionedAt.Add(domain.DayPassLength))
	}
	return v
}

// reconcileInput is everything compared: the provider's records and ours.
type reconcileInput struct {
	subs        []payments.Subscription
	pays        []payments.Payment
	refunds     []payments.Refund
	disputes    []payments.Dispute
	accounts    []domain.Account
	fulfilments []projections.FulfilmentView
	// folded are the fulfilments as folded from their streams, by id
	// (their periods); chargeRefunds every payment.charge_refunded.
	folded        map[string]domain.Fulfilment
	chargeRefunds []domain.ChargeRefunded
	// chargeSubs names the subscription whose invoice a charge paid, for
	// the charges of refunds and disputes that no order's payment names
	// (read from the provider: charge → invoice → subscription).
	chargeSubs map[string]string
	readAt     time.Time
}

// reconcileOrder is one order with what belongs to it.
type reconcileOrder struct {
	org         string
	order       domain.Order
	fulfilments []projections.FulfilmentView
	sub         *payments.Subscription
	pay         *payments.Payment
	// refunded is what the provider refunded (or is refunding) of pay;
	// refundIDs name those refunds.
	refunded  int64
	refundIDs []string
	// partlyRefunded is the highest running total of partial refunds of
	// pay's charge our records show (payment.charge_refunded, not full):
	// refunds that leave the order's phones standing.
	partlyRefunded int64
}

// Subscription and payment intent statuses, as the provider names them.
var (
	subscriptionRenewing = []string{"active", "trialing", "past_due"}
	subscriptionEnded    = []string{"canceled", "incomplete_expired"}
	refundCounted        = []string{"succeeded", "pending"}
)

const paymentSucceeded = "succeeded"

// reconcile compares in and returns the report. It reads nothing.
func reconcile(in reconcileInput) ReconcileReport {
	rep := ReconcileReport{Accounts: len(in.accounts), Fulfilments: len(in.fulfilments),
		Subscriptions: len(in.subs), Payments: len(in.pays), Refunds: len(in.refunds), Disputes: len(in.disputes),
		ProviderReadAt: in.readAt}
	diff := func(d ReconcileDifference) { rep.Differences = append(rep.Differences, d) }

	// Our orders, and the customers our accounts recorded.
	orders := map[string]*reconcileOrder{}
	var ordered []*reconcileOrder
	customers := map[string]string{}
	knownOrg := map[string]bool{}
	for _, acc := range in.accounts {
		knownOrg[acc.OrgID] = true
		if acc.CustomerID != "" {
			customers[acc.CustomerID] = acc.OrgID
		}
		for _, o := range acc.Orders {
			ro := &reconcileOrder{org: acc.OrgID, order: o}
			orders[o.OrderID] = ro
			ordered = append(ordered, ro)
		}
	}
	rep.Orders = len(ordered)
	for _, f := range in.fulfilments {
		if ro, ok := orders[f.OrderID]; ok && ro.org == f.OrgID {
			ro.fulfilments = append(ro.fulfilments, f)
			continue
		}
		diff(ReconcileDifference{Kind: ReconcileFulfilmentWithoutOrder, OrgID: f.OrgID, OrderID: f.OrderID,
			FulfilmentIDs: []string{f.FulfilmentID},
			ProviderIDs:   slices.DeleteFunc([]string{f.SubscriptionID, f.PaymentIntentID}, func(id string) bool { return id == "" }),
			Detail:        fmt.Sprintf("the fulfilment (%s) names order %s, which no billing account of the organisation holds", f.State, f.OrderID)})
	}
	// ours names the organisation a provider record belongs to: that of
	// the order its metadata names, else the organisation its metadata
	// names, else its customer's; "" when it is not ours. An organisation
	// with no billing account here is not ours (another deployment sharing
	// the provider account).
	ours := func(meta map[string]string, customer string) string {
		if ro, ok := orders[meta[payments.MetaOrderID]]; ok {
			return ro.org
		}
		if org := meta[payments.MetaOrgID]; knownOrg[org] {
			return org
		}
		return customers[customer]
	}

	// Subscriptions: the one an order recorded when it was paid, else (an
	// order not paid yet) the one naming it in its metadata.
	bySubID := map[string]*reconcileOrder{}
	for _, ro := range ordered {
		if ro.order.SubscriptionID != "" {
			bySubID[ro.order.SubscriptionID] = ro
		}
	}
	for i := range in.subs {
		s := &in.subs[i]
		if ro, ok := bySubID[s.ID]; ok {
			ro.sub = s
			continue
		}
		if ro, ok := orders[s.Metadata[payments.MetaOrderID]]; ok && ro.order.SubscriptionID == "" && ro.sub == nil {
			ro.sub = s
			continue
		}
		org := ours(s.Metadata, s.CustomerID)
		if org == "" {
			rep.NotOurs++
			continue
		}
		if slices.Contains(subscriptionRenewing, s.Status) && !s.CancelAtPeriodEnd {
			diff(ReconcileDifference{Kind: ReconcileSubscriptionUnmatched, OrgID: org, OrderID: s.Metadata[payments.MetaOrderID],
				ProviderIDs: []string{s.ID},
				Detail:      fmt.Sprintf("the provider will renew this subscription (%s) but no order of the organisation records it", s.Status)})
		}
	}

	// Payments, in the same way.
	byPayID := map[string]*reconcileOrder{}
	for _, ro := range ordered {
		if ro.order.PaymentIntentID != "" {
			byPayID[ro.order.PaymentIntentID] = ro
		}
	}
	payOrder := map[string]*reconcileOrder{}
	for i := range in.pays {
		pm := &in.pays[i]
		if ro, ok := byPayID[pm.ID]; ok {
			ro.pay, payOrder[pm.ID] = pm, ro
			continue
		}
		if ro, ok := orders[pm.Metadata[payments.MetaOrderID]]; ok && ro.order.PaymentIntentID == "" && ro.pay == nil {
			ro.pay, payOrder[pm.ID] = pm, ro
			continue
		}
		org := ours(pm.Metadata, pm.CustomerID)
		switch {
		case org == "":
			rep.NotOurs++
		case pm.Metadata[payments.MetaOrderID] == "" && pm.Metadata[payments.MetaOrgID] == "":
			rep.InvoicePayments++
		case pm.Status == paymentSucceeded:
			detail := "a succeeded payment names an order the organisation does not have"
			if ro, ok := orders[pm.Metadata[payments.MetaOrderID]]; ok {
				first := ro.order.PaymentIntentID
				if first == "" && ro.pay != nil {
					first = ro.pay.ID
				}
				detail = "a second succeeded payment for an order already paid by " + first
			}
			diff(ReconcileDifference{Kind: ReconcilePaymentUnmatched, OrgID: org, OrderID: pm.Metadata[payments.MetaOrderID],
				ProviderIDs: []string{pm.ID}, Detail: fmt.Sprintf("%s (%d %s)", detail, pm.AmountReceived, pm.Currency)})
		}
	}
	for _, r := range in.refunds {
		ro, ok := payOrder[r.PaymentID]
		if !ok {
			ro, ok = orders[r.Metadata[payments.MetaOrderID]]
		}
		if !ok {
			continue // a refund of a payment that is no order's: counted only
		}
		if slices.Contains(refundCounted, r.Status) {
			ro.refunded += r.Amount
			ro.refundIDs = append(ro.refundIDs, r.ID)
		}
	}

	partial := map[string]int64{}
	for _, r := range in.chargeRefunds {
		if !r.Full && r.AmountRefunded < r.Amount {
			partial[r.ChargeID] = max(partial[r.ChargeID], r.AmountRefunded)
		}
	}
	for _, ro := range ordered {
		if ro.pay != nil && ro.pay.ChargeID != "" {
			ro.partlyRefunded = partial[ro.pay.ChargeID]
		}
	}

	for _, ro := range ordered {
		for _, d := range reconcileOrderDifferences(ro) {
			diff(d)
		}
		for _, d := range reconcilePeriods(ro, in.folded) {
			diff(d)
		}
	}
	payByID := map[string]*payments.Payment{}
	for i := range in.pays {
		payByID[in.pays[i].ID] = &in.pays[i]
	}
	// paymentOwner names the organisation and order of a payment intent
	// and its charge: the order it paid, else the order of the
	// subscription whose invoice the charge paid (traced at the
	// provider), else (an invoice's payment) its customer's organisation.
	paymentOwner := func(id, charge string, meta map[string]string) (org, order string) {
		if ro, ok := payOrder[id]; ok {
			return ro.org, ro.order.OrderID
		}
		if ro, ok := orders[meta[payments.MetaOrderID]]; ok {
			return ro.org, ro.order.OrderID
		}
		if ro, ok := bySubID[in.chargeSubs[charge]]; ok && charge != "" {
			return ro.org, ro.order.OrderID
		}
		if pm, ok := payByID[id]; ok {
			return ours(pm.Metadata, pm.CustomerID), ""
		}
		return ours(meta, ""), ""
	}
	for _, d := range reconcileChargeRefunds(in, ordered, payByID, paymentOwner) {
		diff(d)
	}
	for _, d := range reconcileDisputes(in, ordered, paymentOwner) {
		diff(d)
	}
	slices.SortStableFunc(rep.Differences, func(a, b ReconcileDifference) int {
		return cmp.Or(cmp.Compare(a.OrgID, b.OrgID), cmp.Compare(a.OrderID, b.OrderID), cmp.Compare(a.Kind, b.Kind))
	})
	return rep
}

// reconcileOrderDifferences compares one order with its fulfilments and
// the provider's records of it.
func reconcileOrderDifferences(ro *reconcileOrder) []ReconcileDifference {
	o := ro.order
	var out []ReconcileDifference
	// A difference about our records alone names the provider's objects
	// the order recorded (its subscription, its payment), so every line
	// carries the provider's id where one is known.
	recorded := slices.DeleteFunc([]string{o.SubscriptionID, o.PaymentIntentID}, func(id string) bool { return id == "" })
	add := func(kind string, fulfilments, provider []string, format string, args ...any) {
		if provider == nil && len(recorded) > 0 {
			provider = recorded
		}
		out = append(out, ReconcileDifference{Kind: kind, OrgID: ro.org, OrderID: o.OrderID,
			FulfilmentIDs: slices.Sorted(slices.Values(fulfilments)), ProviderIDs: provider, Detail: fmt.Sprintf(format, args...)})
	}
	var live, refundCancelled []string
	for _, f := range ro.fulfilments {
		if f.Live() {
			live = append(live, f.FulfilmentID)
		}
		if f.State == domain.FulfilmentCancelledState && (f.CancelledReason == domain.EndRefunded || f.CancelledReason == domain.EndOwnerRefund) {
			refundCancelled = append(refundCancelled, f.FulfilmentID)
		}
		if f.UnitAmount != o.UnitAmount || !strings.EqualFold(f.Currency, o.Currency) {
			add(ReconcileFulfilmentPriceMismatch, []string{f.FulfilmentID}, nil,
				"the fulfilment's price is %d %s, its order's %d %s", f.UnitAmount, f.Currency, o.UnitAmount, o.Currency)
		}
	}
	quantity := max(o.Choice.Quantity, 1)
	paid := o.State == domain.OrderPaidState
	settled := paid || o.State == domain.OrderEndedState

	if paid && domain.Prepaid(o.Choice.Billing) {
		want := o.FulfilmentIDs
		var missing []string
		for _, id := range want {
			if !slices.ContainsFunc(ro.fulfilments, func(f projections.FulfilmentView) bool { return f.FulfilmentID == id }) {
				missing = append(missing, id)
			}
		}
		if len(want) == 0 && len(ro.fulfilments) < quantity {
			add(ReconcileFulfilmentsMissing, nil, nil, "the paid order is for %d phones; the read model holds %d fulfilments of it",
				quantity, len(ro.fulfilments))
		} else if len(missing) > 0 {
			add(ReconcileFulfilmentsMissing, missing, nil, "the paid order's fulfilments are not in the read model")
		}
	}
	if o.State == domain.OrderEndedState && len(live) > 0 {
		add(ReconcileLiveAfterOrderEnded, live, nil, "the order ended (%s) but these phones are live", o.EndedReason)
	}

	switch o.Choice.Billing {
	case domain.BillingSubscription:
		s := ro.sub
		switch {
		case s == nil && paid:
			if o.SubscriptionID != "" {
				add(ReconcileSubscriptionMissing, live, []string{o.SubscriptionID}, "the provider does not list the subscription the order was paid with")
			} else {
				add(ReconcileSubscriptionMissing, live, nil, "the order was paid with no subscription recorded, and no subscription at the provider names it")
			}
		case s == nil:
		case settled && len(live) > 0 && (slices.Contains(subscriptionEnded, s.Status) || !s.EndedAt.IsZero()):
			add(ReconcileSubscriptionEnded, live, []string{s.ID}, "the provider ended the subscription (%s) but these phones are live", s.Status)
		case settled && len(live) > 0 && !slices.Contains(subscriptionRenewing, s.Status):
			add(ReconcileSubscriptionNotCurrent, live, []string{s.ID}, "the subscription is %s at the provider but these phones are live", s.Status)
		case settled && len(live) == 0 && slices.Contains(subscriptionRenewing, s.Status) && !s.CancelAtPeriodEnd:
			add(ReconcileSubscriptionUnfulfilled, nil, []string{s.ID},
				"the provider will renew the subscription (%s) but the order (%s) has no live phone", s.Status, o.State)
		case !settled && slices.Contains(subscriptionRenewing, s.Status):
			add(ReconcilePaidNotRecorded, nil, []string{s.ID}, "the provider has a %s subscription for the order, which is %s here", s.Status, o.State)
		}
		if s != nil && settled && len(live) > 0 && len(s.Items) > 0 && slices.Contains(subscriptionRenewing, s.Status) {
			// One subscription bills the order's phones that still renew
			// (issue 26: a phone that stops sets its quantity), at the
			// order's unit price. While none renews (its renewal
			// cancelled, the subscription ending at the period's end) the
			// quantity is the last one set and is not compared.
			renewing := 0
			for _, f := range ro.fulfilments {
				if f.Live() && !f.RenewalCancelled {
					renewing++
				}
			}
			var quantity int64
			var ids []string
			mismatch := false
			for _, it := range s.Items {
				quantity += it.Quantity
				ids = append(ids, it.ID)
				mismatch = mismatch || it.UnitAmount != o.UnitAmount || !strings.EqualFold(it.Currency, o.Currency)
			}
			if mismatch || (renewing > 0 && quantity != int64(renewing)) {
				var got []string
				for _, it := range s.Items {
					got = append(got, fmt.Sprintf("%d × %d %s", it.Quantity, it.UnitAmount, it.Currency))
				}
				add(ReconcileSubscriptionAmountMismatch, live, append([]string{s.ID}, ids...),
					"the subscription bills %s each period; the order's phones still renewing are %d × %d %s",
					strings.Join(got, " + "), renewing, o.UnitAmount, o.Currency)
			}
		}
	case domain.BillingDay:
		pm := ro.pay
		switch {
		case pm == nil && paid:
			add(ReconcilePaymentMissing, live, nil, "the provider lists no payment for the paid order")
		case pm == nil:
		case paid && pm.Status != paymentSucceeded:
			add(ReconcilePaymentNotSucceeded, live, []string{pm.ID}, "the order is paid here but its payment is %s at the provider", pm.Status)
		case !settled && pm.Status == paymentSucceeded:
			add(ReconcilePaidNotRecorded, nil, []string{pm.ID}, "the provider took the payment for the order, which is %s here", o.State)
		}
	}

	pm := ro.pay
	if pm == nil || o.Choice.Billing == domain.BillingPayg {
		return out
	}
	if pm.Status == paymentSucceeded {
		want := o.UnitAmount * int64(quantity)
		if pm.AmountReceived != want || !strings.EqualFold(pm.Currency, o.Currency) {
			add(ReconcileAmountMismatch, nil, []string{pm.ID}, "the provider took %d %s; the order is %d × %d %s = %d %s",
				pm.AmountReceived, pm.Currency, quantity, o.UnitAmount, o.Currency, want, o.Currency)
		}
	}
	// A refund is accounted for by the phones it cancelled, or by the
	// partial refunds our records show (a partial refund leaves the phones
	// standing; its total includes the cancelled phones' refunds).
	cancelledPhones := int64(quantity - len(live))
	if accounted := max(cancelledPhones*o.UnitAmount, ro.partlyRefunded); len(live) > 0 && ro.refunded > accounted {
		add(ReconcileRefundedButLive, live, append([]string{pm.ID}, ro.refundIDs...),
			"the provider refunded %d %s of the payment, more than the %d %s its %d cancelled phone(s) and the %d %s of partial refunds recorded account for, while these phones are live",
			ro.refunded, o.Currency, cancelledPhones*o.UnitAmount, o.Currency, cancelledPhones, ro.partlyRefunded, o.Currency)
	}
	if wantRefund := int64(len(refundCancelled)) * o.UnitAmount; len(refundCancelled) > 0 && ro.refunded < wantRefund {
		add(ReconcileRefundMissing, refundCancelled, append([]string{pm.ID}, ro.refundIDs...),
			"these phones were cancelled as refunded (%d %s) but the provider refunded %d %s of the payment",
			wantRefund, o.Currency, ro.refunded, o.Currency)
	}
	return out
}

// reconcilePeriods compares the end of the provider's current period of a
// renewing subscription with what our events record for each live phone
// of its order: the renewal the phone's stream gives for the period the
// provider's began, or the end its cancelled renewal recorded.
func reconcilePeriods(ro *reconcileOrder, folded map[string]domain.Fulfilment) []ReconcileDifference {
	s := ro.sub
	if s == nil || ro.order.Choice.Billing != domain.BillingSubscription || s.CurrentPeriodEnd.IsZero() ||
		!slices.Contains(subscriptionRenewing, s.Status) {
		return nil
	}
	var out []ReconcileDifference
	for _, v := range ro.fulfilments {
		f, ok := folded[v.FulfilmentID]
		if !ok || !v.Live() {
			continue
		}
		ours := f.PeriodEnd(s.CurrentPeriodStart)
		if f.RenewalCancelled {
			ours = f.EndsAt
		}
		if gap := ours.Sub(s.CurrentPeriodEnd).Abs(); gap < reconcilePeriodSlack {
			continue
		}
		what := "renews"
		if f.RenewalCancelled {
			what = "ends (its renewal cancelled)"
		}
		out = append(out, ReconcileDifference{Kind: ReconcilePeriodMismatch, OrgID: ro.org, OrderID: ro.order.OrderID,
			FulfilmentIDs: []string{v.FulfilmentID}, ProviderIDs: []string{s.ID},
			Detail: fmt.Sprintf("the provider's current period ends %s; our records say the phone %s %s",
				s.CurrentPeriodEnd.UTC().Format(time.RFC3339), what, ours.UTC().Format(time.RFC3339))})
	}
	return out
}

// chargeRecord is what is known of the refunds of one charge.
type chargeRecord struct {
	org, order, currency string
	// ours is what our records say is refunded; source says which record.
	ours   int64
	source string
	// provider is what the provider's refunds add up to; refundIDs name
	// them.
	provider  int64
	refundIDs []string
}

// reconcileChargeRefunds compares, charge by charge, what the provider
// refunded (full and partial refunds, the owner's included) with what our
// records show: the running total payment.charge_refunded recorded, or
// the whole payment of an order ended refunded.
func reconcileChargeRefunds(in reconcileInput, ordered []*reconcileOrder, payByID map[string]*payments.Payment,
	owner func(string, string, map[string]string) (string, string)) []ReconcileDifference {
	charges := map[string]*chargeRecord{}
	chargePayment := map[string]*payments.Payment{}
	for _, pm := range payByID {
		if pm.ChargeID != "" {
			chargePayment[pm.ChargeID] = pm
		}
	}
	var ids []string
	at := func(id string) *chargeRecord {
		c := charges[id]
		if c == nil {
			c = &chargeRecord{}
			charges[id], ids = c, append(ids, id)
		}
		return c
	}
	for _, r := range in.chargeRefunds {
		c := at(r.ChargeID)
		c.org, c.order, c.currency = r.OrgID, r.OrderID, r.Currency
		if r.AmountRefunded > c.ours {
			c.ours, c.source = r.AmountRefunded, "payment.charge_refunded"
		}
	}
	for _, ro := range ordered {
		if pm := ro.pay; pm != nil && pm.ChargeID != "" && ro.order.State == domain.OrderEndedState &&
			ro.order.EndedReason == domain.EndRefunded {
			c := at(pm.ChargeID)
			c.org, c.order, c.currency = ro.org, ro.order.OrderID, pm.Currency
			if pm.AmountReceived > c.ours {
				c.ours, c.source = pm.AmountReceived, "order ended refunded"
			}
		}
	}
	for _, r := range in.refunds {
		if !slices.Contains(refundCounted, r.Status) {
			continue
		}
		charge := r.ChargeID
		if pm, ok := payByID[r.PaymentID]; ok && charge == "" {
			charge = pm.ChargeID
		}
		if charge == "" {
			continue
		}
		c, known := charges[charge]
		if !known {
			org, order := owner(r.PaymentID, charge, r.Metadata)
			if org == "" {
				continue // not this deployment's charge: counted only
			}
			c = at(charge)
			c.org, c.order, c.currency = org, order, r.Currency
		}
		c.provider += r.Amount
		c.refundIDs = append(c.refundIDs, r.ID)
	}
	// A subscription's invoice refunded in full ends its order refunded
	// (the webhook traces the charge to the order) and records no running
	// total: the whole charge is what our records show refunded.
	endedRefunded := map[string]bool{} // subscriptions of orders ended refunded
	for _, ro := range ordered {
		if o := ro.order; o.State == domain.OrderEndedState && o.EndedReason == domain.EndRefunded && o.SubscriptionID != "" {
			endedRefunded[o.SubscriptionID] = true
		}
	}
	for _, id := range ids {
		pm := chargePayment[id]
		if c := charges[id]; c.source == "" && pm != nil && endedRefunded[in.chargeSubs[id]] && c.provider >= pm.AmountReceived {
			c.ours, c.source = pm.AmountReceived, "order ended refunded"
		}
	}
	var out []ReconcileDifference
	for _, id := range ids {
		c := charges[id]
		if c.ours == c.provider {
			continue
		}
		ours := "no refund"
		if c.source != "" {
			ours = fmt.Sprintf("%d %s refunded (%s)", c.ours, c.currency, c.source)
		}
		out = append(out, ReconcileDifference{Kind: ReconcileRefundAmountMismatch, OrgID: c.org, OrderID: c.order,
			ProviderIDs: append([]string{id}, c.refundIDs...),
			Detail:      fmt.Sprintf("the provider refunded %d %s of the charge; our records show %s", c.provider, c.currency, ours)})
	}
	return out
}

// disputeTaken are the dispute statuses of a charge taken back or being
// taken back; a warning (an inquiry) takes nothing.
var disputeTaken = []string{"needs_response", "under_review", "won", "lost"}

// reconcileDisputes lists the provider's disputes of our payments and
// compares them with our orders: charge.dispute.created ends the order
// disputed, and nothing undoes that when the dispute closes (won or lost),
// so every dispute that took money, open or closed, matches an order
// ended disputed. A dispute of a subscription's invoice's payment (a
// renewal's) is the order's whose subscription the invoice is of (traced
// at the provider: chargeSubs).
func reconcileDisputes(in reconcileInput, ordered []*reconcileOrder,
	owner func(string, string, map[string]string) (string, string)) []ReconcileDifference {
	var out []ReconcileDifference
	disputed := map[string]bool{}      // payment intents the provider lists a dispute of
	disputedOrder := map[string]bool{} // orders (org/order) the provider lists a dispute of a payment of
	for _, d := range in.disputes {
		if !slices.Contains(disputeTaken, d.Status) {
			continue
		}
		disputed[d.PaymentIntentID] = true
		org, order := owner(d.PaymentIntentID, d.ChargeID, d.Metadata)
		if org == "" {
			continue
		}
		if order != "" {
			disputedOrder[org+"/"+order] = true
		}
		var ro *reconcileOrder
		for _, o := range ordered {
			if o.org == org && o.order.OrderID == order {
				ro = o
			}
		}
		if ro != nil && ro.order.State == domain.OrderEndedState && ro.order.EndedReason == domain.EndDisputed {
			continue
		}
		ours := "no order of the organisation records its payment"
		if ro != nil {
			ours = fmt.Sprintf("the order is %s", ro.order.State)
			if ro.order.EndedReason != "" {
				ours += " (" + ro.order.EndedReason + ")"
			}
		}
		out = append(out, ReconcileDifference{Kind: ReconcileDisputeNotRecorded, OrgID: org, OrderID: order,
			ProviderIDs: []string{d.ID, d.ChargeID, d.PaymentIntentID},
			Detail:      fmt.Sprintf("the provider lists a dispute (%s, %d %s) of the payment; %s", d.Status, d.Amount, d.Currency, ours)})
	}
	for _, ro := range ordered {
		if ro.order.State != domain.OrderEndedState || ro.order.EndedReason != domain.EndDisputed ||
			disputedOrder[ro.org+"/"+ro.order.OrderID] || (ro.pay != nil && disputed[ro.pay.ID]) {
			continue
		}
		var ids []string
		switch {
		case ro.pay != nil:
			ids = []string{ro.pay.ID}
		case ro.order.SubscriptionID != "":
			ids = []string{ro.order.SubscriptionID}
		default:
			continue // no payment of it to compare
		}
		out = append(out, ReconcileDifference{Kind: ReconcileDisputeMissing, OrgID: ro.org, OrderID: ro.order.OrderID,
			ProviderIDs: ids, Detail: "the order ended disputed but the provider lists no dispute of its payments"})
	}
	return out
}
