package domain

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var poolT0 = time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC)

// poolWith folds takes (device id → organisation) taken a second apart.
func poolWith(loans ...[2]string) Pool {
	p := NewPool()
	for i, l := range loans {
		p.Apply(PoolDeviceTaken{DeviceID: l[0], OrgID: l[1], Sku: SkuEmulator, LeaseID: "lse_" + l[0], At: poolT0.Add(time.Duration(i) * time.Second)}, int64(i+1))
	}
	return p
}

// leaseEndsAt answers lease ends from a table (absent: none in force).
func leaseEndsAt(ends map[string]time.Time) func(string) (time.Time, error) {
	return func(id string) (time.Time, error) { return ends[id], nil }
}

func TestPoolTake(t *testing.T) {
	now := poolT0.Add(time.Minute)
	tests := []struct {
		name   string
		pool   Pool
		ends   map[string]time.Time
		org    string
		size   int
		limit  int
		code   Code
		extra  map[string]any
		absent []string
	}{
		{name: "empty pool lends", pool: NewPool(), org: "org_a", size: 2, limit: 2},
		{name: "under the limit lends", pool: poolWith([2]string{"d1", "org_a"}), org: "org_a", size: 3, limit: 2,
			ends: map[string]time.Time{"d1": now.Add(time.Minute)}},
		{name: "at the limit", pool: poolWith([2]string{"d1", "org_a"}, [2]string{"d2", "org_a"}), org: "org_a", size: 5, limit: 2,
			ends: map[string]time.Time{"d1": now.Add(90 * time.Second), "d2": now.Add(30*time.Second + 1)},
			code: CodeFleetAtCapacity, extra: map[string]any{"holding": 2, "limit": 2, "retryAfterMs": int64(30001)}},
		{name: "at the limit, a lease run out", pool: poolWith([2]string{"d1", "org_a"}), org: "org_a", size: 5, limit: 1,
			ends: map[string]time.Time{}, code: CodeFleetAtCapacity, extra: map[string]any{"holding": 1, "limit": 1, "retryAfterMs": int64(1000)}},
		{name: "others' units do not count to the limit", pool: poolWith([2]string{"d1", "org_b"}, [2]string{"d2", "org_b"}), org: "org_a",
			size: 5, limit: 2},
		{name: "every unit out", pool: poolWith([2]string{"d1", "org_b"}, [2]string{"d2", "org_c"}), org: "org_a", size: 2, limit: 2,
			ends: map[string]time.Time{"d1": now.Add(5 * time.Second), "d2": now.Add(time.Hour)},
			code: CodeDeviceUnavailable, extra: map[string]any{"reason": ReasonPoolExhausted, "retryAfterMs": int64(5000)},
			absent: []string{"holding", "limit", "deviceId"}},
		{name: "the limit is checked before the pool", pool: poolWith([2]string{"d1", "org_a"}), org: "org_a", size: 1, limit: 1,
			ends: map[string]time.Time{"d1": now.Add(2 * time.Second)}, code: CodeFleetAtCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(tt.pool.Out)
			evs, err := tt.pool.Take(PoolTake{OrgID: tt.org, By: Actor{Kind: ActorUser, ID: "u_1"}, Sku: SkuEmulator, Size: tt.size,
				Limit: tt.limit, DeviceID: "dev_new", LeaseID: "lse_new", Now: now, LeaseEnds: leaseEndsAt(tt.ends)})
			if tt.code == "" {
				if err != nil || len(evs) != 1 {
					t.Fatalf("got %v %v; want one event", evs, err)
				}
				taken, ok := evs[0].(PoolDeviceTaken)
				if !ok || taken.DeviceID != "dev_new" || taken.OrgID != tt.org || taken.LeaseID != "lse_new" || !taken.At.Equal(now) {
					t.Fatalf("got %+v; want pool.device_taken of dev_new for %s", evs[0], tt.org)
				}
				tt.pool.Apply(taken, tt.pool.Version+1)
				if len(tt.pool.Out) != before+1 || len(tt.pool.Holding(tt.org)) == 0 {
					t.Errorf("after apply: %d out; want %d", len(tt.pool.Out), before+1)
				}
				return
			}
			e := AsError(err)
			if e.Code != tt.code || e.Retryable == nil || !*e.Retryable || len(evs) != 0 {
				t.Fatalf("got %v %v; want retryable %s and no event", evs, err, tt.code)
			}
			for k, v := range tt.extra {
				if e.Extra[k] != v {
					t.Errorf("%s = %v (%T); want %v (%T)", k, e.Extra[k], e.Extra[k], v, v)
				}
			}
			for _, k := range tt.absent {
				if _, ok := e.Extra[k]; ok {
					t.Errorf("extra has %s; want it absent (%v)", k, e.Extra)
				}
			}
		})
	}
}

func TestPoolTakeLeaseEndsError(t *testing.T) {
	p := poolWith([2]string{"d1", "org_a"})
	boom := errors.New("store down")
	_, err := p.Take(PoolTake{OrgID: "org_a", Size: 3, Limit: 1, Now: poolT0,
		LeaseEnds: func(string) (time.Time, error) { return time.Time{}, boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v; want the lookup's error", err)
	}
}

func TestPoolReturnOnce(t *testing.T) {
	p := poolWith([2]string{"d1", "org_a"}, [2]string{"d2", "org_b"})
	evs := p.Return("d1", PoolReturnLeaseEnded, poolT0)
	ret, ok := evs[0].(PoolDeviceReturned)
	if len(evs) != 1 || !ok || ret.OrgID != "org_a" || ret.Reason != PoolReturnLeaseEnded {
		t.Fatalf("got %+v; want d1 returned for org_a", evs)
	}
	p.Apply(ret, 3)
	if p.OrgID != "org_a" || len(p.Out) != 1 || len(p.Holding("org_a")) != 0 || len(p.Holding("org_b")) != 1 {
		t.Errorf("after return: %+v; want only org_b's unit out", p)
	}
	if again := p.Return("d1", PoolReturnLeaseEnded, poolT0); len(again) != 0 {
		t.Errorf("second return: %v; want none", again)
	}
	if none := p.Return("d9", PoolReturnLeaseEnded, poolT0); len(none) != 0 {
		t.Errorf("return of a unit never lent: %v; want none", none)
	}
}

func TestPoolLoansOrderAndClone(t *testing.T) {
	p := poolWith([2]string{"d3", "org_a"}, [2]string{"d1", "org_b"}, [2]string{"d2", "org_a"})
	var ids []string
	for _, l := range p.Loans() {
		ids = append(ids, l.DeviceID)
	}
	if strings.Join(ids, ",") != "d3,d1,d2" {
		t.Errorf("loans %v; want taken order d3,d1,d2", ids)
	}
	if h := p.Holding("org_a"); len(h) != 2 || h[0].DeviceID != "d3" || h[1].DeviceID != "d2" {
		t.Errorf("holding %+v; want d3 then d2", h)
	}
	c := p.Clone()
	c.Apply(PoolDeviceReturned{DeviceID: "d3", OrgID: "org_a"}, 4)
	if len(p.Out) != 3 || len(c.Out) != 2 {
		t.Errorf("clone shares state: original %d out, clone %d", len(p.Out), len(c.Out))
	}
}

func TestPoolReturnDue(t *testing.T) {
	tests := []struct {
		inForce, active bool
		reason          string
		due             bool
	}{
		{true, true, "", false},
		{false, true, PoolReturnLeaseEnded, true},
		{true, false, PoolReturnAccessEnded, true},
		{false, false, PoolReturnAccessEnded, true},
	}
	for _, tt := range tests {
		reason, due := PoolReturnDue(tt.inForce, tt.active)
		if reason != tt.reason || due != tt.due {
			t.Errorf("PoolReturnDue(%v, %v) = %q %v; want %q %v", tt.inForce, tt.active, reason, due, tt.reason, tt.due)
		}
	}
}

func TestPoolDeviceName(t *testing.T) {
	if got := PoolDeviceName("Emulator"); got != "Emulator (pay-as-you-go)" {
		t.Errorf("got %q", got)
	}
	long := PoolDeviceName(strings.Repeat("é", 70))
	if _, err := CheckDeviceName(long); err != nil {
		t.Errorf("a long sku name gives an invalid device name: %v", err)
	}
	if got := PoolDeviceName(" "); got != "Pool device (pay-as-you-go)" {
		t.Errorf("got %q", got)
	}
}

func TestPoolEventsRegistered(t *testing.T) {
	for _, e := range []Event{PoolDeviceTaken{DeviceID: "d", OrgID: "o", At: poolT0}, PoolDeviceReturned{DeviceID: "d", OrgID: "o", Reason: PoolReturnLeaseEnded}} {
		name, _, data, err := Events.Encode(e)
		if err != nil {
			t.Fatalf("%T: %v", e, err)
		}
		back, err := Events.Decode(name, 1, data)
		if err != nil || back != e {
			t.Errorf("%s round trip: got %+v %v; want %+v", name, back, err, e)
		}
	}
}
