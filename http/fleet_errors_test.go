package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/apitest"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// failing answers every Act with err, or blocks until release when err is nil.
type failing struct {
	domain.Backend
	err     error
	entered chan struct{}
	release chan struct{}
}

func (f failing) Act(ctx context.Context, a domain.Action) (domain.ActionResult, error) {
	if f.err != nil {
		return domain.ActionResult{}, f.err
	}
	f.entered <- struct{}{}
	<-f.release
	return f.Backend.Act(ctx, a)
}

// TestFleetBackendErrorAnswers checks the statuses and envelopes of the
// errors that come from devices and backends, against the contract.
func TestFleetBackendErrorAnswers(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var mu sync.Mutex
	behaviour := map[string]error{}
	env := fleettest.Start(t, fleettest.Options{Devices: 5, QueueLimit: 1, Wrap: func(d *domain.Device, b domain.Backend) domain.Backend {
		mu.Lock()
		defer mu.Unlock()
		return failing{Backend: b, err: behaviour[d.ID], entered: entered, release: release}
	}})
	ctx := testutil.Context(t)
	adb, err := env.Fleet.RegisterDevices().Handle(ctx, fleet.RegisterDevices{OrgID: env.OrgID, Backend: domain.BackendRobot, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	odd := domain.NewID(domain.PrefixDevice)
	name, version, data, _ := domain.Events.Encode(domain.DeviceRegistered{DeviceID: odd, OrgID: env.OrgID, Name: "odd", Backend: "quantum"})
	if _, err := env.Store.Append(ctx, domain.DeviceStream(odd), eventstore.NoStream, eventstore.NewEvent{Type: name, SchemaVersion: version,
		OrgID: env.OrgID, Data: data}); err != nil {
		t.Fatal(err)
	}
	devs := env.DeviceIDs
	mu.Lock()
	behaviour[devs[1]] = domain.Errorf(domain.CodeActionOutcomeUnknown, "no answer")
	behaviour[devs[2]] = domain.Errorf(domain.CodeDeviceDisconnected, "dropped")
	behaviour[devs[3]] = domain.Errorf(domain.CodeBackendCommandFailed, "input tap failed")
	mu.Unlock()
	s, _ := newTestServer(t, Deps{App: appOf(env.Fleet), LocalOrgID: env.OrgID})
	v := apitest.FromHandler(t, s.Handler())
	leases := map[string]string{}
	for _, d := range append(append([]string{}, devs...), adb[0], odd) {
		leases[d] = env.Lease(t, d).LeaseID
	}
	post := func(dev, key string) *http.Request {
		return httptest.NewRequest("POST", "/v1/devices/"+dev+"/actions",
			strings.NewReader(`{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"`+key+`","leaseId":"`+leases[dev]+`"}`))
	}

	// Device 0: one action holds the only place in the queue.
	done := make(chan struct{})
	go func() {
		defer close(done)
		apitest.Do(t, s.Handler(), post(devs[0], "hold"))
	}()
	<-entered

	tests := []struct {
		name, dev  string
		status     int
		code       string
		retryAfter bool
	}{
		{"device busy", devs[0], 429, "device_busy", true},
		{"outcome unknown", devs[1], 504, "action_outcome_unknown", false},
		{"device disconnected", devs[2], 503, "device_disconnected", false},
		{"command transport failed", devs[3], 502, "backend_command_failed", false},
		{"kind without an adapter", adb[0], 501, "backend_not_implemented", false},
		{"row naming no valid kind", odd, 500, "backend_resolution_failed", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := post(tt.dev, "e-"+tt.name)
			resp, b := apitest.Do(t, s.Handler(), req)
			v.Check(t, req, resp, b)
			if resp.StatusCode != tt.status {
				t.Fatalf("got status %d; want %d (%s)", resp.StatusCode, tt.status, b)
			}
			if got := errorCode(t, b); got != tt.code {
				t.Errorf("got %s; want %s", got, tt.code)
			}
			if got := resp.Header.Get("Retry-After") != ""; got != tt.retryAfter {
				t.Errorf("got Retry-After %q; want present %v", resp.Header.Get("Retry-After"), tt.retryAfter)
			}
		})
	}
	close(release)
	<-done
}
