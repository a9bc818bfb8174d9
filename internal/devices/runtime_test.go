package devices_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

var bg = testutil.Background

// held blocks Act until released.
type held struct {
	domain.Backend
	entered, release chan struct{}
}

func (h held) Act(ctx context.Context, a domain.Action) (domain.ActionResult, error) {
	h.entered <- struct{}{}
	<-h.release
	return h.Backend.Act(ctx, a)
}

// TestStoppingFailsWaitingActions: when the runtime stops, the running
// action finishes and the ones still waiting fail as never started
// (device_unavailable, offline) — not as unknown outcomes.
func TestStoppingFailsWaitingActions(t *testing.T) {
	entered, release := make(chan struct{}, 4), make(chan struct{})
	env := fleettest.Start(t, fleettest.Options{Devices: 1, Wrap: func(_ *domain.Device, b domain.Backend) domain.Backend {
		return held{b, entered, release}
	}})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = env.Fleet.PerformAction().Handle(bg, fleet.PerformAction{Auth: env.Auth, DeviceID: dev, Action: "key",
				Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: fmt.Sprintf("stop-%d", i), LeaseID: lease})
		}()
		if i == 0 {
			<-entered
			continue
		}
		for env.Unfinished(t, dev)-1 != i { // one runs, held
			time.Sleep(time.Millisecond)
		}
	}
	stopped := make(chan struct{})
	go func() { env.Runtime.Stop(); close(stopped) }()
	// Once the runtime refuses new work it has cancelled the waiting jobs;
	// only then may the running action end.
	for {
		s, err := env.Runtime.Reserve(dev)
		if err != nil {
			break
		}
		s.Cancel()
		time.Sleep(time.Millisecond)
	}
	close(release)
	<-stopped
	wg.Wait()
	if errs[0] != nil {
		t.Errorf("the running action: %v; want it committed", errs[0])
	}
	for i := 1; i < len(errs); i++ {
		e := domain.AsError(errs[i])
		if e.Code != domain.CodeDeviceUnavailable || e.Extra["reason"] != domain.ReasonOffline {
			t.Errorf("waiting action %d: got %v; want device_unavailable, offline", i, errs[i])
		}
	}
	env.Settle(t)
	for i := 1; i < len(errs); i++ {
		r, err := env.App.Fleet.GetReceipt.Handle(bg, fleet.GetReceipt{Auth: env.Auth, IdempotencyKey: fmt.Sprintf("stop-%d", i)})
		if err != nil || r.State != domain.ReceiptFailed || r.OutcomeUnknown {
			t.Errorf("receipt stop-%d: got %+v, %v; want failed, outcome known", i, r, err)
		}
	}
}
