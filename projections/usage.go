package projections

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// Usage is the device-time read model behind GET /v1/usage: one interval
// per lease ever acquired (usage_intervals), from its acquisition to its
// end, attributed to the organisation that held it, the device, the
// holder's kind and, for a run's lease, the run. It consumes lease.*,
// device.registered, device.retired, run.ended and run.parked, and emits
// nothing.
//
// Every way a lease ends closes its interval, at the lease's own time,
// never later than its expiry as last renewed:
//   - lease.released (a holder giving the device back, a run ending or
//     parking, a live session's driver stepping down, and the first half
//     of a hand-over, whose lease.acquired follows in the same append);
//   - lease.expired, at the recorded expiry (also when the next
//     lease.acquired records it in the same append);
//   - a lease.acquired on a device whose previous interval is still open
//     (no end was recorded: the new lease supersedes it);
//   - a device.registered for a device that holds an open interval (a
//     device registered afresh starts without a lease);
//   - device.retired: the device left the organisation (a fulfilment
//     cancelled, a pool unit returned); its lease's end is recorded just
//     before it, so this only makes sure;
//   - run.ended and run.parked for the run's open interval (the run's
//     lease is given up in the same unit; this only makes sure too).
//
// Rows depend on event data alone (never on when they were applied), so
// a rebuild from position 0 produces the same rows.
type Usage struct{}

// UsageName is the projection's stable name.
const UsageName = "usage"

// Name implements Projection.
func (Usage) Name() string { return UsageName }

// Tables implements Projection.
func (Usage) Tables() []string { return []string{"usage_intervals"} }

// EventTypes implements Selective.
func (Usage) EventTypes() []string {
	return []string{"lease.%", "device.registered", "device.retired", "run.ended", "run.parked"}
}

// Setup implements Projection.
func (Usage) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.usage_intervals (
		lease_id     text PRIMARY KEY,
		org_id       text NOT NULL,
		device_id    text NOT NULL,
		holder_kind  text NOT NULL,
		holder_id    text NOT NULL,
		run_id       text,
		started_at   timestamptz NOT NULL,
		expires_at   timestamptz NOT NULL,
		ended_at     timestamptz
	);
	CREATE INDEX ON `+schema+`.usage_intervals (org_id, started_at);
	CREATE INDEX ON `+schema+`.usage_intervals (device_id) WHERE ended_at IS NULL;
	CREATE INDEX ON `+schema+`.usage_intervals (run_id) WHERE ended_at IS NULL AND run_id IS NOT NULL;`)
	return err
}

var usageEvents = typeSet(nameOf(domain.LeaseAcquired{}), nameOf(domain.LeaseRenewed{}), nameOf(domain.LeaseReleased{}),
	nameOf(domain.LeaseExpired{}), nameOf(domain.DeviceRegistered{}), nameOf(domain.DeviceRetired{}), nameOf(domain.RunEnded{}),
	nameOf(domain.RunParked{}))

// Apply implements Projection. An interval, once closed, never changes.
func (Usage) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	t := schema + `.usage_intervals`
	closeLease := `UPDATE ` + t + ` SET ended_at = LEAST($2, expires_at) WHERE lease_id = $1 AND ended_at IS NULL`
	closeDevice := `UPDATE ` + t + ` SET ended_at = LEAST($2, expires_at) WHERE device_id = $1 AND ended_at IS NULL`
	closeRun := `UPDATE ` + t + ` SET ended_at = LEAST($2, expires_at) WHERE run_id = $1 AND ended_at IS NULL`
	return applyBatch(ctx, tx, events, usageEvents, func(b *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		switch ev := ev.(type) {
		case domain.LeaseAcquired:
			b.Queue(closeDevice, ev.DeviceID, ev.AcquiredAt)
			var runID *string
			if ev.Holder.Kind == domain.ActorRun {
				runID = &ev.Holder.ID
			}
			b.Queue(`INSERT INTO `+t+` (lease_id, org_id, device_id, holder_kind, holder_id, run_id, started_at, expires_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (lease_id) DO NOTHING`,
				ev.LeaseID, e.OrgID, ev.DeviceID, ev.Holder.Kind, ev.Holder.ID, runID, ev.AcquiredAt, ev.ExpiresAt)
		case domain.LeaseRenewed:
			b.Queue(`UPDATE `+t+` SET expires_at = $2 WHERE lease_id = $1 AND ended_at IS NULL`, ev.LeaseID, ev.ExpiresAt)
		case domain.LeaseReleased:
			b.Queue(closeLease, ev.LeaseID, ev.ReleasedAt)
		case domain.LeaseExpired:
			b.Queue(closeLease, ev.LeaseID, ev.ExpiredAt)
		case domain.DeviceRegistered:
			b.Queue(closeDevice, ev.DeviceID, ev.RegisteredAt)
		case domain.DeviceRetired:
			b.Queue(closeDevice, ev.DeviceID, ev.At)
		case domain.RunEnded:
			b.Queue(closeRun, ev.RunID, ev.EndedAt)
		case domain.RunParked:
			b.Queue(closeRun, ev.RunID, ev.At)
		}
		return nil
	})
}

// UsageFilter chooses the intervals a usage report adds up.
type UsageFilter struct {
	OrgID string
	// Devices, when not nil, admits only these devices (a credential's
	// device subset).
	Devices []string
	// DeviceID, when set, admits only this device.
	DeviceID string
	// From and To bound the time of interest: intervals that do not
	// overlap [From, To) are left out.
	From, To time.Time
}

// UsageIntervals returns the organisation's intervals that may hold time
// in [f.From, f.To), in lease id order. Whether they do, and how much,
// is domain.UsageInterval.Within's to say.
func UsageIntervals(ctx context.Context, pool *pgxpool.Pool, f UsageFilter) ([]domain.UsageInterval, error) {
	rows, err := pool.Query(ctx, `SELECT lease_id, device_id, holder_kind, coalesce(run_id, ''), started_at, expires_at, ended_at
		FROM public.usage_intervals
		WHERE org_id = $1 AND started_at < $3 AND coalesce(ended_at, expires_at) > $2
		  AND ($4::text[] IS NULL OR device_id = ANY($4))
		  AND ($5 = '' OR device_id = $5)
		ORDER BY lease_id`, f.OrgID, f.From, f.To, f.Devices, f.DeviceID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.UsageInterval, error) {
		var iv domain.UsageInterval
		err := r.Scan(&iv.LeaseID, &iv.DeviceID, &iv.HolderKind, &iv.RunID, &iv.Start, &iv.ExpiresAt, &iv.End)
		return iv, err
	})
}
