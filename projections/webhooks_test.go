package projections_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// TestWebhookOutboxFollowsTheSubscriptionAsOfEachEvent appends webhook
// events straight to the store, in one batch, and checks that the outbox
// judged each source event by the subscription's state at that event's
// place in the feed, and that attempts, switch-offs and deletion move the
// rows as spec 3.2 says.
func TestWebhookOutboxFollowsTheSubscriptionAsOfEachEvent(t *testing.T) {
	pool := testutil.SmallPool(t, 6)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	const org, wh = "org_p", "whk_0190a1b2c3d4e5f60718293a4b5c6d7e"
	at := time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)
	var n int
	event := func(e domain.Event) eventstore.NewEvent {
		name, v, data, err := domain.Events.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		n++
		return eventstore.NewEvent{ID: uuid.Must(uuid.NewV7()), Type: name, SchemaVersion: v, OrgID: org, Data: data, OccurredAt: at.Add(time.Duration(n) * time.Second)}
	}
	test := func() eventstore.NewEvent {
		return event(domain.WebhookTestRequested{WebhookID: wh, AgentRunID: "arun_x", RunID: "run_x"})
	}
	first, whileOff, second := test(), test(), test()
	evs := []eventstore.NewEvent{
		event(domain.WebhookSubscribed{WebhookID: wh, URL: "https://hooks.example.com", Events: []string{"run.ended"}, SealedSecret: []byte{1}, SecretHint: "abcd",
			CreatedBy: domain.WebhookCreator{Kind: domain.PrincipalConsole, UserID: "u1"}}),
		first,
		event(domain.WebhookDisabled{WebhookID: wh, Reason: domain.WebhookDisabledByUser}),
		whileOff,
		event(domain.WebhookEnabled{WebhookID: wh}),
		second,
	}
	appended, err := store.Append(testutil.Context(t), "stream-p", eventstore.NoStream, evs...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := projections.NewRunner(store, quiet, []projections.Projection{projections.Webhooks{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitWebhooks := func(a eventstore.Appended) {
		t.Helper()
		wctx, c := context.WithTimeout(testutil.Context(t), 20*time.Second)
		defer c()
		if err := r.WaitFor(wctx, projections.WebhooksName, a); err != nil {
			t.Fatal(err)
		}
	}
	waitWebhooks(appended)

	status := func(eventID uuid.UUID) string {
		var s string
		err := pool.QueryRow(testutil.Context(t), `SELECT status FROM webhook_deliveries WHERE delivery_id = $1`, domain.DeliveryID(wh, eventID)).Scan(&s)
		if err != nil {
			return "absent"
		}
		return s
	}
	for _, c := range []struct {
		name string
		id   uuid.UUID
		want string
	}{
		{"queued before the switch-off: abandoned", first.ID, domain.DeliveryFailed},
		{"while switched off: no delivery", whileOff.ID, "absent"},
		{"after switching on: pending", second.ID, domain.DeliveryPending},
	} {
		if got := status(c.id); got != c.want {
			t.Errorf("%s: got %s; want %s", c.name, got, c.want)
		}
	}

	// An attempt made before the switch-off reached the store after it:
	// the abandoned delivery stays failed; the live one moves on.
	dlv1, dlv2 := domain.DeliveryID(wh, first.ID), domain.DeliveryID(wh, second.ID)
	a1 := domain.DecideWebhookAttempt(dlv1, wh, 1, at, 500, "")
	a2 := domain.DecideWebhookAttempt(dlv2, wh, 1, at, 500, "")
	if _, err := store.Append(testutil.Context(t), domain.DeliveryStream(dlv1), eventstore.NoStream, event(a1)); err != nil {
		t.Fatal(err)
	}
	ap, err := store.Append(testutil.Context(t), domain.DeliveryStream(dlv2), eventstore.NoStream, event(a2))
	if err != nil {
		t.Fatal(err)
	}
	waitWebhooks(ap)
	var attempts int
	var next *time.Time
	pool.QueryRow(testutil.Context(t), `SELECT attempts, next_attempt_at FROM webhook_deliveries WHERE delivery_id = $1`, dlv1).Scan(&attempts, &next)
	if got := status(first.ID); got != domain.DeliveryFailed || attempts != 1 || next != nil {
		t.Errorf("abandoned delivery after a late attempt: got %s, %d attempts, next %v; want failed, 1, none", got, attempts, next)
	}
	pool.QueryRow(testutil.Context(t), `SELECT attempts, next_attempt_at FROM webhook_deliveries WHERE delivery_id = $1`, dlv2).Scan(&attempts, &next)
	if got := status(second.ID); got != domain.DeliveryPending || attempts != 1 || next == nil || !next.Equal(at.Add(30*time.Second)) {
		t.Errorf("live delivery after a failed attempt: got %s, %d attempts, next %v; want pending, 1, +30 s", got, attempts, next)
	}

	ap, err = store.Append(testutil.Context(t), "stream-p", eventstore.AnyVersion, event(domain.WebhookDeleted{WebhookID: wh}))
	if err != nil {
		t.Fatal(err)
	}
	waitWebhooks(ap)
	var subs, dels int
	pool.QueryRow(testutil.Context(t), `SELECT (SELECT count(*) FROM webhook_subscriptions), (SELECT count(*) FROM webhook_deliveries)`).Scan(&subs, &dels)
	if subs != 0 || dels != 0 {
		t.Errorf("after delete: got %d subscriptions and %d deliveries; want none", subs, dels)
	}
}
