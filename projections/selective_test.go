package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// keepOnly records the events it is given; it reads only keep.* events.
type keepOnly struct{}

func (keepOnly) Name() string         { return "keep_only" }
func (keepOnly) Tables() []string     { return []string{"keep_only"} }
func (keepOnly) EventTypes() []string { return []string{"keep.%"} }
func (keepOnly) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.keep_only (position bigint PRIMARY KEY, event_type text NOT NULL)`)
	return err
}
func (keepOnly) Apply(ctx context.Context, tx pgx.Tx, schema string, evs []eventstore.Event) error {
	for _, e := range evs {
		if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.keep_only VALUES ($1, $2)`, e.Position, e.Type); err != nil {
			return err
		}
	}
	return nil
}

func TestSelectiveProjectionGetsOnlyItsTypesAndPassesTheRest(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	for i := 0; i < 300; i++ {
		typ := "skip.this"
		if i%3 == 0 {
			typ = "keep.this"
		}
		if _, err := s.Append(testutil.Context(t), fmt.Sprintf("sel-%d", i), eventstore.NoStream,
			eventstore.NewEvent{Type: typ, SchemaVersion: 1, OrgID: "o", Data: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	last, err := s.Append(testutil.Context(t), "sel-last", eventstore.NoStream,
		eventstore.NewEvent{Type: "skip.last", SchemaVersion: 1, OrgID: "o", Data: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := projections.NewRunner(s, quiet, []projections.Projection{keepOnly{}}, projections.WithBatchSize(50))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if err := r.WaitFor(testutil.Context(t), "keep_only", last); err != nil {
		t.Fatal(err)
	}
	var kept, other int
	if err := pool.QueryRow(testutil.Context(t), `SELECT count(*) FILTER (WHERE event_type = 'keep.this'), count(*) FILTER (WHERE event_type <> 'keep.this') FROM keep_only`).Scan(&kept, &other); err != nil {
		t.Fatal(err)
	}
	st, err := r.Status(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if kept != 100 || other != 0 || st[0].Applied != 301 || st[0].Lag != 0 {
		t.Fatalf("got %d kept, %d others, %d consumed, lag %d; want 100, 0, 301 (the checkpoint passes skipped events), 0",
			kept, other, st[0].Applied, st[0].Lag)
	}
}
