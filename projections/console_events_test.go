package projections_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// TestConsoleEventsRebuildsToTheSameRows records console events of two
// organisations through the telemetry aggregate's streams, reads them
// back newest first per organisation, rebuilds the read model from
// position 0 and expects the same pages.
func TestConsoleEventsRebuildsToTheSameRows(t *testing.T) {
	pool := testutil.SmallPool(t, 6)
	s := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	r, err := projections.NewRunner(s, quiet, []projections.Projection{projections.ConsoleEvents{}}, projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	people := []domain.Auth{
		{OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_ann", Role: domain.RoleAdmin},
		{OrgID: "org_b", Kind: domain.PrincipalConsole, UserID: "u_bea", Role: domain.RoleAdmin},
	}
	var last eventstore.Appended
	var idsA []string
	for i := range 6 {
		a := people[i%2]
		at := now.Add(time.Duration(i) * time.Second)
		items := []domain.ConsoleEventInput{{Type: domain.ConsolePageView, Page: fmt.Sprintf("/page/%d", i)}}
		if i == 4 {
			items[0] = domain.ConsoleEventInput{Type: domain.ConsoleClientError, Page: "/runs", Message: "boom", At: &at}
		}
		ids := []string{domain.NewID(domain.PrefixConsoleEvent)}
		w := domain.ConsoleTelemetry{}
		evs, err := w.Record(a, items, ids, "browser", at)
		if err != nil {
			t.Fatal(err)
		}
		news, err := eventstore.Encode(domain.Events, a.OrgID, evs...)
		if err != nil {
			t.Fatal(err)
		}
		last, err = s.Append(ctx, domain.ConsoleTelemetryStream(a.OrgID, domain.ActorOf(a), domain.ConsoleTelemetryWindow(at)), eventstore.AnyVersion, news...)
		if err != nil {
			t.Fatal(err)
		}
		if a.OrgID == "org_a" {
			idsA = append([]string{ids[0]}, idsA...)
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := r.WaitFor(wctx, projections.ConsoleEventsName, last); err != nil {
		t.Fatal(err)
	}
	read := func() string {
		t.Helper()
		var out string
		for _, org := range []string{"org_a", "org_b"} {
			p, err := projections.ListConsoleEvents(ctx, pool, org, projections.ConsoleEventQuery{})
			if err != nil {
				t.Fatal(err)
			}
			out += fmt.Sprintf("%s %+v\n", org, p)
		}
		return out
	}
	pageA, err := projections.ListConsoleEvents(ctx, pool, "org_a", projections.ConsoleEventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pageA.Events) != 3 || pageA.Events[0].EventID != idsA[0] || pageA.Events[2].EventID != idsA[2] {
		t.Fatalf("organisation A: got %+v; want its three events newest first %v", pageA.Events, idsA)
	}
	if e := pageA.Events[0]; e.Type != domain.ConsoleClientError || e.Message != "boom" || e.ClientAt == nil || e.By.ID != "u_ann" || e.UserAgent != "browser" {
		t.Errorf("got %+v", e)
	}
	errs, err := projections.ListConsoleEvents(ctx, pool, "org_b", projections.ConsoleEventQuery{Type: domain.ConsoleClientError})
	if err != nil || len(errs.Events) != 0 {
		t.Errorf("organisation B's client errors: got %+v %v; want none (the error was A's)", errs, err)
	}
	before := read()
	if err := r.Rebuild(wctx, projections.ConsoleEventsName, nil); err != nil {
		t.Fatal(err)
	}
	if after := read(); after != before {
		t.Fatalf("rebuild changed the console events:\nbefore %s\nafter  %s", before, after)
	}
}
