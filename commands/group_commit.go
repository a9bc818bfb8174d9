package commands

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// maxGroup bounds how many writes share one transaction.
const maxGroup = 64

// groupFlushTimeout bounds one shared transaction; it does not depend on
// any one caller's context, since it carries the others' writes too.
const groupFlushTimeout = 15 * time.Second

// groupCommit lets concurrent callers share transactions (group commit):
// a caller that finds no flush under way becomes the leader and flushes
// every write queued by then in one transaction; writes arriving during
// that flush wait for the next one, led by the first of them. At low load
// every write is flushed alone at once; at high load many share one commit
// (one fsync, one wake-up of every read model) instead of queueing for
// their own.
type groupCommit[T, R any] struct {
	// flush writes a group in one transaction and returns one result and
	// one error per input, in order.
	flush func(ctx context.Context, in []T) ([]R, []error)

	mu      sync.Mutex
	pending []*groupCall[T, R]
	busy    bool
}

type groupCall[T, R any] struct {
	in   T
	out  R
	err  error
	wake chan bool // true: lead the next flush; false: done
}

// do queues in and returns its result once a flush wrote it.
func (g *groupCommit[T, R]) do(in T) (R, error) {
	c := &groupCall[T, R]{in: in, wake: make(chan bool, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, c)
	lead := !g.busy
	g.busy = true
	g.mu.Unlock()
	if !lead {
		if done := !<-c.wake; done {
			return c.out, c.err
		}
	}
	// Lead: flush what is queued now, which includes c.
	g.mu.Lock()
	n := min(len(g.pending), maxGroup)
	batch := g.pending[:n:n]
	g.pending = g.pending[n:]
	g.mu.Unlock()
	ins := make([]T, len(batch))
	for i, b := range batch {
		ins[i] = b.in
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupFlushTimeout)
	outs, errs := g.flush(ctx, ins)
	cancel()
	for i, b := range batch {
		b.out, b.err = outs[i], errs[i]
		if b != c {
			b.wake <- false
		}
	}
	// Hand the lead to the first write that arrived meanwhile.
	g.mu.Lock()
	if len(g.pending) > 0 {
		g.pending[0].wake <- true
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	return c.out, c.err
}

// fillErr returns n copies of err.
func fillErr(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// requestWrite is one action's request record: its idempotency row and its
// action.requested event.
type requestWrite struct {
	orgID string
	req   domain.ActionRequested
	fp    string
	news  []eventstore.NewEvent
}

// flushRequests writes request records in one round trip: one batch, run
// by the server as one implicit transaction — every idempotency row first
// (the primary key decides duplicates, within the group too), then each
// action.requested event, appended only if its action owns the key's row.
// inserted[i] is false when the key was taken. If the group fails, each
// write is retried alone, so one write's failure is not another's.
func (f *Fleet) flushRequests(ctx context.Context, ws []requestWrite) ([]bool, []error) {
	inserted := make([]bool, len(ws))
	err := func() error {
		b := &pgx.Batch{}
		for _, w := range ws {
			b.Queue(`INSERT INTO action_idempotency (org_id, idempotency_key, action_id, device_id, fingerprint, state, requested_at)
				VALUES ($1, $2, $3, $4, $5, 'requested', $6) ON CONFLICT (org_id, idempotency_key) DO NOTHING`,
				w.orgID, w.req.IdempotencyKey, w.req.ActionID, w.req.DeviceID, w.fp, w.req.RequestedAt)
		}
		qs := make([]*eventstore.QueuedAppend, len(ws))
		for i, w := range ws {
			if len(w.news) != 1 {
				return errors.New("commands: a request record is one event")
			}
			var err error
			qs[i], err = f.store.QueueAppend(b, domain.ActionStream(w.req.ActionID), eventstore.NoStream, w.news[0],
				`EXISTS (SELECT 1 FROM action_idempotency WHERE org_id = $9 AND idempotency_key = $10 AND action_id = $11)`,
				w.orgID, w.req.IdempotencyKey, w.req.ActionID)
			if err != nil {
				return err
			}
		}
		br := f.pool.SendBatch(ctx, b)
		defer br.Close()
		for i := range ws {
			tag, err := br.Exec()
			if err != nil {
				return err
			}
			inserted[i] = tag.RowsAffected() == 1
		}
		for i := range ws {
			_, appended, err := qs[i].Read(br)
			if err != nil {
				return err
			}
			if appended != inserted[i] {
				return errors.New("commands: request record out of step with its idempotency row")
			}
		}
		return br.Close()
	}()
	if err == nil {
		f.store.Committed()
		return inserted, make([]error, len(ws))
	}
	if len(ws) == 1 {
		return []bool{false}, []error{err}
	}
	errs := make([]error, len(ws))
	for i := range ws {
		ok, e := f.flushRequests(ctx, ws[i:i+1])
		inserted[i], errs[i] = ok[0], e[0]
	}
	return inserted, errs
}

// outcomeWrite is one action's outcome record: its event, the frames it
// captured, the device's saved state and the closing of its idempotency
// row.
type outcomeWrite struct {
	orgID    string
	key      string
	actionID string
	version  int64
	state    string
	news     []eventstore.NewEvent
	rows     []frameRow
	device   *domain.Device
	devState []byte
	finished time.Time
}

// flushOutcomes writes outcome records in one round trip (one batch, one
// implicit transaction); a group that fails (a review landed on one
// action's stream meanwhile) is retried one write at a time, so only that
// write sees its conflict.
func (f *Fleet) flushOutcomes(ctx context.Context, ws []outcomeWrite) ([]eventstore.Appended, []error) {
	as := make([]eventstore.Appended, len(ws))
	err := func() error {
		b := &pgx.Batch{}
		qs := make([]*eventstore.QueuedAppend, len(ws))
		extra := make([]int, len(ws)) // statements queued after each append
		for i, w := range ws {
			if len(w.news) != 1 {
				return errors.New("commands: an outcome record is one event")
			}
			var err error
			if qs[i], err = f.store.QueueAppend(b, domain.ActionStream(w.actionID), w.version, w.news[0], ""); err != nil {
				return err
			}
			n := b.Len()
			for _, r := range w.rows {
				f.frames.queue(b, r)
			}
			if w.devState != nil {
				d := w.device
				b.Queue(`INSERT INTO device_states (device_id, org_id, backend, model, state, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
					ON CONFLICT (device_id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at`,
					d.ID, d.OrgID, d.Backend, d.Model, w.devState, w.finished)
			}
			b.Queue(`UPDATE action_idempotency SET state = $3, finished_at = $4 WHERE org_id = $1 AND idempotency_key = $2`,
				w.orgID, w.key, w.state, w.finished)
			extra[i] = b.Len() - n
		}
		br := f.pool.SendBatch(ctx, b)
		defer br.Close()
		for i := range ws {
			var err error
			if as[i], _, err = qs[i].Read(br); err != nil {
				return err
			}
			for range extra[i] {
				if _, err := br.Exec(); err != nil {
					return err
				}
			}
		}
		return br.Close()
	}()
	if err == nil {
		f.store.Committed()
		return as, make([]error, len(ws))
	}
	if len(ws) == 1 {
		return as, []error{err}
	}
	errs := make([]error, len(ws))
	for i := range ws {
		a, e := f.flushOutcomes(ctx, ws[i:i+1])
		as[i], errs[i] = a[0], e[0]
	}
	return as, errs
}
