package projections

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// Apps is the read model of the app store and the app library: the
// tracked requests (installations and inventory refreshes) with each
// device's progress, what each device last reported of its software, and
// the apps the store installed on it (managed). It consumes the app.*
// events and emits nothing.
type Apps struct{}

// AppsName is the projection's stable name.
const AppsName = "apps"

// Name implements Projection.
func (Apps) Name() string { return AppsName }

// Tables implements Projection.
func (Apps) Tables() []string {
	return []string{"app_requests", "app_request_devices", "app_software", "app_inventory", "app_managed"}
}

// EventTypes implements Selective.
func (Apps) EventTypes() []string { return []string{"app.%"} }

// Setup implements Projection.
func (Apps) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.app_requests (
		org_id          text NOT NULL,
		request_key     text NOT NULL,
		kind            text NOT NULL,
		installation_id text,
		package         text,
		title           text,
		version         text,
		devices         jsonb NOT NULL,
		requester_kind  text NOT NULL,
		requester_id    text NOT NULL,
		requested_at    timestamptz NOT NULL,
		updated_at      timestamptz NOT NULL,
		PRIMARY KEY (org_id, request_key)
	);
	CREATE UNIQUE INDEX ON `+schema+`.app_requests (installation_id) WHERE installation_id IS NOT NULL;
	CREATE INDEX ON `+schema+`.app_requests (org_id, kind, requested_at DESC);
	CREATE TABLE `+schema+`.app_request_devices (
		org_id          text NOT NULL,
		request_key     text NOT NULL,
		device_id       text NOT NULL,
		position        int NOT NULL,
		state           text NOT NULL,
		code            text,
		reason          text,
		message         text,
		action_id       text,
		idempotency_key text,
		updated_at      timestamptz NOT NULL,
		PRIMARY KEY (org_id, request_key, device_id)
	);
	CREATE INDEX ON `+schema+`.app_request_devices (state, updated_at);
	CREATE TABLE `+schema+`.app_software (
		device_id          text PRIMARY KEY,
		org_id             text NOT NULL,
		os_version         text NOT NULL,
		sdk                int NOT NULL,
		abis               jsonb NOT NULL,
		storage_free_bytes bigint,
		can_install        boolean NOT NULL,
		read_at            timestamptz NOT NULL
	);
	CREATE TABLE `+schema+`.app_inventory (
		device_id text NOT NULL,
		org_id    text NOT NULL,
		package   text NOT NULL,
		version   text,
		system    boolean NOT NULL,
		PRIMARY KEY (device_id, package)
	);
	CREATE INDEX ON `+schema+`.app_inventory (org_id, device_id);
	CREATE TABLE `+schema+`.app_managed (
		device_id       text NOT NULL,
		package         text NOT NULL,
		org_id          text NOT NULL,
		version         text NOT NULL,
		installation_id text NOT NULL,
		installed_at    timestamptz NOT NULL,
		PRIMARY KEY (device_id, package)
	);`)
	return err
}

var appEventTypes = typeSet(nameOf(domain.AppInstallationRequested{}), nameOf(domain.AppInventoryRefreshRequested{}),
	nameOf(domain.AppDeviceWorkStarted{}), nameOf(domain.AppDeviceWorkFinished{}), nameOf(domain.AppDeviceSoftwareRead{}))

// Apply implements Projection.
func (Apps) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	return applyBatch(ctx, tx, events, appEventTypes, func(b *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		switch r := ev.(type) {
		case domain.AppInstallationRequested:
			return queueAppRequest(b, schema, domain.AppRequestInstallation, r.OrgID, r.RequestKey, r.InstallationID, r.Package, r.Title,
				r.Version, r.Devices, r.Requester, r.RequestedAt)
		case domain.AppInventoryRefreshRequested:
			return queueAppRequest(b, schema, domain.AppRequestRefresh, r.OrgID, r.RequestKey, "", "", "", "", r.Devices, r.Requester, r.RequestedAt)
		case domain.AppDeviceWorkStarted:
			b.Queue(`UPDATE `+schema+`.app_request_devices SET state = $3, updated_at = $4 WHERE org_id = $1 AND request_key = $2 AND device_id = $5`,
				e.OrgID, r.RequestKey, r.State, r.At, r.DeviceID)
			b.Queue(`UPDATE `+schema+`.app_requests SET updated_at = $3 WHERE org_id = $1 AND request_key = $2`, e.OrgID, r.RequestKey, r.At)
		case domain.AppDeviceWorkFinished:
			b.Queue(`UPDATE `+schema+`.app_request_devices SET state = $3, code = $4, reason = $5, message = $6, action_id = $7,
					idempotency_key = $8, updated_at = $9
				WHERE org_id = $1 AND request_key = $2 AND device_id = $10`,
				e.OrgID, r.RequestKey, r.State, nullString(r.Code), nullString(r.Reason), nullString(r.Message), nullString(r.ActionID),
				nullString(r.IdempotencyKey), r.At, r.DeviceID)
			b.Queue(`UPDATE `+schema+`.app_requests SET updated_at = $3 WHERE org_id = $1 AND request_key = $2`, e.OrgID, r.RequestKey, r.At)
			if r.State == domain.AppDeviceInstalled {
				b.Queue(`INSERT INTO `+schema+`.app_managed (device_id, package, org_id, version, installation_id, installed_at)
					SELECT $1, package, org_id, version, installation_id, $4 FROM `+schema+`.app_requests WHERE org_id = $2 AND request_key = $3
					ON CONFLICT (device_id, package) DO UPDATE SET version = excluded.version, installation_id = excluded.installation_id,
						installed_at = excluded.installed_at`,
					r.DeviceID, e.OrgID, r.RequestKey, r.At)
			}
		case domain.AppDeviceSoftwareRead:
			abis, err := json.Marshal(r.Software.ABIs)
			if err != nil {
				return err
			}
			b.Queue(`INSERT INTO `+schema+`.app_software (device_id, org_id, os_version, sdk, abis, storage_free_bytes, can_install, read_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
				ON CONFLICT (device_id) DO UPDATE SET org_id = excluded.org_id, os_version = excluded.os_version, sdk = excluded.sdk,
					abis = excluded.abis, storage_free_bytes = excluded.storage_free_bytes, can_install = excluded.can_install,
					read_at = excluded.read_at`,
				r.DeviceID, r.OrgID, r.Software.OSVersion, r.Software.SDK, abis, r.Software.StorageFreeBytes, r.Software.CanInstall, r.ReadAt)
			b.Queue(`DELETE FROM `+schema+`.app_inventory WHERE device_id = $1`, r.DeviceID)
			for _, a := range r.Software.Apps {
				b.Queue(`INSERT INTO `+schema+`.app_inventory (device_id, org_id, package, version, system) VALUES ($1, $2, $3, $4, $5)
					ON CONFLICT DO NOTHING`, r.DeviceID, r.OrgID, a.Package, nullString(a.Version), a.System)
			}
			// An app the store installed and the device no longer has is
			// no longer managed.
			b.Queue(`DELETE FROM `+schema+`.app_managed m WHERE m.device_id = $1
				AND NOT EXISTS (SELECT 1 FROM `+schema+`.app_inventory i WHERE i.device_id = m.device_id AND i.package = m.package)`, r.DeviceID)
		}
		return nil
	})
}

func queueAppRequest(b *pgx.Batch, schema, kind, orgID, key, installationID, pkg, title, version string, devices []string,
	by domain.ScheduleCreator, at time.Time) error {
	list, err := json.Marshal(devices)
	if err != nil {
		return err
	}
	actor := domain.ActorOf(domain.Auth{Kind: by.Kind, UserID: by.UserID, APIKeyID: by.APIKeyID, ClientID: by.ClientID})
	b.Queue(`INSERT INTO `+schema+`.app_requests (org_id, request_key, kind, installation_id, package, title, version, devices,
			requester_kind, requester_id, requested_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11) ON CONFLICT DO NOTHING`,
		orgID, key, kind, nullString(installationID), nullString(pkg), nullString(title), nullString(version), list, actor.Kind, actor.ID, at)
	for i, d := range devices {
		b.Queue(`INSERT INTO `+schema+`.app_request_devices (org_id, request_key, device_id, position, state, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, orgID, key, d, i, domain.AppDeviceQueued, at)
	}
	return nil
}
