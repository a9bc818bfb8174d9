package projections

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/eventstore"
)

// BuildStatus describes a version being built beside the live one.
type BuildStatus struct {
	Version   int
	Position  int64
	Applied   int64
	Lag       int64
	StartedAt time.Time
}

// Status is what `projections status` and /healthz report of a projection.
type Status struct {
	Name          string
	ActiveVersion int
	// State is "live", "rebuilding" (a new version is being built beside the
	// live one), "failing" (the last batch failed and is being retried) or
	// "new" (not yet created).
	State     string
	Position  int64
	Applied   int64
	Lag       int64 // events written past the checkpoint (head − position)
	LastError string
	UpdatedAt time.Time
	Building  *BuildStatus
}

// Status reads every projection's state from the database, so it answers
// for all instances and for the operator command alike.
func (r *Runner) Status(ctx context.Context) ([]Status, error) {
	head, err := r.store.Head(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(r.names))
	for _, name := range r.names {
		s := Status{Name: name, State: "new"}
		var building *int
		var started *time.Time
		err := r.pool.QueryRow(ctx, `SELECT active_version, building_version, rebuild_started_at FROM projection_registry WHERE name = $1`, name).
			Scan(&s.ActiveVersion, &building, &started)
		if errors.Is(err, pgx.ErrNoRows) {
			out = append(out, s)
			continue
		}
		if err != nil {
			return nil, err
		}
		var lastErr *string
		err = r.pool.QueryRow(ctx, `SELECT last_position, events_applied, last_error, updated_at FROM projection_checkpoints WHERE consumer_group = $1`,
			Group(name, s.ActiveVersion)).Scan(&s.Position, &s.Applied, &lastErr, &s.UpdatedAt)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		s.Lag = max(0, head-s.Position)
		s.State = "live"
		if lastErr != nil {
			s.State, s.LastError = "failing", *lastErr
		}
		if building != nil {
			b := &BuildStatus{Version: *building}
			if started != nil {
				b.StartedAt = *started
			}
			err = r.pool.QueryRow(ctx, `SELECT last_position, events_applied FROM projection_checkpoints WHERE consumer_group = $1`,
				Group(name, *building)).Scan(&b.Position, &b.Applied)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return nil, err
			}
			b.Lag = max(0, head-b.Position)
			s.Building = b
			if s.State == "live" {
				s.State = "rebuilding"
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// Rebuild rebuilds the named projection from position 0 without downtime:
// version N+1 is built in its own schema under its own consumer group while
// version N keeps answering reads and consuming; once N+1 has caught up, one
// transaction points the public views at it and records it as active; then
// version N's schema and checkpoint are dropped. Serving instances follow
// the takeover at once (NOTIFY) and consume N+1 from where it stands.
// progress, if not nil, is called about once a second.
func (r *Runner) Rebuild(ctx context.Context, name string, progress func(Status)) error {
	p, ok := r.projs[name]
	if !ok {
		return fmt.Errorf("no projection named %q (have %v)", name, r.names)
	}
	if err := r.Ensure(ctx); err != nil {
		return err
	}
	var version, old int
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT claim_xact_lock('projection:' || $1)`, name); err != nil {
			return err
		}
		var building *int
		if err := tx.QueryRow(ctx, `SELECT active_version, building_version FROM projection_registry WHERE name = $1 FOR UPDATE`, name).
			Scan(&old, &building); err != nil {
			return err
		}
		version = old + 1
		if building != nil {
			// An earlier rebuild did not finish (its process died): start over.
			if _, err := tx.Exec(ctx, `DROP SCHEMA IF EXISTS `+Schema(name, *building)+` CASCADE`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM projection_checkpoints WHERE consumer_group = $1`, Group(name, *building)); err != nil {
				return err
			}
			version = max(version, *building+1)
		}
		if err := createVersion(ctx, tx, p, version); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE projection_registry SET building_version = $2, rebuild_started_at = now(), updated_at = now() WHERE name = $1`, name, version)
		return err
	})
	if err != nil {
		return fmt.Errorf("rebuild %s: prepare: %w", name, err)
	}
	r.logger.Info("projection rebuild started", "projection", name, "version", version, "live_version", old)

	c := newConsumer(r, p, version)
	c.building = true
	caught := c.caughtUp()
	c.launch(ctx)
	defer c.stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return fmt.Errorf("rebuild %s: consumer stopped", name)
		case <-caught:
			waiting = false
		case <-tick.C:
			if progress != nil {
				if st, err := r.Status(ctx); err == nil {
					for _, s := range st {
						if s.Name == name {
							progress(s)
						}
					}
				}
			}
		}
	}

	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var building *int
		if err := tx.QueryRow(ctx, `SELECT building_version FROM projection_registry WHERE name = $1 FOR UPDATE`, name).Scan(&building); err != nil {
			return err
		}
		if building == nil || *building != version {
			return fmt.Errorf("another rebuild took over version %v", building)
		}
		if err := swapViews(ctx, tx, p, version); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE projection_registry SET active_version = $2, building_version = NULL, rebuild_started_at = NULL, updated_at = now() WHERE name = $1`, name, version); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, projectionsChannel, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("rebuild %s: takeover: %w", name, err)
	}
	c.stop()
	r.logger.Info("projection rebuild took over", "projection", name, "version", version)

	// Retire the old version. A serving instance may be mid-batch on it;
	// DROP waits for that transaction, and with its checkpoint gone the old
	// consumer reads nothing more until its runner stops it.
	if _, err := r.pool.Exec(ctx, `DELETE FROM projection_checkpoints WHERE consumer_group = $1`, Group(name, old)); err != nil {
		return fmt.Errorf("rebuild %s: retire version %d: %w", name, old, err)
	}
	if _, err := r.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+Schema(name, old)+` CASCADE`); err != nil {
		return fmt.Errorf("rebuild %s: retire version %d: %w", name, old, err)
	}
	return nil
}

// nudge wakes this runner's consumers of projection name: a consumer that
// sleeps through commits of other types than its own (see wakeBackoff)
// then reads past such a commit now for a WaitFor on it, not at its poll.
func (r *Runner) nudge(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.consumers {
		if c.p.Name() == name && c.typed != nil {
			c.typed.Wake()
		}
	}
	if r.grp != nil {
		r.grp.nudge(name)
	}
}

// WaitFor returns once the active version of projection name has applied
// the events of a (read-your-writes for a command that answers from a read
// model), or ctx ends. It polls the checkpoint with a short backoff.
func (r *Runner) WaitFor(ctx context.Context, name string, a eventstore.Appended) error {
	r.nudge(name)
	delay := 500 * time.Microsecond
	for {
		var done bool
		err := r.pool.QueryRow(ctx, `SELECT (c.last_transaction_id, c.last_position) >= ($1::text::xid8, $2)
			FROM projection_checkpoints c JOIN projection_registry g ON c.consumer_group = g.name || '@' || g.active_version
			WHERE g.name = $3`, strconv.FormatUint(a.TransactionID, 10), a.LastPosition, name).Scan(&done)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 10*time.Millisecond)
	}
}
