package domain

import (
	"testing"
	"time"
)

func usageAt(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func usageEndAt(t time.Time) *time.Time { return &t }

func TestBillingPeriods(t *testing.T) {
	for _, tt := range []struct {
		in         time.Time
		name       string
		start, end string
	}{
		{usageAt("2026-03-15T10:00:00Z"), "2026-03-01", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"},
		{usageAt("2026-12-31T23:59:59.999999Z"), "2026-12-01", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		// 01:30 on 1 March in Paris is still February in UTC.
		{usageAt("2026-03-01T01:30:00+02:00"), "2026-02-01", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"},
	} {
		t.Run(tt.in.String(), func(t *testing.T) {
			p := BillingPeriodOf(tt.in)
			if p.Name() != tt.name || !p.Start.Equal(usageAt(tt.start)) || !p.End.Equal(usageAt(tt.end)) {
				t.Errorf("got %s [%s, %s); want %s [%s, %s)", p.Name(), p.Start, p.End, tt.name, tt.start, tt.end)
			}
		})
	}
}

func TestParseBillingPeriod(t *testing.T) {
	p, err := ParseBillingPeriod("2026-02-01")
	if err != nil || !p.Start.Equal(usageAt("2026-02-01T00:00:00Z")) || !p.End.Equal(usageAt("2026-03-01T00:00:00Z")) {
		t.Fatalf("got %+v, %v; want February 2026", p, err)
	}
	for _, bad := range []string{"2026-02-02", "2026-02", "2026-13-01", "01-02-2026", "2026-02-01T00:00:00Z", "march", "2026-02-30"} {
		t.Run(bad, func(t *testing.T) {
			_, err := ParseBillingPeriod(bad)
			e := AsError(err)
			if err == nil || e.Code != CodeInvalidArgument || e.Extra["field"] != "period" {
				t.Fatalf("got %v; want invalid_argument naming the field period", err)
			}
		})
	}
}

func TestUsageIntervalWithin(t *testing.T) {
	jan, feb := BillingPeriodOf(usageAt("2026-01-10T00:00:00Z")), BillingPeriodOf(usageAt("2026-02-10T00:00:00Z"))
	later := usageAt("2026-03-05T00:00:00Z")
	for _, tt := range []struct {
		name     string
		iv       UsageInterval
		asOf     time.Time
		jan, feb time.Duration
	}{
		{"closed, inside one month",
			UsageInterval{Start: usageAt("2026-01-10T10:00:00Z"), ExpiresAt: usageAt("2026-01-10T11:00:00Z"), End: usageEndAt(usageAt("2026-01-10T10:20:30.5Z"))},
			later, 20*time.Minute + 30500*time.Millisecond, 0},
		{"split at the month boundary",
			UsageInterval{Start: usageAt("2026-01-31T23:30:00Z"), ExpiresAt: usageAt("2026-02-01T01:10:00Z"), End: usageEndAt(usageAt("2026-02-01T00:40:00Z"))},
			later, 30 * time.Minute, 40 * time.Minute},
		{"open: counts up to asOf",
			UsageInterval{Start: usageAt("2026-02-01T00:00:00Z"), ExpiresAt: usageAt("2026-02-01T01:00:00Z")},
			usageAt("2026-02-01T00:25:00.000001Z"), 0, 25*time.Minute + time.Microsecond},
		{"open and run out: counts up to its expiry, not to asOf",
			UsageInterval{Start: usageAt("2026-02-01T00:00:00Z"), ExpiresAt: usageAt("2026-02-01T00:10:00Z")},
			later, 0, 10 * time.Minute},
		{"open across the boundary, asOf in the next month",
			UsageInterval{Start: usageAt("2026-01-31T23:50:00Z"), ExpiresAt: usageAt("2026-02-01T00:50:00Z")},
			usageAt("2026-02-01T00:05:00Z"), 10 * time.Minute, 5 * time.Minute},
		{"a period after asOf has nothing",
			UsageInterval{Start: usageAt("2026-01-31T23:00:00Z"), ExpiresAt: usageAt("2026-02-01T01:00:00Z")},
			usageAt("2026-01-31T23:15:00Z"), 15 * time.Minute, 0},
		{"closed after asOf: counts up to asOf only",
			UsageInterval{Start: usageAt("2026-01-10T10:00:00Z"), ExpiresAt: usageAt("2026-01-10T11:00:00Z"), End: usageEndAt(usageAt("2026-01-10T10:50:00Z"))},
			usageAt("2026-01-10T10:30:00Z"), 30 * time.Minute, 0},
		{"ended before it started (clocks disagreeing) is nothing",
			UsageInterval{Start: usageAt("2026-01-10T10:00:00Z"), ExpiresAt: usageAt("2026-01-10T11:00:00Z"), End: usageEndAt(usageAt("2026-01-10T09:59:00Z"))},
			later, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.iv.Within(jan, tt.asOf); got != tt.jan {
				t.Errorf("January: got %s; want %s", got, tt.jan)
			}
			if got := tt.iv.Within(feb, tt.asOf); got != tt.feb {
				t.Errorf("February: got %s; want %s", got, tt.feb)
			}
		})
	}
}

// TestTallyUsageHandOver: a live session's driver hands the device to
// another (released and acquired at one instant), a parked run's device
// goes to a person and back to the run. No instant is counted twice or
// lost, lease and run time are told apart, devices come in id order.
func TestTallyUsageHandOver(t *testing.T) {
	feb := BillingPeriodOf(usageAt("2026-02-10T00:00:00Z"))
	h := usageAt("2026-02-03T10:00:00Z")
	m := func(n int) time.Time { return h.Add(time.Duration(n) * time.Minute) }
	intervals := []UsageInterval{
		// Device b: Ann drives 10 min, hands to Bob, who holds it still.
		{LeaseID: "l1", DeviceID: "dev_b", HolderKind: ActorUser, Start: m(0), ExpiresAt: m(60), End: usageEndAt(m(10))},
		{LeaseID: "l2", DeviceID: "dev_b", HolderKind: ActorUser, Start: m(10), ExpiresAt: m(70)},
		// Device a: a run 15 min, parked; a key's lease 5 min, handed back
		// to the run, which ended 20 min later.
		{LeaseID: "l3", DeviceID: "dev_a", HolderKind: ActorRun, RunID: "run_1", Start: m(0), ExpiresAt: m(90), End: usageEndAt(m(15))},
		{LeaseID: "l4", DeviceID: "dev_a", HolderKind: ActorAPIKey, Start: m(20), ExpiresAt: m(50), End: usageEndAt(m(25))},
		{LeaseID: "l5", DeviceID: "dev_a", HolderKind: ActorRun, RunID: "run_1", Start: m(25), ExpiresAt: m(90), End: usageEndAt(m(45))},
		// Device c: only January.
		{LeaseID: "l6", DeviceID: "dev_c", HolderKind: ActorUser, Start: usageAt("2026-01-03T10:00:00Z"), ExpiresAt: usageAt("2026-01-03T11:00:00Z"),
			End: usageEndAt(usageAt("2026-01-03T10:30:00Z"))},
	}
	r := TallyUsage(feb, m(40), intervals)
	want := []DeviceUsage{
		{DeviceID: "dev_a", Lease: 5 * time.Minute, Run: 30 * time.Minute},
		{DeviceID: "dev_b", Lease: 40 * time.Minute},
	}
	if len(r.Devices) != len(want) {
		t.Fatalf("got devices %+v; want %+v", r.Devices, want)
	}
	for i := range want {
		if r.Devices[i] != want[i] {
			t.Errorf("device %d: got %+v; want %+v", i, r.Devices[i], want[i])
		}
	}
	if r.Lease != 45*time.Minute || r.Run != 30*time.Minute || r.Total() != 75*time.Minute {
		t.Errorf("got lease %s run %s total %s; want 45m 30m 75m", r.Lease, r.Run, r.Total())
	}
	if r.Period != feb || !r.AsOf.Equal(m(40)) {
		t.Errorf("got period %+v as of %s; want February as of %s", r.Period, r.AsOf, m(40))
	}
	if empty := TallyUsage(feb, m(40), nil); empty.Devices == nil || len(empty.Devices) != 0 || empty.Total() != 0 {
		t.Errorf("no intervals: got %+v; want an empty device list and no time", empty)
	}
}
