package domain

import (
	"strings"
	"testing"
	"time"
)

func consoleBatch(n int) []ConsoleEventInput {
	out := make([]ConsoleEventInput, n)
	for i := range out {
		out[i] = ConsoleEventInput{Type: ConsolePageView, Page: "/fleet"}
	}
	return out
}

func consoleIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = NewID(PrefixConsoleEvent)
	}
	return out
}

func TestCheckConsoleBatch(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ok := []ConsoleEventInput{
		{Type: ConsolePageView, Page: "/devices/:id", At: &at},
		{Type: ConsoleClientError, Page: "/runs", Message: "TypeError: x is undefined\n    at render (runs.js:12)"},
	}
	if err := CheckConsoleBatch(ok); err != nil {
		t.Fatalf("a valid batch: got %v", err)
	}
	tests := []struct {
		name  string
		batch []ConsoleEventInput
		field string
	}{
		{"empty", nil, "events"},
		{"21 events", consoleBatch(21), "events"},
		{"unknown type", []ConsoleEventInput{{Type: "click", Page: "/fleet"}}, "events[0].type"},
		{"no page", []ConsoleEventInput{ok[0], {Type: ConsolePageView, Page: "  "}}, "events[1].page"},
		{"page too long", []ConsoleEventInput{{Type: ConsolePageView, Page: strings.Repeat("p", 201)}}, "events[0].page"},
		{"page with a newline", []ConsoleEventInput{{Type: ConsolePageView, Page: "/fleet\n"}}, "events[0].page"},
		{"message too long", []ConsoleEventInput{{Type: ConsoleClientError, Page: "/x", Message: strings.Repeat("m", 1001)}}, "events[0].message"},
		{"message not UTF-8", []ConsoleEventInput{{Type: ConsoleClientError, Page: "/x", Message: "\xff"}}, "events[0].message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckConsoleBatch(tt.batch)
			if ErrorCode(err) != CodeInvalidArgument || AsError(err).Extra["field"] != tt.field {
				t.Fatalf("got %v; want invalid_argument naming %s", err, tt.field)
			}
		})
	}
	if err := CheckConsoleBatch(consoleBatch(MaxConsoleEventsPerBatch)); err != nil {
		t.Errorf("a batch of %d: got %v; want accepted", MaxConsoleEventsPerBatch, err)
	}
	if err := CheckConsoleBatch([]ConsoleEventInput{{Type: ConsolePageView, Page: strings.Repeat("é", 200)}}); err != nil {
		t.Errorf("a page of 200 characters (400 bytes): got %v; want accepted (the bound counts characters)", err)
	}
}

func TestConsoleTelemetryRecord(t *testing.T) {
	person := Auth{OrgID: "org_a", Kind: PrincipalConsole, UserID: "u_ann", Role: RoleMember, Scopes: AllScopes}
	now := time.Date(2026, 3, 1, 12, 0, 45, 250_000_000, time.UTC)
	clientAt := time.Date(2026, 3, 1, 13, 0, 44, 0, time.FixedZone("CET", 3600))
	w := &ConsoleTelemetry{}
	batch := []ConsoleEventInput{{Type: ConsoleClientError, Page: " /runs ", Message: "boom", At: &clientAt}}
	evs, err := w.Record(person, batch, consoleIDs(1), "Mozilla/5.0\r\n"+strings.Repeat("x", 400), now)
	if err != nil || len(evs) != 1 {
		t.Fatalf("got %v %v; want one event", evs, err)
	}
	e := evs[0].(ConsoleEventRecorded)
	if e.OrgID != "org_a" || e.By != (Actor{Kind: ActorUser, ID: "u_ann"}) || e.Page != "/runs" || e.Message != "boom" ||
		!e.ReceivedAt.Equal(now) || e.ClientAt == nil || e.ClientAt.Location() != time.UTC || !e.ClientAt.Equal(clientAt) {
		t.Errorf("got %+v", e)
	}
	if strings.ContainsAny(e.UserAgent, "\r\n") || len([]rune(e.UserAgent)) != MaxConsoleUserAgentRunes {
		t.Errorf("got user agent of %d characters %q; want control characters dropped and %d characters", len([]rune(e.UserAgent)), e.UserAgent[:20], MaxConsoleUserAgentRunes)
	}
	w.Apply(e)

	// The budget: 60 a minute, a batch refused whole when it does not fit.
	for range 2 {
		evs, err := w.Record(person, consoleBatch(20), consoleIDs(20), "", now)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			w.Apply(e)
		}
	}
	if w.Count != 41 {
		t.Fatalf("got count %d; want 41", w.Count)
	}
	_, err = w.Record(person, consoleBatch(20), consoleIDs(20), "", now)
	if ErrorCode(err) != CodeRateLimited {
		t.Fatalf("a batch past the budget: got %v; want rate_limited", err)
	}
	// 14.75 s are left of the minute: 14750 ms, which Retry-After rounds up.
	if ms := AsError(err).Extra["retryAfterMs"]; ms != int64(14750) {
		t.Errorf("got retryAfterMs %v; want 14750", ms)
	}
	if evs, err := w.Record(person, consoleBatch(19), consoleIDs(19), "", now); err != nil || len(evs) != 19 {
		t.Errorf("a batch that fits exactly: got %d events, %v", len(evs), err)
	}

	for _, tt := range []struct {
		name string
		a    Auth
	}{
		{"an API key", Auth{OrgID: "org_a", Kind: PrincipalAPIKey, APIKeyID: "key_1", Scopes: AllScopes}},
		{"an OAuth app", Auth{OrgID: "org_a", Kind: PrincipalApp, UserID: "u", ClientID: "c", Scopes: AllScopes}},
	} {
		if _, err := (&ConsoleTelemetry{}).Record(tt.a, consoleBatch(1), consoleIDs(1), "", now); ErrorCode(err) != CodePermissionDenied {
			t.Errorf("%s: got %v; want permission_denied", tt.name, err)
		}
	}
}

func TestConsoleTelemetryStreamIsPerPersonAndMinute(t *testing.T) {
	ann, bea := Actor{Kind: ActorUser, ID: "u_ann"}, Actor{Kind: ActorUser, ID: "u_bea"}
	t0 := time.Date(2026, 3, 1, 12, 0, 59, 0, time.UTC)
	w0 := ConsoleTelemetryWindow(t0)
	if w0 != time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) {
		t.Fatalf("got window %v", w0)
	}
	same := ConsoleTelemetryStream("org_a", ann, w0)
	for _, other := range []string{
		ConsoleTelemetryStream("org_a", bea, w0),
		ConsoleTelemetryStream("org_b", ann, w0),
		ConsoleTelemetryStream("org_a", ann, ConsoleTelemetryWindow(t0.Add(time.Second))),
	} {
		if other == same {
			t.Errorf("stream %q is shared; want one per organisation, person and minute", same)
		}
	}
	if ConsoleTelemetryStream("org_a", ann, ConsoleTelemetryWindow(t0.Add(-30*time.Second))) != same {
		t.Error("two instants of one minute name different streams")
	}
}
