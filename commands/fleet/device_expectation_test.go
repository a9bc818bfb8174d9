package fleet_test

import (
	"encoding/json"
	"testing"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// An action decided on a device state this process cached is recorded
// only if the device's stream has not moved on since: when another
// process ended the lease meanwhile, the request is decided again on the
// state loaded afresh and refused (lease_mismatch) before anything is
// recorded — no idempotency row, no action stream — not recorded and then
// failed when its turn comes.
func TestActionOnAStaleCachedDeviceIsDecidedAgain(t *testing.T) {
	ctx := testutil.Context(t)
	a := fleettest.Start(t, fleettest.Options{Devices: 1})
	b := fleettest.Start(t, fleettest.Options{DatabaseURL: a.URL, OrgID: a.OrgID})
	dev := a.DeviceIDs[0]
	lease := a.Lease(t, dev)
	act := func(key string) error {
		_, err := a.Fleet.PerformAction().Handle(ctx, fleet.PerformAction{Auth: a.Auth, DeviceID: dev, LeaseID: lease.LeaseID,
			Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: key})
		return err
	}
	if err := act("first"); err != nil {
		t.Fatalf("the first action: %v", err)
	}
	// Another process ends the lease: a's cached device state still shows it.
	if err := cqrs.Err(b.Fleet.ReleaseLease().Handle(ctx, fleet.ReleaseLease{Auth: a.Auth, DeviceID: dev, LeaseID: lease.LeaseID})); err != nil {
		t.Fatalf("releasing the lease from the other process: %v", err)
	}
	err := act("after-release")
	if code := domain.ErrorCode(err); code != domain.CodeLeaseMismatch {
		t.Fatalf("an action under the lease another process ended: %v (%s); want lease_mismatch", err, code)
	}
	var rows int
	if err := a.Pool.QueryRow(ctx, `SELECT count(*) FROM action_idempotency WHERE org_id = $1 AND idempotency_key = 'after-release'`, a.OrgID).
		Scan(&rows); err != nil {
		t.Fatal(err)
	} else if rows != 0 {
		t.Errorf("the refused action's key has %d idempotency rows; want 0 (refused before it was recorded)", rows)
	}
}
