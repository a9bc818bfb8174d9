package eventstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil"
)

func ev(typ string, data string) eventstore.NewEvent {
	return eventstore.NewEvent{Type: typ, SchemaVersion: 1, OrgID: "org_test", Data: json.RawMessage(data),
		Metadata: eventstore.Metadata{ActorKind: "user", ActorID: "u1", RequestID: "req_1"}}
}

// variants runs a test against a store that writes each append on its own
// and one that groups concurrent single-event appends.
func variants(t *testing.T, test func(t *testing.T, s *eventstore.Store)) {
	for _, v := range []struct {
		name string
		opts []eventstore.Option
	}{
		{"direct", nil},
		{"group commit", []eventstore.Option{eventstore.WithGroupCommit()}},
	} {
		t.Run(v.name, func(t *testing.T) { test(t, eventstore.New(testutil.FreshPool(t), v.opts...)) })
	}
}

func TestAppendAndLoad(t *testing.T) { variants(t, testAppendAndLoad) }

func testAppendAndLoad(t *testing.T, s *eventstore.Store) {
	ctx := context.Background()

	a, err := s.Append(ctx, "device-1", eventstore.NoStream, ev("device.registered", `{"n":1}`), ev("device.renamed", `{"n":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.Version != 2 || a.LastPosition-a.FirstPosition != 1 {
		t.Fatalf("got %+v; want version 2 and two consecutive positions", a)
	}
	if _, err := s.Append(ctx, "device-1", 2, ev("device.renamed", `{"n":3}`)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, "device-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d events; want 3", len(got))
	}
	for i, e := range got {
		if e.StreamVersion != int64(i+1) {
			t.Errorf("event %d: got version %d; want %d", i, e.StreamVersion, i+1)
		}
		var body struct{ N int }
		if err := json.Unmarshal(e.Data, &body); err != nil || body.N != i+1 {
			t.Errorf("event %d: got data %s; want n=%d", i, e.Data, i+1)
		}
		m, err := e.DecodeMetadata()
		if err != nil || m.ActorID != "u1" || m.RequestID != "req_1" {
			t.Errorf("event %d: got metadata %+v (%v); want actor u1, request req_1", i, m, err)
		}
		if e.OrgID != "org_test" || e.ID.Version() != 7 {
			t.Errorf("event %d: got org %q id version %d; want org_test and a UUIDv7", i, e.OrgID, e.ID.Version())
		}
	}
	tail, err := s.Load(ctx, "device-1", 3)
	if err != nil || len(tail) != 1 || tail[0].StreamVersion != 3 {
		t.Fatalf("load from 3: got %d events (%v); want the third only", len(tail), err)
	}
}

func TestOptimisticConcurrency(t *testing.T) { variants(t, testOptimisticConcurrency) }

func testOptimisticConcurrency(t *testing.T, s *eventstore.Store) {
	ctx := context.Background()
	if _, err := s.Append(ctx, "lease-1", eventstore.NoStream, ev("lease.acquired", `{}`)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		expected int64
	}{
		{"stream exists but NoStream expected", eventstore.NoStream},
		{"expected version behind", 0},
		{"expected version ahead of the stream (would leave a gap)", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Append(ctx, "lease-1", tc.expected, ev("lease.renewed", `{}`))
			var ce *eventstore.ConflictError
			if !errors.Is(err, eventstore.ErrConflict) || !errors.As(err, &ce) || ce.StreamID != "lease-1" {
				t.Fatalf("got %v; want a *ConflictError for lease-1", err)
			}
		})
	}
	// A multi-event append that conflicts writes nothing at all.
	if _, err := s.Append(ctx, "lease-1", 0, ev("a", `{}`), ev("b", `{}`)); !errors.Is(err, eventstore.ErrConflict) {
		t.Fatalf("got %v; want conflict", err)
	}
	got, _ := s.Load(ctx, "lease-1", 1)
	if len(got) != 1 {
		t.Fatalf("got %d events after refused appends; want 1", len(got))
	}
	// Racing writers with the same expected version: exactly one wins.
	var wins, conflicts int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Append(ctx, "lease-1", 1, ev("lease.renewed", `{}`))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, eventstore.ErrConflict):
				conflicts++
			default:
				t.Errorf("unexpected error: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || conflicts != 19 {
		t.Fatalf("got %d wins, %d conflicts; want 1 and 19", wins, conflicts)
	}
}

func TestAnyVersionAppendsAtTheEnd(t *testing.T) {
	ctx := context.Background()
	s := eventstore.New(testutil.FreshPool(t))
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 25; j++ {
				for {
					_, err := s.Append(ctx, "audit", eventstore.AnyVersion, ev("x", `{}`))
					if errors.Is(err, eventstore.ErrConflict) {
						continue // a racing writer took the version: retry at the new end
					}
					if err != nil {
						errs <- err
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, _ := s.Load(ctx, "audit", 1)
	if len(got) != 200 || got[199].StreamVersion != 200 {
		t.Fatalf("got %d events; want 200 with versions 1..200", len(got))
	}
}

func TestUnitAppendsSeveralStreamsAtomically(t *testing.T) {
	ctx := context.Background()
	s := eventstore.New(testutil.FreshPool(t))
	if _, err := s.Append(ctx, "b", eventstore.NoStream, ev("x", `{}`)); err != nil {
		t.Fatal(err)
	}
	u := (&eventstore.Unit{}).
		Append("a", eventstore.NoStream, ev("x", `{}`)).
		Append("b", eventstore.NoStream, ev("x", `{}`)) // conflicts
	_, err := s.Commit(ctx, u)
	if !errors.Is(err, eventstore.ErrConflict) {
		t.Fatalf("got %v; want conflict", err)
	}
	if got, _ := s.Load(ctx, "a", 1); len(got) != 0 {
		t.Fatalf("stream a has %d events after a rolled-back command; want 0", len(got))
	}
}

func TestEventsAreImmutable(t *testing.T) {
	ctx := context.Background()
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	if _, err := s.Append(ctx, "s", eventstore.NoStream, ev("x", `{}`)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`UPDATE events SET data = '{}'`, `DELETE FROM events`, `TRUNCATE events`} {
		if _, err := pool.Exec(ctx, q); err == nil {
			t.Errorf("%s: got success; want refusal", q)
		}
	}
}

func TestReadFeedIsOrderedAndGapSafe(t *testing.T) {
	ctx := context.Background()
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	// A transaction that draws a position first but commits last.
	slow, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slow.Exec(ctx, `INSERT INTO events (event_id, stream_id, stream_version, event_type, schema_version, org_id, data, metadata, occurred_at)
		VALUES (gen_random_uuid(), 'slow', 1, 'x', 1, 'org_test', '{}', '{}', now())`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := s.Append(ctx, fmt.Sprintf("fast-%d", i), eventstore.NoStream, ev("x", `{}`)); err != nil {
			t.Fatal(err)
		}
	}
	got, cur, err := s.ReadFeed(ctx, eventstore.Cursor{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("got %d events while an older transaction is open; want 0 (reading them would let the reader pass the open one)", len(got))
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The cut is cluster-wide: a transaction open in another test package's
	// database may still hold the feed back for a moment, so wait for it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		more, next, err := s.ReadFeed(ctx, cur, 100)
		if err != nil {
			t.Fatal(err)
		}
		got, cur = append(got, more...), next
		if len(got) >= 4 || time.Now().After(deadline) {
			break
		}
	}
	if len(got) != 4 || got[0].StreamID != "slow" {
		t.Fatalf("got %d events starting with %q; want 4 starting with the slow transaction's", len(got), got[0].StreamID)
	}
	for i := 1; i < len(got); i++ {
		if !(eventstore.Cursor{TransactionID: got[i-1].TransactionID, Position: got[i-1].Position}).Before(got[i]) {
			t.Fatalf("feed out of order at %d", i)
		}
	}
	if more, _, _ := s.ReadFeed(ctx, cur, 100); len(more) != 0 {
		t.Fatalf("got %d more events past the end; want 0", len(more))
	}
}

// noteV2 is a test event whose schema moved: version 1 had "text", version 2
// splits it into "title" and "body".
type noteV2 struct {
	Title string `json:"title"`
	Body  string `json:"body"`
}

func (noteV2) EventName() string { return "note.saved" }

func TestUpcastingAnOldSchemaEvent(t *testing.T) {
	ctx := context.Background()
	reg, err := domain.NewRegistry(domain.Def[noteV2](2, map[int]domain.UpcastFunc{
		1: func(data json.RawMessage) (json.RawMessage, error) {
			var v1 struct{ Text string }
			if err := json.Unmarshal(data, &v1); err != nil {
				return nil, err
			}
			return json.Marshal(noteV2{Title: "untitled", Body: v1.Text})
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	s := eventstore.New(testutil.FreshPool(t), eventstore.WithUpcaster(reg))
	old := eventstore.NewEvent{Type: "note.saved", SchemaVersion: 1, OrgID: "o", Data: json.RawMessage(`{"text":"hello"}`), Metadata: ev("", "").Metadata}
	if _, err := s.Append(ctx, "note-1", eventstore.NoStream, old); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, "note-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].SchemaVersion != 2 {
		t.Fatalf("got schema version %d; want 2 after upcasting", got[0].SchemaVersion)
	}
	e, err := reg.Decode(got[0].Type, got[0].SchemaVersion, got[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	if n := e.(noteV2); n.Title != "untitled" || n.Body != "hello" {
		t.Fatalf("got %+v; want title untitled, body hello", n)
	}
	// The stored row is untouched.
	var stored int
	if err := s.Pool().QueryRow(ctx, `SELECT schema_version FROM events WHERE stream_id = 'note-1'`).Scan(&stored); err != nil || stored != 1 {
		t.Fatalf("stored schema version %d (%v); want 1", stored, err)
	}
}

func TestGroupCommitManyWritersKeepTheirOwnOutcomes(t *testing.T) {
	ctx := context.Background()
	s := eventstore.New(testutil.FreshPool(t), eventstore.WithGroupCommit())
	const writers, each = 64, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := fmt.Sprintf("g-%d", w)
			for v := int64(0); v < each; v++ {
				a, err := s.Append(ctx, stream, v, ev("x", `{}`))
				if err != nil {
					errs <- err
					return
				}
				if a.Version != v+1 {
					errs <- fmt.Errorf("stream %s: got version %d; want %d", stream, a.Version, v+1)
					return
				}
				// Every other writer also sends a stale append that must fail alone.
				if w%2 == 0 && v > 0 {
					if _, err := s.Append(ctx, stream, v-1, ev("x", `{}`)); !errors.Is(err, eventstore.ErrConflict) {
						errs <- fmt.Errorf("stale append on %s: got %v; want conflict", stream, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil || n != writers*each {
		t.Fatalf("got %d events (%v); want %d", n, err, writers*each)
	}
	if _, err := s.Append(ctx, "bad-json", eventstore.NoStream, eventstore.NewEvent{Type: "x", SchemaVersion: 1, Data: json.RawMessage(`{`)}); err == nil {
		t.Fatal("got success for invalid JSON data; want a refusal that fails only that append")
	}
}
