package claims_test

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/eventstore"
	"phonefleet/internal/claims"
	"phonefleet/testutil"
)

// item is what a toy claim carries: the item's note.
type item struct{ note string }

// toyEnv is a database with a toy read model, toy_items (key, attempts
// applied, due time, pending), whose items a reaction named "toy" claims.
type toyEnv struct {
	pool  *pgxpool.Pool
	store *eventstore.Store
	now   time.Time
}

func newToyEnv(t *testing.T, n int) *toyEnv {
	t.Helper()
	pool := testutil.FreshPool(t)
	e := &toyEnv{pool: pool, store: eventstore.New(pool), now: time.Now().UTC().Truncate(time.Second)}
	if _, err := pool.Exec(testutil.Context(t), `CREATE TABLE toy_items (
		key      text PRIMARY KEY,
		attempts integer NOT NULL DEFAULT 0,
		due_at   timestamptz NOT NULL,
		pending  boolean NOT NULL DEFAULT true,
		note     text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(testutil.Context(t), `INSERT INTO toy_items (key, due_at, note)
		SELECT 'item-' || lpad(i::text, 4, '0'), $2, 'note ' || i FROM generate_series(1, $1) i`, n, e.now); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *toyEnv) claims(reaction string) *claims.Claims[item] {
	return claims.New(e.pool, claims.Source[item]{
		Reaction: reaction,
		Items:    `SELECT key, attempts FROM toy_items`,
		Due:      `SELECT key, attempts, due_at, note FROM toy_items WHERE pending`,
		Scan:     func(it *item) []any { return []any{&it.note} },
	})
}

func (e *toyEnv) lease(holder string, at time.Time) claims.Lease {
	return claims.Lease{Holder: holder, Now: at, Until: at.Add(time.Minute)}
}

func (e *toyEnv) claim(t *testing.T, c *claims.Claims[item], l claims.Lease, n int) []claims.Claimed[item] {
	t.Helper()
	got, err := c.Claim(testutil.Context(t), l, n)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// record appends the attempt's event and marks the claim recorded, in one
// unit, as a reaction's Record does; the read model is left behind.
func (e *toyEnv) record(t *testing.T, reaction, key string, attempt int) {
	t.Helper()
	u := (&eventstore.Unit{}).Append("toy-"+key, int64(attempt-1), eventstore.NewEvent{Type: "toy.attempted",
		SchemaVersion: 1, OrgID: "org_toy", Data: fmt.Appendf(nil, `{"attempt": %d}`, attempt)})
	if _, err := e.store.Commit(testutil.Context(t), claims.Recorded(u, reaction, key, attempt)); err != nil {
		t.Fatal(err)
	}
}

// apply is the read model catching up with a recorded attempt: done, or
// due again at next.
func (e *toyEnv) apply(t *testing.T, key string, attempt int, done bool, next time.Time) {
	t.Helper()
	if _, err := e.pool.Exec(testutil.Context(t), `UPDATE toy_items SET attempts = $2, pending = NOT $3, due_at = $4 WHERE key = $1`,
		key, attempt, done, next); err != nil {
		t.Fatal(err)
	}
}

// row is a claim row as the table has it.
type row struct {
	Attempt  int
	Recorded bool
	By       string
}

func (e *toyEnv) row(t *testing.T, reaction, key string) (row, bool) {
	t.Helper()
	var r row
	var by *string
	err := e.pool.QueryRow(testutil.Context(t), `SELECT attempt, recorded, claimed_by FROM claims WHERE reaction = $1 AND key = $2`,
		reaction, key).Scan(&r.Attempt, &r.Recorded, &by)
	if err != nil {
		return row{}, false
	}
	if by != nil {
		r.By = *by
	}
	return r, true
}

// TestTwoHoldersRaceForAKey: holders claiming the same due key at the same
// moment pass over each other's rows; exactly one of them takes it.
func TestTwoHoldersRaceForAKey(t *testing.T) {
	e := newToyEnv(t, 1)
	for round := range 20 {
		reaction := fmt.Sprintf("toy-%d", round)
		holders := []string{"one", "two"}
		got := make([][]claims.Claimed[item], len(holders))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, h := range holders {
			c := e.claims(reaction)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i] = e.claim(t, c, e.lease(h, e.now), 1)
			}()
		}
		close(start)
		wg.Wait()
		var winners []string
		for i, g := range got {
			for _, c := range g {
				if c.Key != "item-0001" || c.Attempt != 1 || c.Item.note != "note 1" {
					t.Fatalf("round %d: %s got %+v; want attempt 1 of item-0001 with its note", round, holders[i], c)
				}
				winners = append(winners, holders[i])
			}
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: got winners %v; want exactly one", round, winners)
		}
		if r, _ := e.row(t, reaction, "item-0001"); r != (row{Attempt: 1, By: winners[0]}) {
			t.Fatalf("round %d: got claim row %+v; want attempt 1, unrecorded, held by %s", round, r, winners[0])
		}
	}
}

// TestHoldersShareManyKeys: four holders claiming in batches until nothing
// is left take every due key exactly once between them.
func TestHoldersShareManyKeys(t *testing.T) {
	const n = 300
	e := newToyEnv(t, n)
	var mu sync.Mutex
	by := map[string][]string{}
	var wg sync.WaitGroup
	for _, h := range []string{"a", "b", "c", "d"} {
		c := e.claims("toy")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for empty := 0; empty < 2; { // an empty claim resets the cursor; a second one saw everything
				got, err := c.Claim(testutil.Context(t), e.lease(h, e.now), 7)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					empty++
				} else {
					empty = 0
				}
				mu.Lock()
				for _, cl := range got {
					by[cl.Key] = append(by[cl.Key], h)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(by) != n {
		t.Errorf("got %d keys claimed; want %d", len(by), n)
	}
	for key, hs := range by {
		if len(hs) != 1 {
			t.Errorf("%s claimed by %v; want one holder", key, hs)
			continue
		}
		if r, _ := e.row(t, "toy", key); r.By != hs[0] || r.Attempt != 1 {
			t.Errorf("%s: got claim row %+v; want attempt 1 held by %s", key, r, hs[0])
		}
	}
}

// TestExpiredLeaseLetsAnotherTakeIt: an unrecorded claim holds while its
// lease lasts; once it is over another holder claims the same attempt.
func TestExpiredLeaseLetsAnotherTakeIt(t *testing.T) {
	e := newToyEnv(t, 1)
	a, b := e.claims("toy"), e.claims("toy")
	if got := e.claim(t, a, e.lease("dead", e.now), 10); len(got) != 1 || got[0].Attempt != 1 {
		t.Fatalf("got %+v; want attempt 1", got)
	}
	if got := e.claim(t, b, e.lease("taker", e.now.Add(time.Minute-time.Second)), 10); len(got) != 0 {
		t.Fatalf("got %+v a second before the lease ends; want nothing", got)
	}
	got := e.claim(t, b, e.lease("taker", e.now.Add(time.Minute)), 10)
	if len(got) != 1 || got[0].Key != "item-0001" || got[0].Attempt != 1 {
		t.Fatalf("got %+v once the lease ended; want attempt 1 of item-0001 again", got)
	}
	if r, _ := e.row(t, "toy", "item-0001"); r != (row{Attempt: 1, By: "taker"}) {
		t.Fatalf("got claim row %+v; want attempt 1, unrecorded, held by taker", r)
	}
}

// TestRecordedAttemptWaitsForTheReadModel: a recorded attempt is not
// claimed again while the read model lags, lease or no lease; once the
// read model has applied it, the next attempt is claimed when it is due.
func TestRecordedAttemptWaitsForTheReadModel(t *testing.T) {
	e := newToyEnv(t, 1)
	c := e.claims("toy")
	if got := e.claim(t, c, e.lease("one", e.now), 10); len(got) != 1 {
		t.Fatalf("got %+v; want attempt 1", got)
	}
	e.record(t, "toy", "item-0001", 1)
	if r, _ := e.row(t, "toy", "item-0001"); r != (row{Attempt: 1, Recorded: true, By: "one"}) {
		t.Fatalf("got claim row %+v; want attempt 1 recorded", r)
	}
	if got := e.claim(t, c, e.lease("two", e.now.Add(time.Hour)), 10); len(got) != 0 {
		t.Fatalf("got %+v while the read model lags; want nothing", got)
	}
	e.apply(t, "item-0001", 1, false, e.now.Add(2*time.Hour))
	if got := e.claim(t, c, e.lease("two", e.now.Add(time.Hour)), 10); len(got) != 0 {
		t.Fatalf("got %+v before the retry is due; want nothing", got)
	}
	got := e.claim(t, c, e.lease("two", e.now.Add(2*time.Hour)), 10)
	if len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("got %+v once due; want attempt 2", got)
	}
	e.record(t, "toy", "item-0001", 2)
	e.apply(t, "item-0001", 2, true, e.now.Add(2*time.Hour))
	if got := e.claim(t, c, e.lease("two", e.now.Add(10*time.Hour)), 10); len(got) != 0 {
		t.Fatalf("got %+v of a finished item; want nothing", got)
	}
}

// TestCleanupRemovesFinishedClaims: cleanup deletes recorded attempts the
// read model has applied and lapsed claims of items gone from it, and
// keeps every claim something still depends on, and other reactions'.
func TestCleanupRemovesFinishedClaims(t *testing.T) {
	e := newToyEnv(t, 6)
	c, other := e.claims("toy"), e.claims("other")
	if got := e.claim(t, c, e.lease("one", e.now), 10); len(got) != 6 {
		t.Fatalf("got %d claims; want 6", len(got))
	}
	if got := e.claim(t, other, e.lease("one", e.now), 10); len(got) != 6 {
		t.Fatalf("got %d claims of the other reaction; want 6", len(got))
	}
	e.record(t, "toy", "item-0001", 1) // finished: recorded and applied
	e.apply(t, "item-0001", 1, true, e.now)
	e.record(t, "toy", "item-0002", 1) // recorded and applied, due again later
	e.apply(t, "item-0002", 1, false, e.now.Add(time.Hour))
	e.record(t, "toy", "item-0003", 1) // recorded, the read model lags
	// item-0004, item-0005 and item-0006: never recorded, taken over by
	// "late" (a lease to now+2m); then 0005 and 0006 leave the read model,
	// and 0005's lease is made to end by the cleanup's time.
	if got := e.claim(t, c, e.lease("late", e.now.Add(time.Minute)), 10); len(got) != 3 {
		t.Fatalf("got %d claims taken over; want the three unrecorded ones", len(got))
	}
	if _, err := e.pool.Exec(testutil.Context(t), `UPDATE claims SET leased_until = $1 WHERE reaction = 'toy' AND key = 'item-0005'`,
		e.now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(testutil.Context(t), `DELETE FROM toy_items WHERE key IN ('item-0005', 'item-0006')`); err != nil {
		t.Fatal(err)
	}
	if err := c.Cleanup(testutil.Context(t), e.now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, err := e.pool.Query(testutil.Context(t), `SELECT reaction || '/' || key FROM claims`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left = append(left, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(left)
	want := []string{"other/item-0001", "other/item-0002", "other/item-0003", "other/item-0004", "other/item-0005", "other/item-0006",
		"toy/item-0003", "toy/item-0004", "toy/item-0006"}
	if fmt.Sprint(left) != fmt.Sprint(want) {
		t.Fatalf("got claims %v after cleanup; want %v", left, want)
	}
}
