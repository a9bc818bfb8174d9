package projections_test

import (
	"encoding/json"
	"strings"
	"testing"

	"phonefleet/commands/fleet"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// TestVerifyReceipts: the receipts read model agrees with the replayed
// history; a row changed behind the projection's back is reported.
func TestVerifyReceipts(t *testing.T) {
	ctx := testutil.Context(t)
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	for _, a := range []struct{ key, action, args string }{
		{"v1", "key", `{"key":"HOME"}`},
		{"v2", "open_app", `{"package":"com.example.counter"}`}, // not installed: failed
		{"v3", "install_app", `{"package":"com.example.counter"}`},
	} {
		_, _ = env.Fleet.PerformAction().Handle(ctx, fleet.PerformAction{Auth: env.Auth, DeviceID: dev, Action: a.action,
			Arguments: json.RawMessage(a.args), IdempotencyKey: a.key, LeaseID: lease})
	}
	if _, err := env.Fleet.ReviewReceipt().Handle(ctx, fleet.ReviewReceipt{Auth: env.Auth, IdempotencyKey: "v1"}); err != nil {
		t.Fatal(err)
	}
	env.Settle(t)
	rep, err := projections.VerifyReceipts(ctx, env.Store)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Actions != 3 || rep.Receipts != 3 || rep.ByState["committed"] != 2 || rep.ByState["failed"] != 1 || rep.Reviewed != 1 || rep.People != 1 {
		t.Fatalf("got report %+v; want 3 actions agreeing (2 committed, 1 failed, 1 reviewed, 1 person)", rep)
	}
	if _, err := env.Pool.Exec(ctx, `UPDATE public.receipts SET state = 'failed' WHERE idempotency_key = 'v3'`); err != nil {
		t.Fatal(err)
	}
	rep, err = projections.VerifyReceipts(ctx, env.Store)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || len(rep.Mismatches) != 1 || !strings.Contains(rep.Mismatches[0], `(key "v3"): state is failed in the read model, committed in the history`) {
		t.Errorf("got mismatches %q; want the one tampered state", rep.Mismatches)
	}
}
