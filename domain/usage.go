package domain

import (
	"slices"
	"strings"
	"time"
)

// Device time (GET /v1/usage): how long an organisation held each of its
// devices, by billing period. A device is in use while a lease on it is
// in force: a person's or a key's lease, or the lease of a run (whose
// holder is the run). The read model records one interval per lease; this
// file holds the arithmetic, which needs no database.

// BillingPeriodFormat is how a billing period is named (spec 2.4): the
// first day of its month, YYYY-MM-DD.
const BillingPeriodFormat = "2006-01-02"

// BillingPeriod is one billing month: the calendar month in UTC, from
// Start (inclusive, the first day at 00:00) to End (exclusive, the first
// day of the next month).
type BillingPeriod struct {
	Start time.Time
	End   time.Time
}

// BillingPeriodOf returns the billing period holding t.
func BillingPeriodOf(t time.Time) BillingPeriod {
	t = t.UTC()
	start := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return BillingPeriod{Start: start, End: start.AddDate(0, 1, 0)}
}

// ParseBillingPeriod reads a period as named by Name. Anything else (not a
// date, or a date that is not the first day of a month) is
// invalid_argument naming the rule and the field period.
func ParseBillingPeriod(s string) (BillingPeriod, error) {
	t, err := time.Parse(BillingPeriodFormat, strings.TrimSpace(s))
	if err != nil || t.Day() != 1 {
		return BillingPeriod{}, Errorf(CodeInvalidArgument,
			"period must be the first day of a billing month, written YYYY-MM-DD (for example 2026-03-01); got %q", s).
			With("field", "period")
	}
	return BillingPeriodOf(t), nil
}

// Name is the period as the API writes it: its first day, YYYY-MM-DD.
func (p BillingPeriod) Name() string { return p.Start.Format(BillingPeriodFormat) }

// UsageInterval is one lease's hold on a device, as the usage read model
// records it: from Start (the lease's acquisition) to End (when it was
// released, recorded expired, handed over or otherwise ended), or still
// open (End nil). An open interval never runs past ExpiresAt, the lease's
// expiry as last renewed: a lease that ran out but whose expiry is not
// recorded yet stopped counting when it ran out.
type UsageInterval struct {
	LeaseID  string
	DeviceID string
	// HolderKind is the lease holder's actor kind: ActorUser,
	// ActorAPIKey, or ActorRun for a run's lease.
	HolderKind string
	// RunID names the run that held the lease, for a run's lease.
	RunID     string
	Start     time.Time
	ExpiresAt time.Time
	End       *time.Time
}

// Run reports whether the interval is a run's device time.
func (iv UsageInterval) Run() bool { return iv.HolderKind == ActorRun }

// Within returns how much of the interval lies in period p, counting
// time up to asOf only: an open interval counts up to asOf (or its
// expiry, if sooner), and time after asOf is not counted even for a
// closed one, so a report is "device time in p as of asOf". Time outside
// p belongs to the neighbouring periods (an interval spanning a month's
// end is split at the boundary). It is never negative.
func (iv UsageInterval) Within(p BillingPeriod, asOf time.Time) time.Duration {
	end := iv.ExpiresAt
	if iv.End != nil && iv.End.Before(end) {
		end = *iv.End
	}
	end = minTime(end, asOf, p.End)
	start := iv.Start
	if p.Start.After(start) {
		start = p.Start
	}
	if !end.After(start) {
		return 0
	}
	return end.Sub(start)
}

func minTime(t time.Time, more ...time.Time) time.Time {
	for _, u := range more {
		if u.Before(t) {
			t = u
		}
	}
	return t
}

// DeviceUsage is one device's time in a period: under people's and keys'
// leases (Lease) and under runs' leases (Run).
type DeviceUsage struct {
	DeviceID string
	Lease    time.Duration
	Run      time.Duration
}

// Total is the device's time, leases and runs together.
func (d DeviceUsage) Total() time.Duration { return d.Lease + d.Run }

// UsageReport is an organisation's device time in one billing period as
// of one instant: per device (only devices with time in the period, in
// device id order) and in total. The totals are the sums of the devices'.
type UsageReport struct {
	Period  BillingPeriod
	AsOf    time.Time
	Devices []DeviceUsage
	Lease   time.Duration
	Run     time.Duration
	// CopilotInputTokens and CopilotOutputTokens are the tokens the
	// copilot's model took in the period, as its provider reported them.
	CopilotInputTokens  int64
	CopilotOutputTokens int64
}

// Total is the time of every device, leases and runs together.
func (r UsageReport) Total() time.Duration { return r.Lease + r.Run }

// TallyUsage adds up the intervals' time in period p as of asOf. The
// caller passes the intervals it may show (one organisation's, within the
// credential's devices); intervals with no time in p are left out.
func TallyUsage(p BillingPeriod, asOf time.Time, intervals []UsageInterval) UsageReport {
	r := UsageReport{Period: p, AsOf: asOf, Devices: []DeviceUsage{}}
	byDevice := map[string]*DeviceUsage{}
	for _, iv := range intervals {
		d := iv.Within(p, asOf)
		if d <= 0 {
			continue
		}
		u := byDevice[iv.DeviceID]
		if u == nil {
			u = &DeviceUsage{DeviceID: iv.DeviceID}
			byDevice[iv.DeviceID] = u
		}
		if iv.Run() {
			u.Run += d
			r.Run += d
		} else {
			u.Lease += d
			r.Lease += d
		}
	}
	for _, u := range byDevice {
		r.Devices = append(r.Devices, *u)
	}
	slices.SortFunc(r.Devices, func(a, b DeviceUsage) int { return strings.Compare(a.DeviceID, b.DeviceID) })
	return r
}
