package domain

import (
	"testing"
	"time"
)

func TestNotificationPreferencesApply(t *testing.T) {
	var p NotificationPreferences
	if c := p.For(NotifyRunEnded); !c.Console || c.Email {
		t.Fatalf("no address: %+v; want console only", c)
	}
	addr := "ops@example.com"
	p, err := p.Apply(NotificationPreferencesChange{Email: &addr, Kinds: map[string]map[string]bool{NotifyRunEnded: {ChannelEmail: false}}})
	if err != nil {
		t.Fatal(err)
	}
	if c := p.For(NotifyRunEnded); !c.Console || c.Email {
		t.Fatalf("run_ended: %+v; want console only", c)
	}
	if c := p.For(NotifyGatewayGone); !c.Console || !c.Email {
		t.Fatalf("gateway_gone: %+v; want both", c)
	}
	// A later change keeps what it does not name.
	q, err := p.Apply(NotificationPreferencesChange{Kinds: map[string]map[string]bool{NotifyRunEnded: {ChannelConsole: false}}})
	if err != nil || q.Email != addr || q.For(NotifyRunEnded) != (NotificationChannels{}) || p.For(NotifyRunEnded).Console != true {
		t.Fatalf("second change: %+v (%v); the first must be untouched: %+v", q, err, p)
	}
	for _, c := range []struct {
		change NotificationPreferencesChange
		field  string
	}{
		{NotificationPreferencesChange{Email: ptrTo("Ops <ops@example.com>")}, "email"},
		{NotificationPreferencesChange{Email: ptrTo("not an address")}, "email"},
		{NotificationPreferencesChange{Kinds: map[string]map[string]bool{"weather": {ChannelEmail: true}}}, "kinds.weather"},
		{NotificationPreferencesChange{Kinds: map[string]map[string]bool{NotifyRunEnded: {"pager": true}}}, "kinds.run_ended.pager"},
	} {
		_, err := p.Apply(c.change)
		if e := AsError(err); e == nil || e.Code != CodeInvalidArgument || e.Extra["field"] != c.field {
			t.Errorf("%+v: got %v; want invalid_argument on %s", c.change, err, c.field)
		}
	}
}

func ptrTo(s string) *string { return &s }

func TestKeyExpiryThreshold(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for left, want := range map[time.Duration]string{
		8 * 24 * time.Hour: "", 7 * 24 * time.Hour: KeyExpiryWeek, 25 * time.Hour: KeyExpiryWeek,
		24 * time.Hour: KeyExpiryDay, time.Minute: KeyExpiryDay, 0: "", -time.Hour: "",
	} {
		if got := KeyExpiryThreshold(now.Add(left), now); got != want {
			t.Errorf("%v left: got %q; want %q", left, got, want)
		}
	}
}

func TestDecideEmailAttempt(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if e := DecideEmailAttempt("ntf_1", "u", 1, at, EmailResult{}); e.Outcome != EmailSent || e.IdempotencyKey != "ntf_1@phonefleet" {
		t.Errorf("accepted: %+v", e)
	}
	if e := DecideEmailAttempt("ntf_1", "u", 1, at, EmailResult{Temporary: true}); e.Outcome != EmailRetrying || !e.NextAttemptAt.Equal(at.Add(EmailRetryGaps[0])) {
		t.Errorf("4xx: %+v", e)
	}
	if e := DecideEmailAttempt("ntf_1", "u", len(EmailRetryGaps)+1, at, EmailResult{Temporary: true}); e.Outcome != EmailFailed || e.NextAttemptAt != nil {
		t.Errorf("last 4xx: %+v", e)
	}
	if e := DecideEmailAttempt("ntf_1", "u", 1, at, EmailResult{Permanent: true}); e.Outcome != EmailFailed {
		t.Errorf("5xx: %+v", e)
	}
	if e := DecideEmailAttempt("ntf_1", "u", 2, at, EmailResult{Unconfirmed: true}); e.Outcome != EmailUnconfirmed {
		t.Errorf("unconfirmed: %+v", e)
	}
}

// TestCopilotAllowanceCrossed: an answer raises near-limit when it takes
// the allowance past four fifths, exhausted when it spends it (only that
// one when it does both), nothing otherwise, and never unmetered.
func TestCopilotAllowanceCrossed(t *testing.T) {
	p := BillingPeriodOf(time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC))
	at := func(used int64) CopilotAllowance { return MeteredCopilotAllowance(1000, 1, used, p) }
	for _, c := range []struct {
		before, after int64
		want          string
	}{
		{0, 800, ""}, {0, 801, NotifyCopilotNearLimit}, {800, 850, NotifyCopilotNearLimit}, {801, 900, ""},
		{900, 999, ""}, {999, 1000, NotifyCopilotExhausted}, {0, 1500, NotifyCopilotExhausted}, {1000, 1200, ""},
		{850, 1000, NotifyCopilotExhausted},
	} {
		if got := CopilotAllowanceCrossed(at(c.before), at(c.after)); got != c.want {
			t.Errorf("%d → %d of 1000: %q; want %q", c.before, c.after, got, c.want)
		}
	}
	// Nothing included: the first token spends it.
	if got := CopilotAllowanceCrossed(MeteredCopilotAllowance(1000, 0, 0, p), MeteredCopilotAllowance(1000, 0, 5, p)); got != NotifyCopilotExhausted {
		t.Errorf("nothing included, first tokens: %q; want exhausted", got)
	}
	if got := CopilotAllowanceCrossed(UnmeteredCopilotAllowance(p), UnmeteredCopilotAllowance(p)); got != "" {
		t.Errorf("unmetered: %q; want nothing", got)
	}
	m := NotificationMessageFor(NotifyCopilotExhausted, map[string]string{"used": "1000", "included": "1000", "period": "2026-03-01",
		"threadId": "cth_1", "userId": "user_a"})
	if m.Title == "" || m.Subject["period"] != "2026-03-01" || m.Subject["threadId"] != "cth_1" || len(m.Subject) != 2 {
		t.Errorf("message %+v; want a title and subject {period, threadId}", m)
	}
}
