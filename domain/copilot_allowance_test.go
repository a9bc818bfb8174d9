package domain

import (
	"testing"
	"time"
)

func TestCopilotAllowanceArithmetic(t *testing.T) {
	p := BillingPeriodOf(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	cases := []struct {
		name                        string
		perDevice                   int64
		devices                     int
		used                        int64
		included                    int64
		fraction                    float64
		exhausted, nearLimit, spent bool
	}{
		{"fresh", 1000, 2, 0, 2000, 0, false, false, false},
		{"four fifths is not past", 1000, 2, 1600, 2000, 0.8, false, false, false},
		{"past four fifths", 1000, 2, 1601, 2000, 0.8005, false, true, false},
		{"at 100%", 1000, 2, 2000, 2000, 1, true, false, true},
		{"over, clamped", 1000, 2, 2500, 2000, 1, true, false, true},
		{"nothing included, nothing used", 1000, 0, 0, 0, 0, false, false, true},
		{"nothing included, first token", 1000, 0, 1, 0, 0, true, false, true},
	}
	for _, c := range cases {
		a := MeteredCopilotAllowance(c.perDevice, c.devices, c.used, p)
		if a.Included != c.included || a.UsedFraction != c.fraction || a.Exhausted != c.exhausted || a.NearLimit != c.nearLimit ||
			a.Spent() != c.spent || !a.Metered || a.Period != p {
			t.Errorf("%s: got %+v spent=%v", c.name, a, a.Spent())
		}
	}
	u := UnmeteredCopilotAllowance(p)
	if u.Metered || u.Spent() || u.Exhausted || u.Used != 0 {
		t.Errorf("unmetered: %+v", u)
	}
}
