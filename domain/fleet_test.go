package domain

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

var (
	fleetT0    = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fleetAlice = Actor{Kind: ActorUser, ID: "user_alice"}
	fleetKey   = Actor{Kind: ActorAPIKey, ID: "key_1"}
)

func registeredDevice() *Device {
	d := &Device{}
	d.Apply(DeviceRegistered{DeviceID: "dev_1", OrgID: "org_1", Name: "one", Backend: BackendSim}, 1)
	return d
}

func applyDevice(d *Device, evs []Event) {
	for _, e := range evs {
		d.Apply(e, d.Version+1)
	}
}

func TestAcquireLease(t *testing.T) {
	tests := []struct {
		name       string
		prepare    func(d *Device)
		at         time.Time
		wantCode   Code
		wantReason string
		wantTypes  []string
		wantToken  int64
	}{
		{name: "free device", prepare: func(*Device) {}, at: fleetT0,
			wantTypes: []string{"lease.acquired"}, wantToken: 1},
		{name: "leased by someone", prepare: func(d *Device) {
			evs, _ := d.AcquireLease(fleetT0, fleetKey, "lse_a", time.Minute)
			applyDevice(d, evs)
		}, at: fleetT0.Add(59 * time.Second), wantCode: CodeDeviceUnavailable, wantReason: ReasonAlreadyLeased},
		{name: "leased by the caller", prepare: func(d *Device) {
			evs, _ := d.AcquireLease(fleetT0, fleetAlice, "lse_a", time.Minute)
			applyDevice(d, evs)
		}, at: fleetT0, wantCode: CodeDeviceUnavailable, wantReason: ReasonAlreadyLeased},
		{name: "lease ran out unrecorded", prepare: func(d *Device) {
			evs, _ := d.AcquireLease(fleetT0, fleetKey, "lse_a", time.Minute)
			applyDevice(d, evs)
		}, at: fleetT0.Add(time.Minute), wantTypes: []string{"lease.expired", "lease.acquired"}, wantToken: 2},
		{name: "after a release", prepare: func(d *Device) {
			evs, _ := d.AcquireLease(fleetT0, fleetKey, "lse_a", time.Minute)
			applyDevice(d, evs)
			evs, _ = d.ReleaseLease(fleetT0, fleetKey, "lse_a")
			applyDevice(d, evs)
		}, at: fleetT0, wantTypes: []string{"lease.acquired"}, wantToken: 2},
		{name: "unregistered device", prepare: func(d *Device) { *d = Device{ID: "dev_1"} }, at: fleetT0,
			wantCode: CodeDeviceUnavailable, wantReason: ReasonNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := registeredDevice()
			tt.prepare(d)
			evs, err := d.AcquireLease(tt.at, fleetAlice, "lse_new", time.Minute)
			if tt.wantCode != "" {
				e := AsError(err)
				if e.Code != tt.wantCode || e.Extra["reason"] != tt.wantReason {
					t.Fatalf("got %v (reason %v); want %s (%s)", err, e.Extra["reason"], tt.wantCode, tt.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, e := range evs {
				types = append(types, e.EventName())
			}
			if strings.Join(types, ",") != strings.Join(tt.wantTypes, ",") {
				t.Fatalf("got events %v; want %v", types, tt.wantTypes)
			}
			applyDevice(d, evs)
			if d.Lease == nil || d.Lease.FencingToken != tt.wantToken || d.Lease.Holder != fleetAlice {
				t.Errorf("got lease %+v; want token %d held by fleetAlice", d.Lease, tt.wantToken)
			}
		})
	}
}

func TestCheckLease(t *testing.T) {
	d := registeredDevice()
	evs, _ := d.AcquireLease(fleetT0, fleetAlice, "lse_a", time.Minute)
	applyDevice(d, evs)
	tests := []struct {
		name   string
		at     time.Time
		actor  Actor
		lease  string
		code   Code
		reason string
	}{
		{"current lease", fleetT0, fleetAlice, "lse_a", "", ""},
		{"no lease given", fleetT0, fleetAlice, "", CodeLeaseRequired, ""},
		{"another lease", fleetT0, fleetAlice, "lse_b", CodeLeaseMismatch, "not_current"},
		{"expired", fleetT0.Add(time.Minute), fleetAlice, "lse_a", CodeLeaseMismatch, "expired"},
		{"another holder", fleetT0, fleetKey, "lse_a", CodeLeaseMismatch, "not_holder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := d.CheckLease(tt.at, tt.actor, tt.lease)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("got %v; want the lease", err)
				}
				return
			}
			e := AsError(err)
			if e.Code != tt.code {
				t.Fatalf("got %v; want %s", err, tt.code)
			}
			if tt.reason != "" && e.Extra["reason"] != tt.reason {
				t.Errorf("got reason %v; want %s", e.Extra["reason"], tt.reason)
			}
		})
	}
}

func TestFencingTokenOnlyGrows(t *testing.T) {
	d := registeredDevice()
	now := fleetT0
	var last int64
	for i := 0; i < 20; i++ {
		evs, err := d.AcquireLease(now, fleetAlice, "lse_"+string(rune('a'+i)), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		applyDevice(d, evs)
		if d.Lease.FencingToken <= last {
			t.Fatalf("cycle %d: got token %d after %d", i, d.Lease.FencingToken, last)
		}
		last = d.Lease.FencingToken
		switch i % 3 {
		case 0:
			now = now.Add(time.Minute) // lazily expired by the next acquire
		case 1:
			now = now.Add(time.Minute)
			applyDevice(d, d.ExpireLease(now))
		case 2:
			evs, _ := d.ReleaseLease(now, fleetAlice, d.Lease.ID)
			applyDevice(d, evs)
		}
	}
}

func TestParseAction(t *testing.T) {
	tests := []struct {
		name, typ, args string
		wantErr         bool
		wantArgs        string
	}{
		{"tap", "tap", `{"x":1,"y":2}`, false, `{"x":1,"y":2}`},
		{"tap by element", "tap", `{"ref":"ab12"}`, false, `{"ref":"ab12"}`},
		{"tap with ref and x", "tap", `{"ref":"ab12","x":1}`, true, ""},
		{"tap missing y", "tap", `{"x":1}`, true, ""},
		{"negative coordinate", "tap", `{"x":-1,"y":2}`, true, ""},
		{"fractional coordinate", "tap", `{"x":1.5,"y":2}`, true, ""},
		{"unknown argument", "double_tap", `{"x":1,"y":2,"z":3}`, true, ""},
		{"long press default", "long_press", `{"x":1,"y":2}`, false, `{"x":1,"y":2}`},
		{"swipe", "swipe", `{"x1":1,"y1":2,"x2":3,"y2":4,"durationMs":200}`, false, `{"durationMs":200,"x1":1,"x2":3,"y1":2,"y2":4}`},
		{"unicode text", "type_text", `{"text":"héllo 世界 🥛"}`, false, `{"text":"héllo 世界 🥛"}`},
		{"empty text", "type_text", `{"text":""}`, true, ""},
		{"control character", "type_text", `{"text":"a\nb"}`, true, ""},
		{"key upper-cased", "key", `{"key":"home"}`, false, `{"key":"HOME"}`},
		{"open app", "open_app", `{"package":"com.example.notes"}`, false, `{"package":"com.example.notes"}`},
		{"install without package", "install_app", `{}`, true, ""},
		{"unknown action", "teleport", `{}`, true, ""},
		{"arguments not an object", "tap", `[1,2]`, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseAction(tt.typ, json.RawMessage(tt.args))
			if tt.wantErr {
				if ErrorCode(err) != CodeInvalidArgument {
					t.Fatalf("got %v; want invalid_argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(a.ArgumentsJSON()); got != tt.wantArgs {
				t.Errorf("got arguments %s; want %s", got, tt.wantArgs)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	a, _ := ParseAction("tap", json.RawMessage(`{"y":2,"x":1}`))
	b, _ := ParseAction("tap", json.RawMessage(`{"x":1,"y":2}`))
	c, _ := ParseAction("tap", json.RawMessage(`{"x":1,"y":3}`))
	if a.Fingerprint("dev_1") != b.Fingerprint("dev_1") {
		t.Errorf("the same action with arguments in another order has another fingerprint")
	}
	if a.Fingerprint("dev_1") == c.Fingerprint("dev_1") || a.Fingerprint("dev_1") == a.Fingerprint("dev_2") {
		t.Errorf("different actions share a fingerprint")
	}
}

// TestReceiptNeverCarriesLeaseOrFencingToken renders receipts of every
// outcome and checks the actor rule and the absent lease fields.
func TestReceiptNeverCarriesLeaseOrFencingToken(t *testing.T) {
	req := ActionRequested{ActionID: "act_1", DeviceID: "dev_1", IdempotencyKey: "k", Action: ActionTap,
		Arguments: json.RawMessage(`{"x":1,"y":2}`), Actor: fleetKey, LeaseID: "lse_secret", FencingToken: 42, RequestedAt: fleetT0}
	outcomes := []struct {
		name  string
		after []Event
		state string
	}{
		{"pending", nil, ReceiptPending},
		{"committed", []Event{ActionCommitted{ActionID: "act_1", Result: ActionResult{Description: "tapped"}, StartedAt: fleetT0, FinishedAt: fleetT0}}, ReceiptCommitted},
		{"failed", []Event{ActionFailed{ActionID: "act_1", Code: CodeStaleFrame, Message: "stale"}}, ReceiptFailed},
		{"unknown", []Event{ActionOutcomeUnknown{ActionID: "act_1", Reason: "gone"}}, ReceiptPending},
	}
	for _, o := range outcomes {
		t.Run(o.name, func(t *testing.T) {
			r := &ActionRecord{}
			r.Apply("org_1", req, 1)
			for i, e := range o.after {
				r.Apply("org_1", e, int64(i+2))
			}
			rc := r.Receipt()
			if rc.State != o.state {
				t.Errorf("got state %s; want %s", rc.State, o.state)
			}
			b, _ := json.Marshal(rc)
			for _, banned := range []string{"leaseId", "fencingToken", "lse_secret", "42"} {
				if strings.Contains(string(b), banned) {
					t.Errorf("receipt carries %q: %s", banned, b)
				}
			}
			var m struct {
				Actor map[string]string `json:"actor"`
			}
			_ = json.Unmarshal(b, &m)
			if len(m.Actor) != 1 || m.Actor["apiKeyId"] != "key_1" {
				t.Errorf("got actor %v; want only apiKeyId key_1", m.Actor)
			}
		})
	}
}

func TestActionRecordTakesOneOutcome(t *testing.T) {
	r := &ActionRecord{}
	r.Apply("org_1", ActionRequested{ActionID: "act_1"}, 1)
	evs, err := r.MarkOutcomeUnknown("gone", fleetT0)
	if err != nil {
		t.Fatal(err)
	}
	r.Apply("org_1", evs[0], 2)
	if _, err := r.Commit(ActionCommitted{ActionID: "act_1"}); err == nil {
		t.Errorf("an action whose outcome is unknown was committed")
	}
	if _, err := r.MarkReviewed(fleetAlice, "", fleetT0); err != nil {
		t.Errorf("review of a finished action: %v", err)
	}
	if ErrorCode(r.OutcomeError()) != CodeActionOutcomeUnknown {
		t.Errorf("got %v; want action_outcome_unknown", r.OutcomeError())
	}
}

// TestRecordedFailureIsNotRetryableUnderItsKey: a failed action's key
// answers that failure on every later request with the key, so the
// failure says retryable false (re-issuing the same call unchanged only
// replays it; a new key tries again), whatever its code — a
// device_disconnected "nothing was done" included, which said nothing and
// went out as 503, so that a client repeated the key until it gave up (the
// chaos suite's long runs: the adb phone's keys caught by a gateway kill
// answered 503 device_disconnected for 90 s).
func TestRecordedFailureIsNotRetryableUnderItsKey(t *testing.T) {
	for _, code := range []Code{CodeDeviceDisconnected, CodeDeviceUnavailable, CodeBackendCommandFailed} {
		r := &ActionRecord{}
		r.Apply("org_1", ActionRequested{ActionID: "act_1", IdempotencyKey: "key-1", DeviceID: "dev_1"}, 1)
		r.Apply("org_1", ActionFailed{ActionID: "act_1", DeviceID: "dev_1", Code: code, Message: "nothing was done"}, 2)
		e := AsError(r.OutcomeError())
		if e == nil || e.Code != code || e.Retryable == nil || *e.Retryable || e.Extra["idempotencyKey"] != "key-1" {
			t.Errorf("%s recorded: got %+v; want %s, retryable false, naming the key", code, e, code)
		}
	}
}
