package projections

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// Gateways is the gateways read model (issue 14): one row per enrolled
// gateway, its state, who revoked it, and its tunnel: whether one is open,
// through which instance, since when, the version the gateway runs and
// when it was last seen (its latest connection or disconnection). It
// consumes gateway.* and emits nothing. It holds no secret and no hash of
// one: a gateway's credential is checked against its stream
// (commands.AuthenticateGateway), so a revocation refuses the credential
// from the commit on, not from when this read model catches up.
type Gateways struct{}

// GatewaysName is the projection's stable name. The table's first shape,
// without the tunnel's columns, was built under the name "gateways"; a
// projection has no version of its own to bump, and the runner builds a
// projection whose name it has not seen from position 0 on every
// database, so the new shape took a new name instead of needing an
// operator's rebuild. The table is still public.gateways.
const GatewaysName = "gateway_list"

// Name implements Projection.
func (Gateways) Name() string { return GatewaysName }

// Tables implements Projection.
func (Gateways) Tables() []string { return []string{"gateways"} }

// EventTypes implements Selective.
func (Gateways) EventTypes() []string { return []string{"gateway.%"} }

// Setup implements Projection. The tunnel's columns come after the first
// shape's, so the view public.gateways is replaced in place.
func (Gateways) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.gateways (
		gateway_id      text PRIMARY KEY,
		org_id          text NOT NULL,
		name            text NOT NULL,
		code_id         text NOT NULL,
		state           text NOT NULL,
		version         text,
		enrolled_at     timestamptz NOT NULL,
		revoked_at      timestamptz,
		revoked_by_kind text,
		revoked_by_id   text,
		connected       boolean NOT NULL DEFAULT false,
		instance        text,
		channel         text,
		connected_at    timestamptz,
		last_seen_at    timestamptz
	);
	CREATE INDEX ON `+schema+`.gateways (org_id, gateway_id);`)
	return err
}

var gatewayEventTypes = typeSet(nameOf(domain.GatewayEnrolled{}), nameOf(domain.GatewayRevoked{}),
	nameOf(domain.GatewayConnected{}), nameOf(domain.GatewayDisconnected{}))

// Apply implements Projection.
func (Gateways) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	t := schema + `.gateways`
	return applyBatch(ctx, tx, events, gatewayEventTypes, func(b *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		switch ev := ev.(type) {
		case domain.GatewayEnrolled:
			b.Queue(`INSERT INTO `+t+` (gateway_id, org_id, name, code_id, state, version, enrolled_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
				ev.GatewayID, ev.OrgID, ev.Name, ev.CodeID, domain.GatewayStateActive, nullString(ev.Version), ev.EnrolledAt)
		case domain.GatewayRevoked:
			b.Queue(`UPDATE `+t+` SET state = $2, revoked_at = $3, revoked_by_kind = $4, revoked_by_id = $5 WHERE gateway_id = $1`,
				ev.GatewayID, domain.GatewayStateRevoked, ev.At, ev.RevokedBy.Kind, ev.RevokedBy.ID)
		case domain.GatewayConnected:
			b.Queue(`UPDATE `+t+` SET connected = true, instance = $2, version = coalesce($3, version), channel = $4,
					connected_at = $5, last_seen_at = $5
				WHERE gateway_id = $1`,
				ev.GatewayID, ev.Instance, nullString(ev.Version), nullString(ev.Channel), ev.At)
		case domain.GatewayDisconnected:
			b.Queue(`UPDATE `+t+` SET connected = false, instance = NULL, connected_at = NULL, last_seen_at = $2
				WHERE gateway_id = $1`, ev.GatewayID, ev.At)
		}
		return nil
	})
}

// GatewayView is a gateway as GET /v1/gateways shows it.
type GatewayView struct {
	GatewayID string
	Name      string
	State     string
	// Version is the version the gateway runs: the one it reported on its
	// latest connection, or at enrollment until it connects.
	Version    string
	EnrolledAt time.Time
	RevokedAt  *time.Time
	RevokedBy  *domain.Actor
	// Connected says whether a tunnel of the gateway is open; Instance
	// and ConnectedAt are the serving instance and since when (nil while
	// none is).
	Connected   bool
	Instance    *string
	ConnectedAt *time.Time
	// LastSeenAt is when the gateway's latest tunnel opened or ended; nil
	// when it never connected.
	LastSeenAt *time.Time
}

// ListGateways returns orgID's gateways, oldest first.
func ListGateways(ctx context.Context, pool *pgxpool.Pool, orgID string) ([]GatewayView, error) {
	rows, err := pool.Query(ctx, `SELECT gateway_id, name, state, coalesce(version, ''), enrolled_at, revoked_at,
			revoked_by_kind, revoked_by_id, connected, instance, connected_at, last_seen_at
		FROM public.gateways WHERE org_id = $1 ORDER BY gateway_id`, orgID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (GatewayView, error) {
		var v GatewayView
		var kind, id *string
		if err := r.Scan(&v.GatewayID, &v.Name, &v.State, &v.Version, &v.EnrolledAt, &v.RevokedAt, &kind, &id,
			&v.Connected, &v.Instance, &v.ConnectedAt, &v.LastSeenAt); err != nil {
			return v, err
		}
		if kind != nil && id != nil {
			v.RevokedBy = &domain.Actor{Kind: *kind, ID: *id}
		}
		return v, nil
	})
}

// ConnectedGateways returns the gateways recorded with an open tunnel,
// sorted: the orphaned-gateway sweep ends those whose instance is gone.
func ConnectedGateways(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT gateway_id FROM public.gateways WHERE connected ORDER BY gateway_id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// GatewayDevices is the read model of the devices gateways bring (issue
// 14): one row per device with its gateway, the gateway's key for it and
// whether it is online. It consumes device.registered (of a gateway's
// devices), device.went_offline, device.came_online and device.retired,
// and emits nothing. The gateway hub reads it to record a gateway's
// devices offline, and the orphaned-gateway sweep to find gateways whose
// devices show online while no instance serves them.
type GatewayDevices struct{}

// GatewayDevicesName is the projection's stable name.
const GatewayDevicesName = "gateway_devices"

// Name implements Projection.
func (GatewayDevices) Name() string { return GatewayDevicesName }

// Tables implements Projection.
func (GatewayDevices) Tables() []string { return []string{"gateway_devices"} }

var gatewayDeviceEvents = typeSet(nameOf(domain.DeviceRegistered{}), nameOf(domain.DeviceWentOffline{}),
	nameOf(domain.DeviceCameOnline{}), nameOf(domain.DeviceRetired{}))

// EventTypes implements Selective.
func (GatewayDevices) EventTypes() []string { return sortedKeys(gatewayDeviceEvents) }

// Setup implements Projection.
func (GatewayDevices) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.gateway_devices (
		device_id   text PRIMARY KEY,
		org_id      text NOT NULL,
		gateway_id  text NOT NULL,
		gateway_key text NOT NULL,
		online      boolean NOT NULL DEFAULT true
	);
	CREATE INDEX ON `+schema+`.gateway_devices (gateway_id);`)
	return err
}

// Apply implements Projection. Events of devices no gateway brings touch
// no row.
func (GatewayDevices) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	t := schema + `.gateway_devices`
	return applyBatch(ctx, tx, events, gatewayDeviceEvents, func(b *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		switch ev := ev.(type) {
		case domain.DeviceRegistered:
			if ev.GatewayID != "" {
				b.Queue(`INSERT INTO `+t+` (device_id, org_id, gateway_id, gateway_key) VALUES ($1, $2, $3, $4)
					ON CONFLICT DO NOTHING`, ev.DeviceID, e.OrgID, ev.GatewayID, ev.GatewayKey)
			}
		case domain.DeviceWentOffline:
			b.Queue(`UPDATE `+t+` SET online = false WHERE device_id = $1`, ev.DeviceID)
		case domain.DeviceCameOnline:
			b.Queue(`UPDATE `+t+` SET online = true WHERE device_id = $1`, ev.DeviceID)
		case domain.DeviceRetired:
			b.Queue(`DELETE FROM `+t+` WHERE device_id = $1`, ev.DeviceID)
		}
		return nil
	})
}

// GatewayDeviceIDs returns the devices gateway gatewayID brings, by the
// gateway's key for each.
func GatewayDeviceIDs(ctx context.Context, pool *pgxpool.Pool, gatewayID string) (map[string]string, error) {
	rows, err := pool.Query(ctx, `SELECT gateway_key, device_id FROM public.gateway_devices WHERE gateway_id = $1`, gatewayID)
	if err != nil {
		return nil, err
	}
	ids := map[string]string{}
	var key, id string
	_, err = pgx.ForEachRow(rows, []any{&key, &id}, func() error {
		ids[key] = id
		return nil
	})
	return ids, err
}

// GatewaysWithOnlineDevices returns the gateways some of whose devices
// show online, sorted.
func GatewaysWithOnlineDevices(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT DISTINCT gateway_id FROM public.gateway_devices WHERE online ORDER BY gateway_id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
