package provisioning_test

import (
	"encoding/json"
	"strings"
	"testing"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// TestRunEndedWhenFulfilmentDeviceRetired: a run going on a paid phone's
// device ends, failed with reason device_lost and a detail naming the
// fulfilment's end, in the unit that cancels the fulfilment and retires
// its device.
func TestRunEndedWhenFulfilmentDeviceRetired(t *testing.T) {
	e := newFulEnv(t)
	app := e.instance(t, e.Fleet, e.Runs)
	org := e.OrgID
	order, ids := e.openOrder(t, org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingDay}, 1)
	paid := stripeEvent(t, "evt_run_device", payments.EventCheckoutCompleted,
		session(org, order, "payment", "paid", map[string]any{"payment_intent": "pi_run_device"}), e.clock.Now())
	if _, err := app.Provisioning.ReceiveProviderEvent.Handle(testutil.Context(t), provisioning.ReceiveProviderEvent{Payload: paid,
		Signature: payments.SignWebhookForTest(paid, fulSecret, e.clock.Now())}); err != nil {
		t.Fatal(err)
	}
	device := e.fulfilmentState(t, ids[0]).DeviceID
	if device == "" {
		t.Fatal("the paid phone has no device")
	}
	run := fleettest.StartExternalRun(t, e.Env, device, nil)

	if _, err := app.Provisioning.CancelFulfilment.Handle(testutil.Context(t),
		provisioning.CancelFulfilment{Auth: fulAdmin(org), FulfilmentID: ids[0]}); err != nil {
		t.Fatal(err)
	}
	evs, err := e.Store.Load(testutil.Context(t), domain.RunStream(run.Run.RunID), 1)
	if err != nil || len(evs) == 0 || evs[len(evs)-1].Type != "run.ended" {
		t.Fatalf("run stream %v %v; want it to end", evs, err)
	}
	var ended domain.RunEnded
	if err := json.Unmarshal(evs[len(evs)-1].Data, &ended); err != nil {
		t.Fatal(err)
	}
	if ended.State != domain.RunStateFailed || ended.Reason == nil || *ended.Reason != domain.RunReasonDeviceLost ||
		ended.Detail == nil || !strings.Contains(*ended.Detail, domain.EndCustomerCancel) {
		t.Errorf("run.ended %s; want failed, device_lost, naming customer_cancel", evs[len(evs)-1].Data)
	}
	retired, err := e.Store.Load(testutil.Context(t), domain.DeviceStream(device), 1)
	if err != nil || retired[len(retired)-1].Type != "device.retired" || retired[len(retired)-1].TransactionID != evs[len(evs)-1].TransactionID {
		t.Errorf("device stream %v %v; want device.retired in the run's end's transaction", retired, err)
	}
	e.Settle(t)
	if v, ok, err := projections.FindRun(testutil.Context(t), e.Pool, org, run.Run.RunID); err != nil || !ok || v.State != domain.RunStateFailed {
		t.Errorf("run as read: %+v %v %v; want failed", v, ok, err)
	}
}
