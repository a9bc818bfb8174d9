package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"phonefleet/eventstore"
	"phonefleet/projections"
)

func init() {
	addSection("read", 20, func(ctx context.Context, b *bench, o options) error { return b.catchUp(ctx, o.events) })
	addSection("projection", 30, func(ctx context.Context, b *bench, o options) error { return b.projection(ctx, o.events) })
	addSection("lag", 40, func(ctx context.Context, b *bench, _ options) error { return b.liveLag(ctx, 10*time.Second) })
}

// loadEvents writes n events (1,000 streams) with server-side SQL in chunks.
func loadEvents(ctx context.Context, db *database, n int) error {
	const chunk = 100_000
	for done := 0; done < n; done += chunk {
		k := min(chunk, n-done)
		_, err := db.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO events (event_id, stream_id, stream_version, event_type, schema_version, org_id, data, metadata, occurred_at)
			SELECT gen_random_uuid(), 'load-' || (g %% 1000), %d / 1000 + g / 1000 + 1, 'bench.happened', 1, 'org_bench', '%s'::jsonb, '%s'::jsonb, now()
			FROM generate_series(0, %d) g`, done, eventData, eventMeta, k-1))
		if err != nil {
			return fmt.Errorf("load events: %w", err)
		}
	}
	_, err := db.pool.Exec(ctx, `VACUUM ANALYZE events`)
	return err
}

var feedDB *database

func (b *bench) loadedDB(ctx context.Context, n int) (*database, error) {
	if feedDB != nil {
		return feedDB, nil
	}
	db, err := b.newDB(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := loadEvents(ctx, db, n); err != nil {
		return nil, err
	}
	line("(loaded %d events in %s)", n, time.Since(start).Round(time.Millisecond))
	b.share(db)
	feedDB = db
	return db, nil
}

// catchUp measures reading the whole feed from position 0 through the
// store's gap-safe reader, beside COPY of the same rows in the same order.
func (b *bench) catchUp(ctx context.Context, n int) error {
	header(fmt.Sprintf("Catch-up read of %d events (gap-safe feed reader vs COPY of the same rows)", n))
	db, err := b.loadedDB(ctx, n)
	if err != nil {
		return err
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	tag, err := conn.Conn().PgConn().CopyTo(ctx, io.Discard, `COPY (SELECT position, transaction_id, event_id, stream_id, stream_version, event_type, schema_version, org_id, data, metadata, occurred_at FROM events ORDER BY transaction_id, position) TO STDOUT (FORMAT binary)`)
	conn.Release()
	if err != nil {
		return err
	}
	copyTime := time.Since(start)
	store := eventstore.New(db.pool)
	var cur eventstore.Cursor
	var read int64
	start = time.Now()
	for {
		evs, next, err := store.ReadFeed(ctx, cur, 10_000)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		read += int64(len(evs))
		cur = next
	}
	readTime := time.Since(start)
	r := float64(read) / readTime.Seconds()
	line("feed reader: %d events in %s = %s   baseline COPY: %d rows in %s = %s   target ≥500k/s: %s",
		read, readTime.Round(time.Millisecond), rate(read, readTime), tag.RowsAffected(), copyTime.Round(time.Millisecond),
		rate(tag.RowsAffected(), copyTime), verdict(r >= 500_000))
	return nil
}

// projection measures the audit projection consuming the whole backlog
// (first build), then a rebuild of it, beside the server writing the same
// rows itself: CREATE TABLE … AS SELECT (which PostgreSQL runs with
// parallel workers and a bulk-insert buffer) and a plain INSERT … SELECT
// into a table of the same columns without keys (one backend, as a
// projection's batch runs). The goal is ≥ 0.5× the baseline.
func (b *bench) projection(ctx context.Context, n int) error {
	header(fmt.Sprintf("Projection apply and rebuild of %d events (audit_feed; baselines CREATE TABLE AS and INSERT…SELECT of the same rows)", n))
	db, err := b.loadedDB(ctx, n)
	if err != nil {
		return err
	}
	const rows = `SELECT position, transaction_id::text::bigint AS transaction_id, event_id, stream_id, stream_version, event_type, schema_version, org_id, metadata, occurred_at FROM events ORDER BY transaction_id, position`
	timed := func(sql string) (time.Duration, error) {
		start := time.Now()
		tag, err := db.pool.Exec(ctx, sql)
		if err == nil && tag.RowsAffected() != int64(n) {
			err = fmt.Errorf("%s: %d rows, want %d", sql, tag.RowsAffected(), n)
		}
		return time.Since(start), err
	}
	// The baselines are measured twice, before the apply and after the
	// rebuild, and judged by their combined rate, so that neither side
	// gains from the moment it ran at (the server's rate for the same
	// statement moves by half between minutes on a shared machine).
	var ctasTime, insTime time.Duration
	baselines := func(when string) error {
		c, err := timed(`CREATE TABLE bench_copy AS ` + rows)
		if err != nil {
			return err
		}
		if _, err := db.pool.Exec(ctx, `CREATE TABLE bench_insert (LIKE bench_copy)`); err != nil {
			return err
		}
		i, err := timed(`INSERT INTO bench_insert ` + rows)
		if err != nil {
			return err
		}
		// Left in place, the copies would be vacuumed and analysed by
		// autovacuum while the projection is measured.
		if _, err := db.pool.Exec(ctx, `DROP TABLE bench_copy, bench_insert`); err != nil {
			return err
		}
		line("baseline %s: CREATE TABLE AS %s (%s)   INSERT…SELECT %s (%s)", when, rate(int64(n), c), c.Round(time.Millisecond), rate(int64(n), i), i.Round(time.Millisecond))
		ctasTime, insTime = ctasTime+c, insTime+i
		return nil
	}
	if err := baselines("before the apply"); err != nil {
		return err
	}

	store := eventstore.New(db.pool)
	runner, err := projections.NewRunner(store, quiet, []projections.Projection{projections.Audit{}})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() { runner.Run(rctx); close(done) }()
	total := int64(n)
	for {
		st, err := runner.Status(ctx)
		if err != nil {
			cancel()
			return err
		}
		if st[0].Applied >= total {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	applyTime := time.Since(start)

	start = time.Now()
	if err := runner.Rebuild(ctx, projections.AuditName, nil); err != nil {
		cancel()
		return err
	}
	rebuildTime := time.Since(start)
	cancel()
	<-done
	if err := baselines("after the rebuild"); err != nil {
		return err
	}
	ctasRate, insRate := float64(2*n)/ctasTime.Seconds(), float64(2*n)/insTime.Seconds()
	line("baselines: CREATE TABLE AS %s (%d rows in %s)   INSERT…SELECT %s (%d rows in %s)", rate(int64(2*n), ctasTime), 2*n,
		ctasTime.Round(time.Millisecond), rate(int64(2*n), insTime), 2*n, insTime.Round(time.Millisecond))
	judge := func(d time.Duration) string {
		r := float64(total) / d.Seconds()
		return fmt.Sprintf("%s   %.2f× CREATE TABLE AS, %.2f× INSERT…SELECT   target ≥0.5× INSERT…SELECT: %s",
			rate(total, d), r/ctasRate, r/insRate, verdict(r >= insRate/2))
	}
	line("apply (live consumer from 0): %d events in %s = %s", total, applyTime.Round(time.Millisecond), judge(applyTime))
	line("rebuild (beside the live one, then takeover): %d events in %s = %s", total, rebuildTime.Round(time.Millisecond), judge(rebuildTime))
	return nil
}

// liveLag measures, under a steady append load, the time from an append's
// commit to its row being visible in the projection.
func (b *bench) liveLag(ctx context.Context, d time.Duration) error {
	const perSecond = 2000
	header(fmt.Sprintf("Live projection lag under a steady %d events/s for %s", perSecond, d))
	db, err := b.newDB(ctx)
	if err != nil {
		return err
	}
	store := eventstore.New(db.pool)
	runner, err := projections.NewRunner(store, quiet, []projections.Projection{projections.Audit{}})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go runner.Run(rctx)
	time.Sleep(200 * time.Millisecond)

	var mu sync.Mutex
	committed := map[int64]time.Time{}
	var lags []time.Duration
	stop := make(chan struct{})
	watcherDone := make(chan struct{})
	go func() { // the reader: polls for newly visible rows every millisecond
		defer close(watcherDone)
		var seq int64
		for {
			rows, err := db.pool.Query(ctx, `SELECT applied_seq, position FROM audit_feed WHERE applied_seq > $1 ORDER BY applied_seq`, seq)
			if err == nil {
				now := time.Now()
				for rows.Next() {
					var pos int64
					rows.Scan(&seq, &pos)
					mu.Lock()
					if t, ok := committed[pos]; ok {
						lags = append(lags, now.Sub(t))
						delete(committed, pos)
					} else {
						committed[pos] = time.Time{} // seen before its writer recorded it: lag ~0
					}
					mu.Unlock()
				}
				rows.Close()
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	const writers = 4
	interval := time.Second * writers / perSecond
	deadline := time.Now().Add(d)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for time.Now().Before(deadline) {
				<-tick.C
				a, err := store.Append(ctx, randomStream(rng), eventstore.NoStream, eventstore.NewEvent{Type: "bench.happened", SchemaVersion: 1,
					OrgID: "org_bench", Data: json.RawMessage(eventData)})
				if err != nil {
					continue
				}
				now := time.Now()
				mu.Lock()
				if t, ok := committed[a.LastPosition]; ok && t.IsZero() {
					lags = append(lags, 0)
					delete(committed, a.LastPosition)
				} else {
					committed[a.LastPosition] = now
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond)
	close(stop)
	<-watcherDone
	mu.Lock()
	defer mu.Unlock()
	p50, p99 := percentile(lags, 0.50), percentile(lags, 0.99)
	line("%d events: lag p50 %s, p99 %s, max %s (reader polls every 1 ms)   target p99 ≤100ms: %s",
		len(lags), p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), percentile(lags, 1).Round(time.Millisecond), verdict(p99 <= 100*time.Millisecond))
	return nil
}
