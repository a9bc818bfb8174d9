package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// consolePageViews is a batch of n page views.
func consolePageViews(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = `{"type":"page_view","page":"/fleet"}`
	}
	return `{"events":[` + strings.Join(items, ",") + `]}`
}

type consoleEventList struct {
	Events []struct {
		EventID   string  `json:"eventId"`
		Type      string  `json:"type"`
		Page      string  `json:"page"`
		Message   *string `json:"message"`
		UserAgent *string `json:"userAgent"`
		Actor     struct {
			UserID string `json:"userId"`
		} `json:"actor"`
		ClientAt *string `json:"clientAt"`
	} `json:"events"`
	NextBefore string `json:"nextBefore"`
}

func TestConsoleEventRoutes(t *testing.T) {
	e := newCLIHTTPEnv(t, cliEnvOptions{})
	var rec consoleEventsRecorded
	e.json("member", "POST", "/v1/console/events", `{"events":[
		{"type":"page_view","page":"/devices/:id","at":"2026-03-01T12:00:00.123Z"},
		{"type":"client_error","page":"/runs","message":"TypeError: x is undefined"}]}`,
		map[string]string{"User-Agent": "test-browser/2"}, http.StatusOK, &rec)
	if rec.Recorded != 2 || len(rec.EventIDs) != 2 {
		t.Fatalf("got %+v; want two events recorded", rec)
	}
	e.json("other-org", "POST", "/v1/console/events", consolePageViews(1), nil, http.StatusOK, nil)

	var list consoleEventList
	e.json("admin", "GET", "/v1/console/events", "", nil, http.StatusOK, &list)
	if len(list.Events) != 2 || list.Events[0].EventID != rec.EventIDs[1] || list.Events[1].EventID != rec.EventIDs[0] {
		t.Fatalf("got %+v; want organisation A's two events, newest first", list)
	}
	first, second := list.Events[1], list.Events[0]
	if first.Page != "/devices/:id" || first.ClientAt == nil || *first.ClientAt != "2026-03-01T12:00:00.123000Z" || first.Message != nil ||
		first.Actor.UserID != "u_max" || first.UserAgent == nil || *first.UserAgent != "test-browser/2" {
		t.Errorf("got %+v", first)
	}
	if second.Type != "client_error" || second.Message == nil || *second.Message != "TypeError: x is undefined" || second.ClientAt != nil {
		t.Errorf("got %+v", second)
	}
	var errs consoleEventList
	e.json("admin", "GET", "/v1/console/events?type=client_error&limit=1", "", nil, http.StatusOK, &errs)
	if len(errs.Events) != 1 || errs.Events[0].Type != "client_error" || errs.NextBefore != "" {
		t.Fatalf("client errors: got %+v", errs)
	}
	var page1, page2 consoleEventList
	e.json("admin", "GET", "/v1/console/events?limit=1", "", nil, http.StatusOK, &page1)
	e.json("admin", "GET", "/v1/console/events?limit=1&before="+page1.NextBefore, "", nil, http.StatusOK, &page2)
	if page1.NextBefore != rec.EventIDs[1] || len(page2.Events) != 1 || page2.Events[0].EventID != rec.EventIDs[0] {
		t.Fatalf("paging: got %+v then %+v", page1, page2)
	}

	tests := []struct {
		name, principal, method, path, body string
		status                              int
		code, field                         string
	}{
		{"no credential", "", "POST", "/v1/console/events", consolePageViews(1), 401, "unauthorized", ""},
		{"an API key", "key", "POST", "/v1/console/events", consolePageViews(1), 403, "permission_denied", ""},
		{"an OAuth app", "app", "POST", "/v1/console/events", consolePageViews(1), 403, "permission_denied", ""},
		{"21 events", "member", "POST", "/v1/console/events", consolePageViews(21), 400, "invalid_argument", "events"},
		{"no events", "member", "POST", "/v1/console/events", `{"events":[]}`, 400, "invalid_argument", "events"},
		{"an unknown type", "member", "POST", "/v1/console/events", `{"events":[{"type":"click","page":"/fleet"}]}`, 400, "invalid_argument", "events[0].type"},
		{"a page too long", "member", "POST", "/v1/console/events", `{"events":[{"type":"page_view","page":"/` + strings.Repeat("p", 200) + `"}]}`, 400, "invalid_argument", "events[0].page"},
		{"a message too long", "member", "POST", "/v1/console/events", `{"events":[{"type":"client_error","page":"/x","message":"` + strings.Repeat("m", 1001) + `"}]}`, 400, "invalid_argument", "events[0].message"},
		{"a time that is none", "member", "POST", "/v1/console/events", `{"events":[{"type":"page_view","page":"/x","at":"yesterday"}]}`, 400, "invalid_argument", "events[0].at"},
		{"2 MiB", "member", "POST", "/v1/console/events", `{"events":[{"type":"page_view","page":"` + strings.Repeat("p", 2<<20) + `"}]}`, 413, "payload_too_large", ""},
		{"read as a member", "member", "GET", "/v1/console/events", "", 403, "permission_denied", ""},
		{"read with a key", "key", "GET", "/v1/console/events", "", 403, "permission_denied", ""},
		{"read with an app", "app", "GET", "/v1/console/events", "", 403, "permission_denied", ""},
		{"read a limit of 0", "admin", "GET", "/v1/console/events?limit=0", "", 400, "invalid_argument", "limit"},
		{"read an unknown type", "admin", "GET", "/v1/console/events?type=click", "", 400, "invalid_argument", "type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := e.json(tt.principal, tt.method, tt.path, tt.body, nil, tt.status, nil)
			code, body := cliError(t, raw)
			if code != tt.code || (tt.field != "" && body["field"] != tt.field) {
				t.Fatalf("got %s; want %s naming %q", raw, tt.code, tt.field)
			}
		})
	}
}

// TestConsoleEventRoutesBudget: the 61st event of a person's minute is
// refused 429 with Retry-After to the end of the minute; the next minute
// is a new budget.
func TestConsoleEventRoutesBudget(t *testing.T) {
	e := newCLIHTTPEnv(t, cliEnvOptions{})
	e.clock.Set(time.Date(2026, 3, 1, 12, 0, 15, 500_000_000, time.UTC))
	for range 3 {
		e.json("member", "POST", "/v1/console/events", consolePageViews(20), nil, http.StatusOK, nil)
	}
	resp, raw := e.do("member", "POST", "/v1/console/events", consolePageViews(1), nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "45" {
		t.Fatalf("the 61st event: got %d, Retry-After %q, %s; want 429 with Retry-After 45", resp.StatusCode, resp.Header.Get("Retry-After"), raw)
	}
	if code, _ := cliError(t, raw); code != "rate_limited" {
		t.Fatalf("got %s; want rate_limited", raw)
	}
	// Another person of the organisation has a budget of their own.
	e.json("admin", "POST", "/v1/console/events", consolePageViews(1), nil, http.StatusOK, nil)
	e.clock.Advance(45 * time.Second)
	e.json("member", "POST", "/v1/console/events", consolePageViews(1), nil, http.StatusOK, nil)
	var list consoleEventList
	e.json("admin", "GET", "/v1/console/events?limit=200", "", nil, http.StatusOK, &list)
	if len(list.Events) != 62 {
		t.Fatalf("got %d events; want 62 (the refused one recorded nothing)", len(list.Events))
	}
}
