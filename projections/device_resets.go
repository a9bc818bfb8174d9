package projections

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// DeviceResets is the read model of the resets devices owe: one row per
// device whose last lease ended with resetOnRelease (lease.released or
// lease.expired carrying reset) and for which no device.reset names that
// lease yet. It consumes those events and emits nothing; the
// device-resets worker reads it and sends ResetDevice, which checks the
// device's stream, so a row the read model has not removed yet costs one
// load and nothing else.
type DeviceResets struct{}

// DeviceResetsName is the projection's stable name.
const DeviceResetsName = "device_resets"

// Name implements Projection.
func (DeviceResets) Name() string { return DeviceResetsName }

// Tables implements Projection.
func (DeviceResets) Tables() []string { return []string{"device_resets"} }

// Setup implements Projection.
func (DeviceResets) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.device_resets (
		device_id  text PRIMARY KEY,
		org_id     text NOT NULL,
		lease_id   text NOT NULL,
		due_at     timestamptz NOT NULL
	)`)
	return err
}

var deviceResetEvents = typeSet(nameOf(domain.LeaseReleased{}), nameOf(domain.LeaseExpired{}), nameOf(domain.DeviceReset{}),
	nameOf(domain.DeviceRetired{}))

// EventTypes implements Selective.
func (DeviceResets) EventTypes() []string { return sortedKeys(deviceResetEvents) }

// Apply implements Projection.
func (DeviceResets) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	t := schema + `.device_resets`
	due := func(b *pgx.Batch, orgID, deviceID, leaseID string, at time.Time) {
		b.Queue(`INSERT INTO `+t+` (device_id, org_id, lease_id, due_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (device_id) DO UPDATE SET lease_id = excluded.lease_id, due_at = excluded.due_at`,
			deviceID, orgID, leaseID, at)
	}
	return applyBatch(ctx, tx, events, deviceResetEvents, func(b *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		switch ev := ev.(type) {
		case domain.LeaseReleased:
			if ev.Reset {
				due(b, e.OrgID, ev.DeviceID, ev.LeaseID, e.OccurredAt)
			}
		case domain.LeaseExpired:
			if ev.Reset {
				due(b, e.OrgID, ev.DeviceID, ev.LeaseID, e.OccurredAt)
			}
		case domain.DeviceReset:
			b.Queue(`DELETE FROM `+t+` WHERE device_id = $1 AND lease_id = $2`, ev.DeviceID, ev.LeaseID)
		case domain.DeviceRetired:
			// A retired device is reset by nobody.
			b.Queue(`DELETE FROM `+t+` WHERE device_id = $1`, ev.DeviceID)
		}
		return nil
	})
}

// DueReset names a device that owes a reset.
type DueReset struct {
	DeviceID string
	OrgID    string
	LeaseID  string
}

// ResetsDue returns up to limit devices that owe a reset, longest owed
// first.
func ResetsDue(ctx context.Context, pool *pgxpool.Pool, limit int) ([]DueReset, error) {
	rows, err := pool.Query(ctx, `SELECT device_id, org_id, lease_id FROM public.device_resets ORDER BY due_at, device_id LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DueReset, error) {
		var d DueReset
		err := r.Scan(&d.DeviceID, &d.OrgID, &d.LeaseID)
		return d, err
	})
}
