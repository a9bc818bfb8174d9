package projections

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// Fulfilments is the fulfilments read model behind GET /v1/fulfilments and
// its family, the inventory count (units in use per slot) and the
// fulfilment sweeps: one row per fulfilment (one phone bought) with its
// state, device, price and dates, and one row per delivery estimate given
// (fulfilment_estimates, the estimate history). It consumes fulfilment.*
// and emits nothing.
//
// Every column comes from event data alone (a day pass's end is its first
// provisioning plus domain.DayPassLength), never from when the event was
// applied, so a rebuild from position 0 produces the same rows.
type Fulfilments struct{}

// FulfilmentsName is the projection's stable name.
const FulfilmentsName = "fulfilments"

// Name implements Projection.
func (Fulfilments) Name() string { return FulfilmentsName }

// Tables implements Projection.
func (Fulfilments) Tables() []string { return []string{"fulfilments", "fulfilment_estimates"} }

// EventTypes implements Selective.
func (Fulfilments) EventTypes() []string { return []string{"fulfilment.%"} }

// Setup implements Projection.
func (Fulfilments) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.fulfilments (
		fulfilment_id     text PRIMARY KEY,
		org_id            text NOT NULL,
		order_id          text NOT NULL,
		state             text NOT NULL,
		device_id         text,
		sku               text NOT NULL,
		billing           text NOT NULL,
		model             text NOT NULL,
		region            text NOT NULL,
		slot              text NOT NULL,
		us_fixed_ip       boolean NOT NULL,
		preinstall_apps   boolean NOT NULL,
		currency          text NOT NULL,
		unit_amount       bigint NOT NULL,
		subscription_id   text NOT NULL,
		payment_intent_id text NOT NULL,
		created_at        timestamptz NOT NULL,
		provisioned_at    timestamptz,
		estimated_by      timestamptz,
		ends_at           timestamptz,
		cancelled_at      timestamptz,
		renewal_cancelled boolean NOT NULL DEFAULT false,
		cancelled_reason  text NOT NULL DEFAULT '',
		updated_at        timestamptz NOT NULL,
		period_start      timestamptz,
		period_end        timestamptz
	);
	CREATE INDEX ON `+schema+`.fulfilments (org_id, created_at DESC, fulfilment_id DESC);
	CREATE INDEX ON `+schema+`.fulfilments (slot, state);
	CREATE INDEX ON `+schema+`.fulfilments (state, estimated_by) WHERE state = 'awaiting_provisioning';
	CREATE INDEX ON `+schema+`.fulfilments (ends_at) WHERE state = 'provisioned' AND ends_at IS NOT NULL;
	CREATE TABLE `+schema+`.fulfilment_estimates (
		fulfilment_id text NOT NULL,
		position      bigint NOT NULL,
		org_id        text NOT NULL,
		estimated_by  timestamptz NOT NULL,
		reason        text NOT NULL,
		at            timestamptz NOT NULL,
		PRIMARY KEY (fulfilment_id, position)
	);`)
	return err
}

var fulfilmentEventTypes = typeSet(nameOf(domain.FulfilmentCreated{}), nameOf(domain.FulfilmentProvisioned{}),
	nameOf(domain.FulfilmentAwaitingProvisioning{}), nameOf(domain.FulfilmentEstimateChanged{}),
	nameOf(domain.FulfilmentCancelled{}), nameOf(domain.FulfilmentRenewalCancelled{}), nameOf(domain.FulfilmentPeriodRecorded{}))

// EstimateFirst is the reason of the first estimate of a fulfilment in its
// estimate history (the promise made when it was paid with no unit free).
const EstimateFirst = "awaiting_provisioning"

// Apply implements Projection.
func (Fulfilments) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	t, est := schema+`.fulfilments`, schema+`.fulfilment_estimates`
	dayPass := int64(domain.DayPassLength / time.Microsecond)
	return applyBatch(ctx, tx, events, fulfilmentEventTypes, func(b *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		switch ev := ev.(type) {
		case domain.FulfilmentCreated:
			c := ev.Choice
			b.Queue(`INSERT INTO `+t+` (fulfilment_id, org_id, order_id, state, sku, billing, model, region, slot,
					us_fixed_ip, preinstall_apps, currency, unit_amount, subscription_id, payment_intent_id, created_at, updated_at)
				VALUES ($1, $2, $3, '', $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15) ON CONFLICT DO NOTHING`,
				ev.FulfilmentID, ev.OrgID, ev.OrderID, c.Sku, c.Billing, c.Model, c.Region, c.Slot(),
				c.AddOns.USFixedIP, c.AddOns.PreinstallApps, ev.Currency, ev.UnitAmount, ev.SubscriptionID,
				ev.PaymentIntentID, ev.At)
		case domain.FulfilmentProvisioned:
			// A day pass runs from its first provisioning.
			b.Queue(`UPDATE `+t+` SET state = $2, device_id = $3, estimated_by = NULL,
					provisioned_at = coalesce(provisioned_at, $4),
					ends_at = CASE WHEN billing = $5 THEN coalesce(provisioned_at, $4) + make_interval(secs => $6::bigint / 1e6) ELSE ends_at END,
					updated_at = $4
				WHERE fulfilment_id = $1`,
				ev.FulfilmentID, domain.FulfilmentProvisionedState, ev.DeviceID, ev.At, domain.BillingDay, dayPass)
		case domain.FulfilmentAwaitingProvisioning:
			b.Queue(`UPDATE `+t+` SET state = $2, estimated_by = $3, updated_at = $4 WHERE fulfilment_id = $1`,
				ev.FulfilmentID, domain.FulfilmentAwaitingState, ev.EstimatedBy, ev.At)
			b.Queue(`INSERT INTO `+est+` (fulfilment_id, position, org_id, estimated_by, reason, at)
				VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
				ev.FulfilmentID, e.Position, e.OrgID, ev.EstimatedBy, EstimateFirst, ev.At)
		case domain.FulfilmentEstimateChanged:
			b.Queue(`UPDATE `+t+` SET estimated_by = $2, updated_at = $3 WHERE fulfilment_id = $1`,
				ev.FulfilmentID, ev.EstimatedBy, ev.At)
			b.Queue(`INSERT INTO `+est+` (fulfilment_id, position, org_id, estimated_by, reason, at)
				VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
				ev.FulfilmentID, e.Position, e.OrgID, ev.EstimatedBy, ev.Reason, ev.At)
		case domain.FulfilmentRenewalCancelled:
			b.Queue(`UPDATE `+t+` SET renewal_cancelled = true, ends_at = $2, updated_at = $3 WHERE fulfilment_id = $1`,
				ev.FulfilmentID, ev.EndsAt, ev.At)
		case domain.FulfilmentPeriodRecorded:
			// A phone that does not renew ends with the period the
			// provider says is paid (domain.Fulfilment.Apply).
			b.Queue(`UPDATE `+t+` SET period_start = $2, period_end = $3,
					ends_at = CASE WHEN renewal_cancelled THEN $3 ELSE ends_at END, updated_at = $4
				WHERE fulfilment_id = $1`,
				ev.FulfilmentID, ev.PeriodStart, ev.PeriodEnd, ev.At)
		case domain.FulfilmentCancelled:
			b.Queue(`UPDATE `+t+` SET state = $2, device_id = NULL, estimated_by = NULL, cancelled_at = $3,
					cancelled_reason = $4, updated_at = $3
				WHERE fulfilment_id = $1`,
				ev.FulfilmentID, domain.FulfilmentCancelledState, ev.At, ev.Reason)
		}
		return nil
	})
}

// DBTX is what the fulfilment reads query: a pool, a connection or a
// transaction.
type DBTX interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var _ DBTX = (*pgxpool.Pool)(nil)

// FulfilmentView is a fulfilment as the fulfilments read model shows it.
type FulfilmentView struct {
	FulfilmentID string
	OrgID        string
	OrderID      string
	// State is provisioned, awaiting_provisioning or cancelled (empty for
	// the instant between fulfilment.created and its first state, which
	// are committed in one unit).
	State    string
	DeviceID string
	Sku      string
	Billing  string
	Model    string
	Region   string
	AddOns   domain.AddOns
	Currency string
	// UnitAmount is the price of this phone, in the smallest currency unit.
	UnitAmount      int64
	SubscriptionID  string
	PaymentIntentID string
	CreatedAt       time.Time
	// ProvisionedAt is when the phone was first delivered.
	ProvisionedAt *time.Time
	// EstimatedBy is the promised delivery while awaiting provisioning.
	EstimatedBy *time.Time
	// EndsAt is when a live phone ends by itself: a day pass 24 hours after
	// its first provisioning, a subscription whose renewal was cancelled
	// at the end of its paid period.
	EndsAt           *time.Time
	CancelledAt      *time.Time
	RenewalCancelled bool
	CancelledReason  string
	UpdatedAt        time.Time
	// PeriodStart and PeriodEnd are the paid period the payment provider
	// last reported for a subscription phone; nil before any report.
	PeriodStart, PeriodEnd *time.Time
}

// Slot is where the fulfilment's unit comes from (domain.Slot).
func (v FulfilmentView) Slot() string { return domain.Slot(v.Sku, v.Model, v.Region) }

// Live reports whether the fulfilment holds or awaits a unit.
func (v FulfilmentView) Live() bool {
	return v.State == domain.FulfilmentProvisionedState || v.State == domain.FulfilmentAwaitingState
}

const fulfilmentColumns = `fulfilment_id, org_id, order_id, state, coalesce(device_id, ''), sku, billing, model, region,
	us_fixed_ip, preinstall_apps, currency, unit_amount, subscription_id, payment_intent_id, created_at, provisioned_at,
	estimated_by, ends_at, cancelled_at, renewal_cancelled, cancelled_reason, updated_at, period_start, period_end`

func scanFulfilment(row pgx.Row) (FulfilmentView, error) {
	var v FulfilmentView
	err := row.Scan(&v.FulfilmentID, &v.OrgID, &v.OrderID, &v.State, &v.DeviceID, &v.Sku, &v.Billing, &v.Model, &v.Region,
		&v.AddOns.USFixedIP, &v.AddOns.PreinstallApps, &v.Currency, &v.UnitAmount, &v.SubscriptionID, &v.PaymentIntentID,
		&v.CreatedAt, &v.ProvisionedAt, &v.EstimatedBy, &v.EndsAt, &v.CancelledAt, &v.RenewalCancelled,
		&v.CancelledReason, &v.UpdatedAt, &v.PeriodStart, &v.PeriodEnd)
	return v, err
}

func collectFulfilments(rows pgx.Rows, err error) ([]FulfilmentView, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (FulfilmentView, error) { return scanFulfilment(r) })
}

// GetFulfilment reads a fulfilment of orgID; ok is false when there is none
// (another organisation's answers the same).
func GetFulfilment(ctx context.Context, db DBTX, orgID, id string) (FulfilmentView, bool, error) {
	v, err := scanFulfilment(db.QueryRow(ctx, `SELECT `+fulfilmentColumns+` FROM public.fulfilments
		WHERE org_id = $1 AND fulfilment_id = $2`, orgID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return FulfilmentView{}, false, nil
	}
	return v, err == nil, err
}

// FulfilmentCursor is a place in a fulfilment list: the row's creation
// time and id (fulfilments of one order share a creation time).
type FulfilmentCursor struct {
	CreatedAt    time.Time
	FulfilmentID string
}

// FulfilmentQuery pages an organisation's fulfilments, newest first.
type FulfilmentQuery struct {
	// State, when set, keeps only fulfilments in that state.
	State string
	// Before is the cursor: fulfilments listed after this one.
	Before *FulfilmentCursor
	Limit  int
}

// FulfilmentPage is one page of fulfilments; Next is nil on the last.
type FulfilmentPage struct {
	Fulfilments []FulfilmentView
	Next        *FulfilmentCursor
}

// ListFulfilments returns one page of orgID's fulfilments, newest first.
func ListFulfilments(ctx context.Context, db DBTX, orgID string, q FulfilmentQuery) (FulfilmentPage, error) {
	limit := ClampLimit(q.Limit)
	var beforeAt *time.Time
	beforeID := ""
	if q.Before != nil {
		beforeAt, beforeID = &q.Before.CreatedAt, q.Before.FulfilmentID
	}
	out, err := collectFulfilments(db.Query(ctx, `SELECT `+fulfilmentColumns+` FROM public.fulfilments
		WHERE org_id = $1 AND state <> '' AND ($2 = '' OR state = $2)
		  AND ($3::timestamptz IS NULL OR (created_at, fulfilment_id) < ($3, $4))
		ORDER BY created_at DESC, fulfilment_id DESC LIMIT $5`, orgID, q.State, beforeAt, beforeID, limit+1))
	if err != nil {
		return FulfilmentPage{}, err
	}
	page := FulfilmentPage{Fulfilments: out}
	if len(out) > limit {
		page.Fulfilments = out[:limit]
		last := out[limit-1]
		page.Next = &FulfilmentCursor{CreatedAt: last.CreatedAt, FulfilmentID: last.FulfilmentID}
	}
	return page, nil
}

// AllFulfilments returns every fulfilment of every organisation, oldest
// first (reconciliation against the payment provider).
func AllFulfilments(ctx context.Context, db DBTX) ([]FulfilmentView, error) {
	return collectFulfilments(db.Query(ctx, `SELECT `+fulfilmentColumns+` FROM public.fulfilments
		ORDER BY created_at, fulfilment_id`))
}

// UnitsInUse returns how many live (provisioned or awaiting provisioning)
// fulfilments each slot (domain.Slot) has: a slot's free units are its
// catalog capacity minus these. Awaiting ones count, since they are ahead
// of any new purchase in the queue for the next free unit.
func UnitsInUse(ctx context.Context, db DBTX) (map[string]int, error) {
	return slotCounts(ctx, db, domain.FulfilmentProvisionedState, domain.FulfilmentAwaitingState)
}

// AwaitingUnits returns how many fulfilments of slot await provisioning:
// the queue a unit freed goes to first.
func AwaitingUnits(ctx context.Context, db DBTX, slot string) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM public.fulfilments WHERE slot = $1 AND state = $2`,
		slot, domain.FulfilmentAwaitingState).Scan(&n)
	return n, err
}

// ProvisionedIn lists the provisioned fulfilments of slot.
func ProvisionedIn(ctx context.Context, db DBTX, slot string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT fulfilment_id FROM public.fulfilments WHERE slot = $1 AND state = $2 ORDER BY fulfilment_id`,
		slot, domain.FulfilmentProvisionedState)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func slotCounts(ctx context.Context, db DBTX, states ...string) (map[string]int, error) {
	rows, err := db.Query(ctx, `SELECT slot, count(*) FROM public.fulfilments WHERE state = ANY($1) GROUP BY slot`, states)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	var slot string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&slot, &n}, func() error { out[slot] = n; return nil })
	return out, err
}

// LiveFulfilments returns how many live (provisioned or awaiting
// provisioning) fulfilments orgID has for a billing mode.
func LiveFulfilments(ctx context.Context, db DBTX, orgID, billing string) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM public.fulfilments
		WHERE org_id = $1 AND billing = $2 AND state = ANY($3)`,
		orgID, billing, []string{domain.FulfilmentProvisionedState, domain.FulfilmentAwaitingState}).Scan(&n)
	return n, err
}

// AwaitingFulfilments returns up to limit fulfilments awaiting
// provisioning, oldest first (the queue for free units, per slot in
// creation order).
func AwaitingFulfilments(ctx context.Context, db DBTX, limit int) ([]FulfilmentView, error) {
	return collectFulfilments(db.Query(ctx, `SELECT `+fulfilmentColumns+` FROM public.fulfilments
		WHERE state = $1 ORDER BY created_at, fulfilment_id LIMIT $2`, domain.FulfilmentAwaitingState, limit))
}

// EndingFulfilments returns up to limit provisioned fulfilments whose
// EndsAt is at or before now (a day pass run out, a subscription whose
// renewal was cancelled reaching its end), earliest first.
func EndingFulfilments(ctx context.Context, db DBTX, now time.Time, limit int) ([]FulfilmentView, error) {
	return collectFulfilments(db.Query(ctx, `SELECT `+fulfilmentColumns+` FROM public.fulfilments
		WHERE state = $1 AND ends_at <= $2 ORDER BY ends_at, fulfilment_id LIMIT $3`,
		domain.FulfilmentProvisionedState, now, limit))
}

// EstimateView is one delivery estimate given for a fulfilment.
type EstimateView struct {
	EstimatedBy time.Time
	// Reason is why it was given: EstimateFirst for the first promise,
	// else the reason recorded with the change.
	Reason string
	At     time.Time
}

// FulfilmentEstimates returns the estimates given for a fulfilment, oldest
// first. The caller has checked the fulfilment is the organisation's.
func FulfilmentEstimates(ctx context.Context, db DBTX, orgID, id string) ([]EstimateView, error) {
	rows, err := db.Query(ctx, `SELECT estimated_by, reason, at FROM public.fulfilment_estimates
		WHERE org_id = $1 AND fulfilment_id = $2 ORDER BY position`, orgID, id)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (EstimateView, error) {
		var v EstimateView
		err := r.Scan(&v.EstimatedBy, &v.Reason, &v.At)
		return v, err
	})
}

// OrderOfPayment returns the organisation and order of the fulfilments
// paid by a provider payment (a day pass's payment intent), for a provider
// event about the payment that carries no metadata of its own (a
// dispute). ok is false when no fulfilment names the payment.
func OrderOfPayment(ctx context.Context, db DBTX, paymentIntentID string) (orgID, orderID string, ok bool, err error) {
	return orderOfFulfilments(ctx, db, `SELECT org_id, order_id FROM public.fulfilments WHERE payment_intent_id = $1
		ORDER BY created_at LIMIT 1`, paymentIntentID)
}

// OrderOfSubscription returns the organisation and order of the
// fulfilments a provider subscription pays, for a provider event about
// one of its invoices' charges that carries no metadata of ours (a
// renewal's refund or dispute). ok is false when no fulfilment names the
// subscription.
func OrderOfSubscription(ctx context.Context, db DBTX, subscriptionID string) (orgID, orderID string, ok bool, err error) {
	return orderOfFulfilments(ctx, db, `SELECT org_id, order_id FROM public.fulfilments WHERE subscription_id = $1
		ORDER BY created_at LIMIT 1`, subscriptionID)
}

// orderOfFulfilments runs query, which selects the organisation and order
// of the first fulfilment naming the provider object id; none for an
// empty id or no fulfilment.
func orderOfFulfilments(ctx context.Context, db DBTX, query, id string) (orgID, orderID string, ok bool, err error) {
	if id == "" {
		return "", "", false, nil
	}
	err = db.QueryRow(ctx, query, id).Scan(&orgID, &orderID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", false, nil
	}
	return orgID, orderID, err == nil, err
}

// AwaitingAhead returns how many fulfilments of slot await provisioning
// ahead of the one created at createdAt with id (earlier in creation
// order): the queue a freed unit is handed out in.
func AwaitingAhead(ctx context.Context, db DBTX, slot string, createdAt time.Time, id string) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM public.fulfilments
		WHERE slot = $1 AND state = $2 AND (created_at, fulfilment_id) < ($3, $4)`,
		slot, domain.FulfilmentAwaitingState, createdAt, id).Scan(&n)
	return n, err
}
