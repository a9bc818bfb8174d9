package console_test

import (
	"slices"
	"testing"
	"time"

	"phonefleet/commands/console"
	"phonefleet/domain"
	"phonefleet/projections"
	"phonefleet/testutil"
)

func pageViews(pages ...string) []domain.ConsoleEventInput {
	out := make([]domain.ConsoleEventInput, len(pages))
	for i, p := range pages {
		out[i] = domain.ConsoleEventInput{Type: domain.ConsolePageView, Page: p}
	}
	return out
}

func TestConsoleEventsRecordedAndReadByAdmins(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testutil.Context(t)
	member := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_max", Role: domain.RoleMember, Scopes: domain.AllScopes}
	rec := e.app.Console.RecordConsoleEvents

	first, err := rec.Handle(ctx, console.RecordConsoleEvents{Auth: member, Events: pageViews("/fleet", "/devices/:id"), UserAgent: "test-browser/1"})
	if err != nil || len(first.EventIDs) != 2 {
		t.Fatalf("got %+v %v; want two ids", first, err)
	}
	at := e.clock.Now().Add(-time.Second)
	second, err := rec.Handle(ctx, console.RecordConsoleEvents{Auth: member, Events: []domain.ConsoleEventInput{
		{Type: domain.ConsoleClientError, Page: "/runs", Message: "TypeError: boom", At: &at}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rec.Handle(ctx, console.RecordConsoleEvents{Auth: cliBea, Events: pageViews("/keys")}); err != nil {
		t.Fatal(err)
	}

	list := func(a domain.Auth, q projections.ConsoleEventQuery) (projections.ConsoleEventPage, error) {
		return e.app.Console.ListConsoleEvents.Handle(ctx, console.ListConsoleEvents{Auth: a, ConsoleEventQuery: q})
	}
	// Read-your-writes: recorded events are readable when Record returns.
	page, err := list(cliAnn, projections.ConsoleEventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range page.Events {
		ids = append(ids, v.EventID)
	}
	if want := []string{second.EventIDs[0], first.EventIDs[1], first.EventIDs[0]}; !slices.Equal(ids, want) {
		t.Fatalf("got %v; want organisation A's three events, newest first %v", ids, want)
	}
	got := page.Events[0]
	if got.Type != domain.ConsoleClientError || got.Message != "TypeError: boom" || got.By.ID != "u_max" || got.ClientAt == nil || !got.ClientAt.Equal(at) {
		t.Errorf("got %+v", got)
	}
	if page.Events[2].UserAgent != "test-browser/1" || page.Events[2].Page != "/fleet" {
		t.Errorf("got %+v", page.Events[2])
	}

	// Paging and the type filter.
	p1, err := list(cliAnn, projections.ConsoleEventQuery{Limit: 2})
	if err != nil || len(p1.Events) != 2 || p1.NextBefore != first.EventIDs[1] {
		t.Fatalf("first page of 2: got %+v %v", p1, err)
	}
	p2, err := list(cliAnn, projections.ConsoleEventQuery{Limit: 2, Before: p1.NextBefore})
	if err != nil || len(p2.Events) != 1 || p2.Events[0].EventID != first.EventIDs[0] || p2.NextBefore != "" {
		t.Fatalf("second page: got %+v %v", p2, err)
	}
	views, err := list(cliAnn, projections.ConsoleEventQuery{Type: domain.ConsolePageView})
	if err != nil || len(views.Events) != 2 {
		t.Fatalf("page views only: got %+v %v", views, err)
	}

	// Organisation B sees its own only.
	theirs, err := list(cliBea, projections.ConsoleEventQuery{})
	if err != nil || len(theirs.Events) != 1 || theirs.Events[0].Page != "/keys" {
		t.Fatalf("organisation B: got %+v %v; want its one event", theirs, err)
	}

	for name, tt := range map[string]struct {
		a    domain.Auth
		q    projections.ConsoleEventQuery
		code domain.Code
	}{
		"a member":        {member, projections.ConsoleEventQuery{}, domain.CodePermissionDenied},
		"an API key":      {domain.Auth{OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Role: domain.RoleAdmin, Scopes: domain.AllScopes}, projections.ConsoleEventQuery{}, domain.CodePermissionDenied},
		"an unknown type": {cliAnn, projections.ConsoleEventQuery{Type: "click"}, domain.CodeInvalidArgument},
		"a bad cursor":    {cliAnn, projections.ConsoleEventQuery{Before: "yesterday"}, domain.CodeInvalidArgument},
	} {
		if _, err := list(tt.a, tt.q); domain.ErrorCode(err) != tt.code {
			t.Errorf("%s: got %v; want %s", name, err, tt.code)
		}
	}
}

func TestConsoleEventsBudgetPerPersonAndMinute(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testutil.Context(t)
	e.clock.Set(time.Date(2026, 3, 1, 12, 0, 50, 0, time.UTC))
	rec := e.app.Console.RecordConsoleEvents
	twenty := pageViews(slices.Repeat([]string{"/fleet"}, 20)...)
	for i := range 3 {
		if _, err := rec.Handle(ctx, console.RecordConsoleEvents{Auth: cliAnn, Events: twenty}); err != nil {
			t.Fatalf("batch %d of 20: %v", i+1, err)
		}
	}
	_, err := rec.Handle(ctx, console.RecordConsoleEvents{Auth: cliAnn, Events: pageViews("/fleet")})
	if domain.ErrorCode(err) != domain.CodeRateLimited || domain.AsError(err).Extra["retryAfterMs"] != int64(10_000) {
		t.Fatalf("the 61st event of the minute: got %v; want rate_limited with retryAfterMs 10000", err)
	}
	// Another person's budget is their own.
	other := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_max", Role: domain.RoleMember, Scopes: domain.AllScopes}
	if _, err := rec.Handle(ctx, console.RecordConsoleEvents{Auth: other, Events: pageViews("/fleet")}); err != nil {
		t.Fatalf("another person: %v", err)
	}
	// The next minute starts afresh.
	e.clock.Advance(10 * time.Second)
	if _, err := rec.Handle(ctx, console.RecordConsoleEvents{Auth: cliAnn, Events: twenty}); err != nil {
		t.Fatalf("next minute: %v", err)
	}
	page, err := e.app.Console.ListConsoleEvents.Handle(ctx, console.ListConsoleEvents{Auth: cliAnn,
		ConsoleEventQuery: projections.ConsoleEventQuery{Limit: 200}})
	if err != nil || len(page.Events) != 60+1+20 {
		t.Fatalf("got %d events, %v; want 81 (the refused batch recorded nothing)", len(page.Events), err)
	}
}
