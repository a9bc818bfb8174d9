package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// Devices is the devices read model: one row per device with its name,
// backend, screen, power status and current lease. It consumes device.*,
// lease.* and action.committed (whose result says whether the screen is on)
// and emits nothing. A retired device's row is deleted.
type Devices struct{}

// DevicesName is the projection's stable name.
const DevicesName = "devices"

// Name implements Projection.
func (Devices) Name() string { return DevicesName }

// Tables implements Projection.
func (Devices) Tables() []string { return []string{"devices"} }

// Setup implements Projection.
func (Devices) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.devices (
		device_id          text PRIMARY KEY,
		org_id             text NOT NULL,
		name               text NOT NULL,
		backend            text NOT NULL,
		model              text NOT NULL DEFAULT '',
		serial             text NOT NULL DEFAULT '',
		width              integer NOT NULL DEFAULT 0,
		height             integer NOT NULL DEFAULT 0,
		status             text NOT NULL DEFAULT 'online',
		lease_id           text,
		lease_holder_kind  text,
		lease_holder_id    text,
		fencing_token      bigint NOT NULL DEFAULT 0,
		lease_acquired_at  timestamptz,
		lease_expires_at   timestamptz,
		registered_at      timestamptz NOT NULL,
		updated_at         timestamptz NOT NULL
	);
	CREATE INDEX ON `+schema+`.devices (org_id, device_id);`)
	return err
}

var deviceEvents = typeSet(nameOf(domain.DeviceRegistered{}), nameOf(domain.DeviceRenamed{}), nameOf(domain.DeviceWoken{}),
	nameOf(domain.DeviceStopped{}), nameOf(domain.LeaseAcquired{}), nameOf(domain.LeaseRenewed{}),
	nameOf(domain.LeaseReleased{}), nameOf(domain.LeaseExpired{}), nameOf(domain.ActionCommitted{}),
	nameOf(domain.DeviceWentOffline{}), nameOf(domain.DeviceCameOnline{}), nameOf(domain.DeviceRetired{}))

// Apply implements Projection. An action's outcome sets the device's
// status from whether its screen is on; a run of outcomes between the
// device's other events is one statement for the whole batch (a rebuild
// reads thousands of them, most of which change nothing), and an outcome
// is read for its device and screen alone outside a group's batch
// (screenAfter). The other events are a statement each; the
// statements keep the events' order.
func (Devices) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	t := schema + `.devices`
	b := &pgx.Batch{}
	var run statusRun
	for _, e := range events {
		if !deviceEvents[e.Type] {
			continue
		}
		if e.Type == actionCommittedName {
			id, on, err := screenAfter(ctx, e)
			if err != nil {
				return fmt.Errorf("decode %s at %d: %w", e.Type, e.Position, err)
			}
			status := domain.DeviceAsleep
			if on {
				status = domain.DeviceOnline
			}
			run.add(id, status, e.OccurredAt)
			continue
		}
		run.queue(b, t)
		ev, err := decodeEvent(ctx, e)
		if err != nil {
			return fmt.Errorf("decode %s at %d: %w", e.Type, e.Position, err)
		}
		queueDeviceEvent(b, t, e, ev)
	}
	run.queue(b, t)
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

var actionCommittedName = nameOf(domain.ActionCommitted{})

// screenAfter returns the device of an action.committed event and whether
// its screen was on after the action. In a group's batch the event is
// decoded whole, once for every member (the receipts and the chain read
// all of it); alone (a rebuild of this read model) it is read for those
// two members only.
func screenAfter(ctx context.Context, e eventstore.Event) (string, bool, error) {
	if sharedBatch(ctx) {
		ev, err := decodeEvent(ctx, e)
		if err != nil {
			return "", false, err
		}
		c, _ := ev.(domain.ActionCommitted)
		return c.DeviceID, c.Result.ScreenOn, nil
	}
	_, data, err := domain.Events.Upcast(e.Type, e.SchemaVersion, e.Data)
	if err != nil {
		return "", false, err
	}
	var c struct {
		DeviceID string `json:"deviceId"`
		Result   struct {
			ScreenOn bool `json:"screenOn"`
		} `json:"result"`
	}
	err = json.Unmarshal(data, &c)
	return c.DeviceID, c.Result.ScreenOn, err
}

// statusRun is a run of actions' outcomes, written as one statement: per
// device, the status the last of them left and when the device took it.
// Applied one by one, each outcome sets the status unless it is already
// that (or offline) and stamps updated_at when it does; so the run's row
// stamps the first outcome of the last unbroken stretch of one status, and
// is written even when the status equals the stored one (flip) when an
// outcome in the run set another status before it.
type statusRun struct {
	index    map[string]int
	ids      []string
	statuses []string
	at       []time.Time
	flip     []bool
}

func (r *statusRun) add(id, status string, at time.Time) {
	i, ok := r.index[id]
	if !ok {
		if r.index == nil {
			r.index = map[string]int{}
		}
		r.index[id] = len(r.ids)
		r.ids, r.statuses, r.at, r.flip = append(r.ids, id), append(r.statuses, status), append(r.at, at), append(r.flip, false)
		return
	}
	if r.statuses[i] != status {
		r.statuses[i], r.at[i], r.flip[i] = status, at, true
	}
}

// queue queues the run's statement, if it has rows, and starts a new run.
func (r *statusRun) queue(b *pgx.Batch, t string) {
	switch len(r.ids) {
	case 0:
		return
	case 1:
		b.Queue(`UPDATE `+t+` SET status = $2, updated_at = $3 WHERE device_id = $1 AND status <> 'offline' AND (status <> $2 OR $4)`,
			r.ids[0], r.statuses[0], r.at[0], r.flip[0])
	default:
		queueCustomPlanned(b, `UPDATE `+t+` d SET status = u.s, updated_at = u.at
			FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bool[]) u(id, s, at, flip)
			WHERE d.device_id = u.id AND d.status <> 'offline' AND (d.status <> u.s OR u.flip)`, r.ids, r.statuses, r.at, r.flip)
	}
	*r = statusRun{}
}

// queueDeviceEvent queues the statement of a device event other than an
// action's outcome.
func queueDeviceEvent(b *pgx.Batch, t string, e eventstore.Event, ev domain.Event) {
	at := e.OccurredAt
	switch ev := ev.(type) {
	case domain.DeviceRegistered:
		b.Queue(`INSERT INTO `+t+` (device_id, org_id, name, backend, model, serial, width, height, registered_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			ev.DeviceID, e.OrgID, ev.Name, ev.Backend, ev.Model, ev.Serial, ev.Width, ev.Height, ev.RegisteredAt, at)
	case domain.DeviceRenamed:
		b.Queue(`UPDATE `+t+` SET name = $2, updated_at = $3 WHERE device_id = $1`, ev.DeviceID, ev.Name, at)
	case domain.DeviceWoken:
		b.Queue(`UPDATE `+t+` SET status = 'online', updated_at = $2 WHERE device_id = $1 AND status <> 'offline'`, ev.DeviceID, at)
	case domain.DeviceWentOffline:
		b.Queue(`UPDATE `+t+` SET status = 'offline', updated_at = $2 WHERE device_id = $1`, ev.DeviceID, at)
	case domain.DeviceCameOnline:
		b.Queue(`UPDATE `+t+` SET status = 'online', updated_at = $2 WHERE device_id = $1`, ev.DeviceID, at)
	case domain.DeviceRetired:
		// A retired device answers as one that never existed.
		b.Queue(`DELETE FROM `+t+` WHERE device_id = $1`, ev.DeviceID)
	case domain.DeviceStopped:
		b.Queue(`UPDATE `+t+` SET status = 'asleep', updated_at = $2 WHERE device_id = $1 AND status <> 'offline'`, ev.DeviceID, at)
	case domain.LeaseAcquired:
		b.Queue(`UPDATE `+t+` SET lease_id = $2, lease_holder_kind = $3, lease_holder_id = $4, fencing_token = $5,
			lease_acquired_at = $6, lease_expires_at = $7, updated_at = $8 WHERE device_id = $1`,
			ev.DeviceID, ev.LeaseID, ev.Holder.Kind, ev.Holder.ID, ev.FencingToken, ev.AcquiredAt, ev.ExpiresAt, at)
	case domain.LeaseRenewed:
		b.Queue(`UPDATE `+t+` SET lease_expires_at = $3, updated_at = $4 WHERE device_id = $1 AND lease_id = $2`,
			ev.DeviceID, ev.LeaseID, ev.ExpiresAt, at)
	case domain.LeaseReleased:
		b.Queue(`UPDATE `+t+` SET lease_id = NULL, lease_holder_kind = NULL, lease_holder_id = NULL, lease_acquired_at = NULL,
			lease_expires_at = NULL, updated_at = $3 WHERE device_id = $1 AND lease_id = $2`, ev.DeviceID, ev.LeaseID, at)
	case domain.LeaseExpired:
		b.Queue(`UPDATE `+t+` SET lease_id = NULL, lease_holder_kind = NULL, lease_holder_id = NULL, lease_acquired_at = NULL,
			lease_expires_at = NULL, updated_at = $3 WHERE device_id = $1 AND lease_id = $2`, ev.DeviceID, ev.LeaseID, at)
	}
}

// DeviceView is a device as the devices read model shows it. How a
// surface spells it is the surface's (package http/wire).
type DeviceView struct {
	DeviceID     string
	Name         string
	Backend      string
	Model        string
	Width        int
	Height       int
	Status       string
	Leased       bool
	Lease        *DeviceLeaseView
	RegisteredAt time.Time
	UpdatedAt    time.Time
	// OrgID is the owning organisation.
	OrgID string

	leaseID string
	holder  domain.Actor
	fencing int64
}

// TakenDeviceView is d, a device just registered with a lease on it, as
// this read model shows it once it applied both (its status is online and
// updatedAt the time the lease's event was recorded), at the lease's
// start: the answer of a pool take (POST /v1/devices/take), built from the
// take's own events so that a repeat of the take answers it exactly.
func TakenDeviceView(d *domain.Device, updatedAt time.Time) DeviceView {
	v := DeviceView{DeviceID: d.ID, OrgID: d.OrgID, Name: d.Name, Backend: d.Backend, Model: d.Model, Width: d.Width,
		Height: d.Height, Status: domain.DeviceOnline, RegisteredAt: d.RegisteredAt, UpdatedAt: updatedAt}
	if l := d.Lease; l != nil {
		v.Leased, v.leaseID, v.holder, v.fencing = true, l.ID, l.Holder, l.FencingToken
		v.Lease = &DeviceLeaseView{Holder: l.Holder.ForReceipt(), AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt}
	}
	return v
}

// DeviceLeaseView is who holds a device and until when; the lease id is
// not shown here (it is the holder's, from the lease routes).
type DeviceLeaseView struct {
	Holder     domain.ReceiptActor
	AcquiredAt time.Time
	ExpiresAt  time.Time
}

// LeaseID returns the id of the lease in force, if any.
func (d DeviceView) LeaseID() string { return d.leaseID }

// Holder returns the holder of the lease in force, if any.
func (d DeviceView) Holder() domain.Actor { return d.holder }

// DeviceFilter narrows a device list.
type DeviceFilter struct {
	OrgID string
	// Devices, when not nil, is the credential's device subset.
	Devices []string
	Status  string
	Backend string
	// Leased, when not nil, keeps only devices (not) leased now.
	Leased *bool
	// After is the last device id of the previous page.
	After string
	Limit int
	Now   time.Time
}

const deviceColumns = `device_id, org_id, name, backend, model, width, height, status, lease_id, lease_holder_kind,
	lease_holder_id, fencing_token, lease_acquired_at, lease_expires_at, registered_at, updated_at`

func scanDevice(row pgx.Row, now time.Time) (DeviceView, error) {
	var d DeviceView
	var leaseID, hk, hid *string
	var acq, exp *time.Time
	err := row.Scan(&d.DeviceID, &d.OrgID, &d.Name, &d.Backend, &d.Model, &d.Width, &d.Height, &d.Status, &leaseID, &hk, &hid,
		&d.fencing, &acq, &exp, &d.RegisteredAt, &d.UpdatedAt)
	if err != nil {
		return d, err
	}
	if leaseID != nil && exp != nil && now.Before(*exp) {
		d.Leased, d.leaseID = true, *leaseID
		d.holder = domain.Actor{Kind: *hk, ID: *hid}
		d.Lease = &DeviceLeaseView{Holder: d.holder.ForReceipt(), AcquiredAt: *acq, ExpiresAt: *exp}
	}
	return d, nil
}

// ListDevices returns one page of the organisation's devices in id order
// (ids are time-ordered, so oldest first) and the cursor of the next page
// ("" on the last).
func ListDevices(ctx context.Context, pool *pgxpool.Pool, f DeviceFilter) ([]DeviceView, string, error) {
	limit := ClampLimit(f.Limit)
	rows, err := pool.Query(ctx, `SELECT `+deviceColumns+` FROM public.devices
		WHERE org_id = $1 AND device_id > $2
		  AND ($3::text[] IS NULL OR device_id = ANY($3))
		  AND ($4 = '' OR status = $4)
		  AND ($5 = '' OR backend = $5)
		  AND ($6::boolean IS NULL OR (lease_id IS NOT NULL AND lease_expires_at > $7) = $6)
		ORDER BY device_id LIMIT $8`,
		f.OrgID, f.After, f.Devices, f.Status, f.Backend, f.Leased, f.Now, limit+1)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	out := []DeviceView{}
	for rows.Next() {
		d, err := scanDevice(rows, f.Now)
		if err != nil {
			return nil, "", err
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].DeviceID
	}
	return out, next, nil
}

// ErrNoRow is returned by single-row reads that find nothing.
var ErrNoRow = errors.New("projections: no such row")

// GetDevice returns one device of the organisation, or ErrNoRow.
func GetDevice(ctx context.Context, pool *pgxpool.Pool, orgID, deviceID string, now time.Time) (DeviceView, error) {
	d, err := scanDevice(pool.QueryRow(ctx, `SELECT `+deviceColumns+` FROM public.devices WHERE device_id = $1 AND org_id = $2`,
		deviceID, orgID), now)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, ErrNoRow
	}
	return d, err
}
