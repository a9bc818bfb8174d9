package projections

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// Leases is the leases read model: one row per lease ever acquired, with
// its state (active, released, expired). It consumes lease.* and emits
// nothing. The lease expiry worker reads the active rows past their expiry.
type Leases struct{}

// LeasesName is the projection's stable name.
const LeasesName = "leases"

// Name implements Projection.
func (Leases) Name() string { return LeasesName }

// Tables implements Projection.
func (Leases) Tables() []string { return []string{"leases"} }

// Setup implements Projection.
func (Leases) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.leases (
		lease_id       text PRIMARY KEY,
		org_id         text NOT NULL,
		device_id      text NOT NULL,
		holder_kind    text NOT NULL,
		holder_id      text NOT NULL,
		fencing_token  bigint NOT NULL,
		acquired_at    timestamptz NOT NULL,
		expires_at     timestamptz NOT NULL,
		state          text NOT NULL,
		ended_at       timestamptz
	);
	CREATE INDEX ON `+schema+`.leases (org_id, state, device_id);
	CREATE INDEX ON `+schema+`.leases (expires_at) WHERE state = 'active';`)
	return err
}

// Lease states in the read model.
const (
	LeaseActive   = "active"
	LeaseReleased = "released"
	LeaseExpired  = "expired"
)

var leaseEvents = typeSet(nameOf(domain.LeaseAcquired{}), nameOf(domain.LeaseRenewed{}),
	nameOf(domain.LeaseReleased{}), nameOf(domain.LeaseExpired{}))

// Apply implements Projection.
func (Leases) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	t := schema + `.leases`
	return applyBatch(ctx, tx, events, leaseEvents, func(b *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		switch ev := ev.(type) {
		case domain.LeaseAcquired:
			b.Queue(`INSERT INTO `+t+` (lease_id, org_id, device_id, holder_kind, holder_id, fencing_token, acquired_at, expires_at, state)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'active')`,
				ev.LeaseID, e.OrgID, ev.DeviceID, ev.Holder.Kind, ev.Holder.ID, ev.FencingToken, ev.AcquiredAt, ev.ExpiresAt)
		case domain.LeaseRenewed:
			b.Queue(`UPDATE `+t+` SET expires_at = $2 WHERE lease_id = $1`, ev.LeaseID, ev.ExpiresAt)
		case domain.LeaseReleased:
			b.Queue(`UPDATE `+t+` SET state = 'released', ended_at = $2 WHERE lease_id = $1`, ev.LeaseID, ev.ReleasedAt)
		case domain.LeaseExpired:
			b.Queue(`UPDATE `+t+` SET state = 'expired', ended_at = $2 WHERE lease_id = $1`, ev.LeaseID, ev.ExpiredAt)
		}
		return nil
	})
}

// LeaseView is a lease as the leases read model shows it.
type LeaseView struct {
	LeaseID      string
	DeviceID     string
	Holder       domain.ReceiptActor
	FencingToken int64
	AcquiredAt   time.Time
	ExpiresAt    time.Time
}

// LeaseFilter narrows a lease list to the leases in force at Now.
type LeaseFilter struct {
	OrgID    string
	Devices  []string
	DeviceID string
	After    string
	Limit    int
	Now      time.Time
}

// ListLeases returns one page of the organisation's leases in force at
// f.Now, in lease id order, and the cursor of the next page.
func ListLeases(ctx context.Context, pool *pgxpool.Pool, f LeaseFilter) ([]LeaseView, string, error) {
	limit := ClampLimit(f.Limit)
	rows, err := pool.Query(ctx, `SELECT lease_id, device_id, holder_kind, holder_id, fencing_token, acquired_at, expires_at
		FROM public.leases
		WHERE org_id = $1 AND state = 'active' AND expires_at > $2 AND lease_id > $3
		  AND ($4::text[] IS NULL OR device_id = ANY($4))
		  AND ($5 = '' OR device_id = $5)
		ORDER BY lease_id LIMIT $6`, f.OrgID, f.Now, f.After, f.Devices, f.DeviceID, limit+1)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	out := []LeaseView{}
	for rows.Next() {
		var l LeaseView
		var h domain.Actor
		if err := rows.Scan(&l.LeaseID, &l.DeviceID, &h.Kind, &h.ID, &l.FencingToken, &l.AcquiredAt, &l.ExpiresAt); err != nil {
			return nil, "", err
		}
		l.Holder = h.ForReceipt()
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].LeaseID
	}
	return out, next, nil
}

// ExpiredLease names a lease the read model still shows active past its expiry.
type ExpiredLease struct {
	LeaseID  string
	DeviceID string
	OrgID    string
}

// LeasesPastExpiry returns up to limit active leases whose expiry is at or
// before now, soonest first.
func LeasesPastExpiry(ctx context.Context, pool *pgxpool.Pool, now time.Time, limit int) ([]ExpiredLease, error) {
	rows, err := pool.Query(ctx, `SELECT lease_id, device_id, org_id FROM public.leases
		WHERE state = 'active' AND expires_at <= $1 ORDER BY expires_at LIMIT $2`, now, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ExpiredLease, error) {
		var l ExpiredLease
		err := r.Scan(&l.LeaseID, &l.DeviceID, &l.OrgID)
		return l, err
	})
}

// LeaseViewOf is a lease as the leases read model shows it, for a command
// that answers the lease it has just written.
func LeaseViewOf(l *domain.Lease) LeaseView {
	return LeaseView{LeaseID: l.ID, DeviceID: l.DeviceID, Holder: l.Holder.ForReceipt(),
		FencingToken: l.FencingToken, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt}
}
