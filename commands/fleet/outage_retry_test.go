package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// TestRetriedKeyAfterADatabaseOutage: the fleet reaches PostgreSQL through
// a proxy the test cuts at the moment the phone has decided the action's
// outcome and before it is recorded, and restores a second later. The
// outcome is recorded once the database is back; every retry of the key
// then answers it (action_outcome_unknown while it is unknown), never
// internal_error, and the phone never acts again. The first attempt,
// in flight when the database was cut, never answers internal_error
// either: the outcome when it was decided; device_unavailable when the
// request was cut before it was handed to the phone (retryable when
// nothing of it was recorded).
func TestRetriedKeyAfterADatabaseOutage(t *testing.T) {
	phone := func(ctx context.Context, inner domain.Backend, a domain.Action) (domain.ActionResult, error) {
		return inner.Act(ctx, a)
	}
	tests := []struct {
		name string
		// act is the phone's answer, given after the database was cut.
		act      func(ctx context.Context, inner domain.Backend, a domain.Action) (domain.ActionResult, error)
		wantCode domain.Code // "" when the action committed
		inputs   int
		// whileAccepting cuts the database when the request is accepted,
		// before it is recorded, instead of once the phone answered.
		whileAccepting bool
		// before cuts the database before the request is sent, and asks
		// for retryIfUnchanged (so the request reads its key first).
		before bool
		// wantFirst is the first attempt's answer ("" when committed),
		// firstRetryable its retryable.
		wantFirst      domain.Code
		firstRetryable bool
	}{
		{"failed", func(context.Context, domain.Backend, domain.Action) (domain.ActionResult, error) {
			return domain.ActionResult{}, domain.Errorf(domain.CodeBackendCommandFailed, "input keyevent failed")
		}, domain.CodeBackendCommandFailed, 0, false, false, domain.CodeBackendCommandFailed, false},
		{"outcome unknown", func(ctx context.Context, inner domain.Backend, a domain.Action) (domain.ActionResult, error) {
			_, _ = inner.Act(ctx, a)
			return domain.ActionResult{}, errors.New("read unix @->/dev/socket: connection reset by peer")
		}, domain.CodeActionOutcomeUnknown, 1, false, false, domain.CodeActionOutcomeUnknown, false},
		{"committed", phone, "", 1, false, false, "", false},
		// Cut as the device is resolved, before the request is recorded:
		// device_unavailable, retryable, and a retry performs it.
		{"cut while the request is accepted", phone, "", 1, true, false, domain.CodeDeviceUnavailable, true},
		// Nothing of the request was recorded: device_unavailable,
		// retryable, and a retry performs it.
		{"cut before the request", phone, "", 1, false, true, domain.CodeDeviceUnavailable, true},
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
			if tt.before {
				cut()
				_, err = env.Fleet.PerformAction().Handle(bg, fleet.PerformAction{Auth: env.Auth, DeviceID: dev, Action: "key",
					Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "k", LeaseID: lease, RetryIfUnchanged: true})
			} else {
				_, err = act(env, dev, lease, "k", "key", `{"key":"HOME"}`)
			}
			<-restored
			t.Logf("first answer: %v", err)
			if got := codeOf(err); err != nil && got != tt.wantFirst || err == nil && tt.wantFirst != "" {
				t.Errorf("first attempt, in flight when the database was cut: got %v (%s); want %q", err, got, tt.wantFirst)
			} else if e := domain.AsError(err); err != nil && tt.wantFirst == domain.CodeDeviceUnavailable &&
				(e.Retryable == nil || *e.Retryable != tt.firstRetryable) {
				t.Errorf("first attempt: %v retryable %v; want %v", err, e.Retryable, tt.firstRetryable)
			}
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

// TestActionWhoseRecordIsCut: the database session recording an action's
// request ends in the middle of it (a trigger terminates its own backend,
// 57P01, as an immediate shutdown does to every session), so the client
// cannot know whether the record committed. The first attempt answers
// device_unavailable, not retryable (its key may be used by an action
// settled as never run), never internal_error; nothing is left pending;
// a retry of the key answers device_unavailable or performs the action,
// once.
func TestActionWhoseRecordIsCut(t *testing.T) {
	ctx := testutil.Context(t)
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	before := inputs(t, env, dev)
	if _, err := env.Pool.Exec(ctx, `
		CREATE SEQUENCE cut_once; -- not rolled back with the cut transaction
		CREATE FUNCTION cut_record() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('cut_once') = 1 THEN
				PERFORM pg_terminate_backend(pg_backend_pid());
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER cut_record BEFORE INSERT ON action_idempotency FOR EACH ROW EXECUTE FUNCTION cut_record();`); err != nil {
		t.Fatal(err)
	}
	_, err := act(env, dev, lease, "k", "key", `{"key":"HOME"}`)
	t.Logf("first answer: %v", err)
	e := domain.AsError(err)
	if codeOf(err) != domain.CodeDeviceUnavailable || e.Retryable == nil || *e.Retryable {
		t.Fatalf("first attempt, whose record was cut: %v (%s, retryable %v); want device_unavailable, not retryable", err, codeOf(err), e.Retryable)
	}
	var performed int
	for i := range 3 {
		out, err := act(env, dev, lease, "k", "key", `{"key":"HOME"}`)
		t.Logf("retry %d: %s %v", i+1, out.Receipt.State, err)
		switch {
		case err == nil && out.Receipt.State == domain.ReceiptCommitted:
			performed++
		case codeOf(err) == domain.CodeDeviceUnavailable:
		default:
			t.Errorf("retry %d: %+v %v; want committed or device_unavailable", i+1, out.Receipt, err)
		}
	}
	if got := inputs(t, env, dev) - before; got > 1 || performed > 0 && got != 1 {
		t.Errorf("the phone took %d inputs; retries answered committed %d times", got, performed)
	}
	var pending int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM action_idempotency WHERE org_id = $1 AND state = 'requested'`, env.OrgID).
		Scan(&pending); err != nil || pending != 0 {
		t.Errorf("%d actions left pending (%v); want 0", pending, err)
	}
}
