package eventstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"phonefleet/eventstore"
	"phonefleet/testutil"
)

// A unit commits its appends and statements together or not at all: a
// conflict or a failing statement leaves nothing behind, and the caller
// sees which constraint refused it.
func TestUnitCommitsAllOrNothing(t *testing.T) {
	variants(t, func(t *testing.T, s *eventstore.Store) {
		ctx := context.Background()
		pool := s.Pool()
		if _, err := pool.Exec(ctx, `CREATE TABLE side (k text PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		count := func(q string) int {
			var n int
			if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		c, err := s.Commit(ctx, (&eventstore.Unit{}).
			Exec(`INSERT INTO side VALUES ('k1')`).
			Append("s-1", eventstore.NoStream, ev("t.happened", `{}`), ev("t.happened", `{}`)).
			Append("s-2", eventstore.NoStream, ev("t.happened", `{}`)))
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Appends) != 2 || c.Appends[0].Version != 2 || c.Appends[1].Version != 1 || c.Last() != c.Appends[1] {
			t.Fatalf("got %+v; want versions 2 and 1, last the second", c.Appends)
		}
		// The statement fails: the appends before and after it do not commit.
		_, err = s.Commit(ctx, (&eventstore.Unit{}).
			Append("s-3", eventstore.NoStream, ev("t.happened", `{}`)).
			Exec(`INSERT INTO side VALUES ('k1')`).
			Append("s-4", eventstore.NoStream, ev("t.happened", `{}`)))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != "side_pkey" {
			t.Fatalf("got %v; want the side table's unique violation", err)
		}
		// A wrong expected version (missing, and taken) fails the statement too.
		for _, expected := range []int64{5, 1} {
			_, err = s.Commit(ctx, (&eventstore.Unit{}).
				Exec(`INSERT INTO side VALUES ('k2')`).
				Append("s-1", expected, ev("t.happened", `{}`)))
			if !errors.Is(err, eventstore.ErrConflict) {
				t.Fatalf("expected %d: got %v; want conflict", expected, err)
			}
		}
		if n := count(`SELECT count(*) FROM side`); n != 1 {
			t.Fatalf("got %d side rows; want 1 (failed units leave nothing)", n)
		}
		if n := count(`SELECT count(*) FROM events`); n != 3 {
			t.Fatalf("got %d events; want 3", n)
		}
		if _, err := s.Commit(ctx, &eventstore.Unit{}); err == nil {
			t.Fatal("got success for an empty unit; want a refusal")
		}
	})
}

// Events without their own metadata take the context's, and a write with
// no complete metadata anywhere is refused before anything is sent.
func TestCommitTakesMetadataFromTheContext(t *testing.T) {
	ctx := context.Background()
	s := eventstore.New(testutil.FreshPool(t))
	bare := eventstore.NewEvent{Type: "t.happened", SchemaVersion: 1, OrgID: "org_test", Data: json.RawMessage(`{}`)}
	if _, err := s.Append(ctx, "m-1", eventstore.NoStream, bare); !errors.Is(err, eventstore.ErrNoMetadata) {
		t.Fatalf("got %v; want ErrNoMetadata", err)
	}
	partial := eventstore.WithMetadata(ctx, eventstore.Metadata{ActorKind: "user", ActorID: "u1"})
	if _, err := s.Append(partial, "m-1", eventstore.NoStream, bare); !errors.Is(err, eventstore.ErrNoMetadata) {
		t.Fatalf("no request id: got %v; want ErrNoMetadata", err)
	}
	mctx := eventstore.WithMetadata(ctx, eventstore.Metadata{ActorKind: "user", ActorID: "u1", RequestID: "req_9"})
	mctx = eventstore.CausedBy(mctx, "evt_1")
	if _, err := s.Append(mctx, "m-1", eventstore.NoStream, bare); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, "m-1", 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("load: %d events, %v", len(got), err)
	}
	m, err := got[0].DecodeMetadata()
	want := eventstore.Metadata{ActorKind: "user", ActorID: "u1", RequestID: "req_9", CorrelationID: "req_9", CausationID: "evt_1"}
	if err != nil || m != want {
		t.Fatalf("got metadata %+v (%v); want %+v", m, err, want)
	}
}

// counter is a test aggregate: a number raised by one per event.
type counter struct {
	ID    string
	Org   string
	Value int
}

type raised struct {
	Org string `json:"org"`
}

type rawCodec struct{}

func (rawCodec) Encode(e raised) (string, int, json.RawMessage, error) {
	b, err := json.Marshal(e)
	return "counter.raised", 1, b, err
}

func (rawCodec) Decode(name string, version int, data json.RawMessage) (raised, error) {
	var e raised
	if name != "counter.raised" {
		return e, fmt.Errorf("unknown event %s", name)
	}
	return e, json.Unmarshal(data, &e)
}

func counterAggregate(cached bool) eventstore.Aggregate[counter, raised] {
	a := eventstore.Aggregate[counter, raised]{
		Stream: func(id string) string { return "counter-" + id },
		Codec:  rawCodec{},
		New:    func(id string) counter { return counter{ID: id} },
		Apply: func(c *counter, e raised, _ eventstore.Recorded) {
			c.Value++
			c.Org = e.Org
		},
		OrgID: func(c *counter) string { return c.Org },
	}
	if cached {
		a.Clone = func(c counter) counter { return c }
	}
	return a
}

// Update is the one load–decide–append loop: concurrent increments of one
// stream each land exactly once, deciding again after a lost race; a
// cached repository sees another repository's appends.
func TestRepositoryUpdateRetriesLostRaces(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) {
			variants(t, func(t *testing.T, s *eventstore.Store) {
				ctx := eventstore.WithMetadata(context.Background(), eventstore.Metadata{ActorKind: "system", ActorID: "test", RequestID: "req_1"})
				r1 := eventstore.NewRepository(s, counterAggregate(cached))
				r2 := eventstore.NewRepository(s, counterAggregate(cached))
				const writers, each = 8, 10
				var wg sync.WaitGroup
				errs := make(chan error, writers)
				for w := range writers {
					r := r1
					if w%2 == 1 {
						r = r2
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range each {
							if _, _, err := r.Update(ctx, "c1", func(c *counter) ([]raised, error) {
								return []raised{{Org: "org_test"}}, nil
							}); err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				for _, r := range []*eventstore.Repository[counter, raised]{r1, r2} {
					c, v, err := r.Load(ctx, "c1")
					if err != nil || c.Value != writers*each || v != writers*each {
						t.Fatalf("got value %d at version %d (%v); want %d", c.Value, v, err, writers*each)
					}
				}
				// A decision of nothing appends nothing; a refusal is returned as is.
				refused := errors.New("refused")
				if _, c, err := r1.Update(ctx, "c1", func(*counter) ([]raised, error) { return nil, nil }); err != nil || len(c.Appends) != 0 {
					t.Fatalf("empty decision: got %+v, %v", c, err)
				}
				if _, _, err := r1.Update(ctx, "c1", func(*counter) ([]raised, error) { return nil, refused }); err != refused {
					t.Fatalf("got %v; want the decision's error", err)
				}
			})
		})
	}
}

// Expect commits a unit only if a stream it read but does not append to
// is still at the version its decision saw.
func TestUnitExpectsAStreamItDoesNotAppendTo(t *testing.T) {
	variants(t, func(t *testing.T, s *eventstore.Store) {
		ctx := context.Background()
		if _, err := s.Append(ctx, "device-1", eventstore.NoStream, ev("t.happened", `{}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(ctx, (&eventstore.Unit{}).Expect("device-1", 1).Append("action-1", eventstore.NoStream, ev("t.happened", `{}`))); err != nil {
			t.Fatalf("device at the expected version: %v", err)
		}
		if _, err := s.Commit(ctx, (&eventstore.Unit{}).Expect("device-9", 0).Append("action-2", eventstore.NoStream, ev("t.happened", `{}`))); err != nil {
			t.Fatalf("absent stream expected absent: %v", err)
		}
		if _, err := s.Append(ctx, "device-1", 1, ev("t.happened", `{}`)); err != nil {
			t.Fatal(err)
		}
		_, err := s.Commit(ctx, (&eventstore.Unit{}).Append("action-3", eventstore.NoStream, ev("t.happened", `{}`)).Expect("device-1", 1))
		var conflict *eventstore.ConflictError
		if !errors.As(err, &conflict) || conflict.StreamID != "device-1" {
			t.Fatalf("device moved on: got %v; want a conflict on device-1", err)
		}
		if got, _ := s.Load(ctx, "action-3", 1); len(got) != 0 {
			t.Fatalf("got %d events on action-3; want none: the unit must not commit", len(got))
		}
	})
}
