package fleet_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// TestRetriedKeyAfterADatabaseOutage: the fleet reaches PostgreSQL through
// a proxy the test cuts at the moment the phone has decided the action's
// outcome and before it is recorded, and restores a second later. The
// outcome is recorded once the database is back; every retry of the key
// then answers it (action_outcome_unknown while it is unknown), never
// internal_error, and the phone never acts again.
func TestRetriedKeyAfterADatabaseOutage(t *testing.T) {
	tests := []struct {
		name string
		// act is the phone's answer, given after the database was cut.
		act      func(ctx context.Context, inner domain.Backend, a domain.Action) (domain.ActionResult, error)
		wantCode domain.Code // "" when the action committed
		inputs   int
		// whileAccepting cuts the database when the request is accepted,
		// before it is recorded, instead of once the phone answered.
		whileAccepting bool
	}{
		{"failed", func(context.Context, domain.Backend, domain.Action) (domain.ActionResult, error) {
			return domain.ActionResult{}, domain.Errorf(domain.CodeBackendCommandFailed, "input keyevent failed")
		}, domain.CodeBackendCommandFailed, 0, false},
		{"outcome unknown", func(ctx context.Context, inner domain.Backend, a domain.Action) (domain.ActionResult, error) {
			_, _ = inner.Act(ctx, a)
			return domain.ActionResult{}, errors.New("read unix @->/dev/socket: connection reset by peer")
		}, domain.CodeActionOutcomeUnknown, 1, false},
		{"committed", func(ctx context.Context, inner domain.Backend, a domain.Action) (domain.ActionResult, error) {
			return inner.Act(ctx, a)
		}, "", 1, false},
		// Nothing of the request was recorded: a retry performs it.
		{"cut while the request is recorded", func(ctx context.Context, inner domain.Backend, a domain.Action) (domain.ActionResult, error) {
			return inner.Act(ctx, a)
		}, "", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			direct := testutil.DatabaseURL(t)
			u, err := url.Parse(direct)
			if err != nil {
				t.Fatal(err)
			}
			proxy := testutil.NewCutProxy(t, u.Host)
			armed := make(chan struct{}, 1)
			restored := make(chan struct{})
			cut := func() {
				select {
				case <-armed:
					proxy.Cut()
					go func() { time.Sleep(time.Second); proxy.Restore(); close(restored) }()
				default:
				}
			}
			env := fleettest.Start(t, fleettest.Options{Devices: 1, DatabaseURL: proxy.URL(t, direct),
				Wrap: func(_ *domain.Device, b domain.Backend) domain.Backend {
					if tt.whileAccepting {
						cut() // the device is resolved as the request is accepted
					}
					return faulty{Backend: b, act: func(ctx context.Context, a domain.Action) (domain.ActionResult, error) {
						if !tt.whileAccepting {
							cut()
						}
						return tt.act(ctx, b, a)
					}}
				}})
			dev := env.DeviceIDs[0]
			lease := env.Lease(t, dev).LeaseID
			before := inputs(t, env, dev)
			armed <- struct{}{}
			_, err = act(env, dev, lease, "k", "key", `{"key":"HOME"}`)
			<-restored
			t.Logf("first answer: %v", err)
			for i := range 5 {
				_, err := act(env, dev, lease, "k", "key", `{"key":"HOME"}`)
				if got := codeOf(err); err != nil && got != tt.wantCode || err == nil && tt.wantCode != "" {
					t.Errorf("retry %d: got %v (%s); want %q", i+1, err, got, tt.wantCode)
				}
			}
			if got := inputs(t, env, dev) - before; got != tt.inputs {
				t.Errorf("the phone took %d inputs; want %d", got, tt.inputs)
			}
		})
	}
}
