package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"phonefleet/eventstore"

	"github.com/jackc/pgx/v5/pgxpool"
)

func init() {
	addSection("appends", 10, func(ctx context.Context, b *bench, o options) error { return b.appends(ctx, o.cell) })
}

// appends measures events appended per second by the event store at 1, 16
// and 64 concurrent writers with 1, 10 and 100 events per command, each
// beside pgbench inserting the same rows (same columns, indexes, batch size
// and concurrency) into a copy of the events table.
func (b *bench) appends(ctx context.Context, d time.Duration) error {
	header("Event store appends vs pgbench (same row shape, batch and concurrency)")
	db, err := b.newDB(ctx)
	if err != nil {
		return err
	}
	if _, err := db.pool.Exec(ctx, `CREATE TABLE bench_raw (LIKE events INCLUDING ALL)`); err != nil {
		return err
	}
	store := eventstore.New(db.pool)
	grouped := eventstore.New(db.pool, eventstore.WithGroupCommit())
	line("(\"1 gc\": single-event commands through group commit; same pgbench baseline. client µs/ev: the writing")
	line(" process's own CPU, user and system, per event: the store's (this process) beside pgbench's; the server's is not in it)")
	line("%-8s %-6s %14s %14s %8s %18s  %s", "writers", "batch", "store ev/s", "pgbench ev/s", "ratio", "client µs/ev s/pg", "target ≥1.0×")
	for _, writers := range []int{1, 16, 64} {
		for _, batch := range []int{1, 10, 100} {
			// Each row's JSON is built from its row number, so the server
			// parses it per row as it does the store's parameters (a constant
			// jsonb literal would be parsed once per prepared plan).
			script := fmt.Sprintf(`INSERT INTO bench_raw (event_id, stream_id, stream_version, event_type, schema_version, org_id, data, metadata, occurred_at)
SELECT gen_random_uuid(), md5(random()::text), g, 'bench.happened', 1, 'org_bench', ('%s' || g || '}')::jsonb, ('%s' || g || '}')::jsonb, now()
FROM generate_series(1, %d) g;
`, strings.TrimSuffix(eventData, "}")+`,"n":`, strings.TrimSuffix(eventMeta, "}")+`,"n":`, batch)
			// Store first, then pgbench, then the store again; the store's
			// figure is the combined rate of its two half-runs, which bracket
			// pgbench's, so neither side gains from the order (WAL,
			// checkpoints and autovacuum all move between runs).
			// At one event per command the group-commit figure is taken the
			// same way, in two half-runs around the store's: first and
			// last, so neither it nor the store without group commit gains
			// from the order (the 1-writer check compares the two).
			var gn int64
			var gel, gcpu time.Duration
			if batch == 1 {
				if gn, gel, gcpu, err = storeAppends(ctx, grouped, writers, batch, d/2); err != nil {
					return err
				}
			}
			n, el, cpu, err := storeAppends(ctx, store, writers, batch, d/2)
			if err != nil {
				return err
			}
			db.pool.Reset() // free the store's connections for pgbench's clients
			pg, err := b.pgbench(ctx, db, script, writers, d)
			if err != nil {
				return err
			}
			base := pg.tps * float64(batch)
			pgEv := pg.cpuTx / time.Duration(batch)
			n2, el2, cpu2, err := storeAppends(ctx, store, writers, batch, d/2)
			if err != nil {
				return err
			}
			n, el, cpu = n+n2, el+el2, cpu+cpu2
			got := float64(n) / el.Seconds()
			line("%-8d %-6d %14.0f %14.0f %7.2f× %18s  %s", writers, batch, got, base, got/base, clientCPU(cpu, n, pgEv), verdict(got >= base))
			if batch == 1 {
				// The same single-event commands through group commit.
				n, el, cpu, err := storeAppends(ctx, grouped, writers, batch, d/2)
				if err != nil {
					return err
				}
				gc := float64(gn+n) / (gel + el).Seconds()
				gcCPU := clientCPU(gcpu+cpu, gn+n, pgEv)
				switch writers {
				case 1:
					// A lone writer must not pay for grouping: its commit
					// is flushed at once, as without group commit.
					line("%-8d %-6s %14.0f %14.0f %7.2f× %18s  %s target ≥1.0× the store without group commit (%.0f ev/s): %.2f×",
						writers, "1 gc", gc, base, gc/base, gcCPU, verdict(gc >= got), got, gc/got)
				case 64:
					line("%-8d %-6s %14.0f %14.0f %7.2f× %18s  %s target ≥3.0× at 64 writers", writers, "1 gc", gc, base, gc/base, gcCPU, verdict(gc >= 3*base))
				default:
					line("%-8d %-6s %14.0f %14.0f %7.2f× %18s  %s (no target)", writers, "1 gc", gc, base, gc/base, gcCPU, verdict(true))
				}
			}
		}
	}
	return nil
}

// clientCPU prints the store's client CPU per event (cpu over n events)
// beside pgbench's (pgEv), in microseconds.
func clientCPU(cpu time.Duration, n int64, pgEv time.Duration) string {
	if n == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f / %.1f", float64(cpu)/float64(n)/1e3, float64(pgEv)/1e3)
}

// storeAppends runs writers appending batch events per command for d; it
// returns the events appended, the time taken and this process's CPU time
// over it (the writers' and the pool's: nothing else runs meanwhile).
func storeAppends(ctx context.Context, store *eventstore.Store, writers, batch int, d time.Duration) (int64, time.Duration, time.Duration, error) {
	// Open the writers' connections before the clock starts, as pgbench's
	// rate leaves out its clients' connecting ("without initial connection
	// time"): the pool was emptied for pgbench, and at 64 writers opening
	// 64 connections took a large part of a half-run of single-event
	// commits. A service's pool is warm; the statements are still prepared
	// inside the measured time, as pgbench's -M prepared does.
	if err := warm(ctx, store, writers); err != nil {
		return 0, 0, 0, err
	}
	var n atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	cpu0, start := selfCPU(), time.Now()
	deadline := start.Add(d)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			evs := make([]eventstore.NewEvent, batch)
			for i := range evs {
				evs[i] = eventstore.NewEvent{Type: "bench.happened", SchemaVersion: 1, OrgID: "org_bench",
					Data: json.RawMessage(eventData), Metadata: eventstore.Metadata{ActorKind: "api_key", ActorID: "key_bench", RequestID: "req_0190a1b2c3d4e5f60718293a4b5c6d7e"}}
			}
			for time.Now().Before(deadline) {
				if _, err := store.Append(ctx, randomStream(rng), eventstore.NoStream, evs...); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				n.Add(int64(batch))
			}
		}()
	}
	wg.Wait()
	return n.Load(), time.Since(start), selfCPU() - cpu0, firstErr
}

// warm opens n connections of store's pool at once and returns them to it
// idle.
func warm(ctx context.Context, store *eventstore.Store, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := store.Pool().Acquire(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmp.Or(firstErr, err)
				return
			}
			conns = append(conns, c)
		}()
	}
	wg.Wait()
	return firstErr
}
