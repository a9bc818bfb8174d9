package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Codec encodes a stream's domain events for the store and decodes them
// back (domain.Events implements it for domain.Event).
type Codec[E any] interface {
	Encode(e E) (name string, version int, data json.RawMessage, err error)
	Decode(name string, version int, data json.RawMessage) (E, error)
}

// Recorded is where a folded event stands: its stream version and its
// organisation.
type Recorded struct {
	Version int64
	OrgID   string
}

// Aggregate tells a Repository how one kind of stream folds into state.
type Aggregate[T, E any] struct {
	// Stream names the stream of an aggregate id.
	Stream func(id string) string
	// Codec encodes and decodes the stream's events.
	Codec Codec[E]
	// New returns the state of an id whose stream is empty.
	New func(id string) T
	// Apply folds one event into the state; it is the only place state
	// changes.
	Apply func(s *T, e E, at Recorded)
	// OrgID names the organisation the stream belongs to, read from the
	// state after the events being appended were applied.
	OrgID func(s *T) string
	// Clone copies a state. When set, the repository keeps each stream's
	// state in memory and catches up from the store on every load (one
	// indexed read of the events after the cached version), so a load is
	// cheap however long the stream and still sees other instances'
	// appends. Keep nil for streams loaded rarely.
	Clone func(T) T
	// Keep, with Clone, says whether a state is worth remembering (a
	// device that exists; not an id a client made up). Nil keeps all.
	Keep func(s *T) bool
}

// Repository loads, decides and appends one kind of stream: the one
// load–decide–append loop of the service. Every command that changes a
// stream's state goes through Update or UpdateWith.
type Repository[T, E any] struct {
	store *Store
	agg   Aggregate[T, E]
	// Now stamps appended events (nil: the store's clock).
	Now func() time.Time

	mu      sync.Mutex
	entries map[string]*entry[T]
}

type entry[T any] struct {
	mu      sync.Mutex
	state   T
	version int64
}

// NewRepository returns the repository of agg's streams in store.
func NewRepository[T, E any](store *Store, agg Aggregate[T, E]) *Repository[T, E] {
	return &Repository[T, E]{store: store, agg: agg, entries: map[string]*entry[T]{}}
}

// Store returns the event store the repository writes to.
func (r *Repository[T, E]) Store() *Store { return r.store }

// Load returns id's current state and the stream version it was folded to
// (0: the stream is empty and the state is New(id)).
func (r *Repository[T, E]) Load(ctx context.Context, id string) (T, int64, error) {
	return r.LoadChecked(ctx, id, Check{})
}

// LoadChecked is Load with check run in the same round trip as the read
// (Store.LoadChecked): a command that must both read a stream afresh and
// ask the database something else right before it acts (the action
// executor: the device's lease, and its host's claim) pays one round trip
// for both. A failing check fails the load with its error.
func (r *Repository[T, E]) LoadChecked(ctx context.Context, id string, check Check) (T, int64, error) {
	if r.agg.Clone == nil {
		s := r.agg.New(id)
		v, err := r.fold(ctx, id, &s, 0, check)
		return s, v, err
	}
	r.mu.Lock()
	e, ok := r.entries[id]
	if !ok {
		e = &entry[T]{state: r.agg.New(id)}
		r.entries[id] = e
	}
	r.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	v, err := r.fold(ctx, id, &e.state, e.version, check)
	if err != nil {
		// The cached state may be half caught up: start it afresh.
		e.state, e.version = r.agg.New(id), 0
		var zero T
		return zero, 0, err
	}
	e.version = v
	if r.agg.Keep != nil && !r.agg.Keep(&e.state) {
		r.mu.Lock()
		delete(r.entries, id)
		r.mu.Unlock()
	}
	return r.agg.Clone(e.state), v, nil
}

// Cached returns id's state as this process last saw it, without asking
// the store, and ok false when it has none cached. The state may be
// behind other writers: a decision made on it commits only with
// Unit.Expect(stream, version), which refuses it if the stream moved on.
func (r *Repository[T, E]) Cached(id string) (s T, version int64, ok bool) {
	if r.agg.Clone == nil {
		return s, 0, false
	}
	r.mu.Lock()
	e, found := r.entries[id]
	r.mu.Unlock()
	if !found {
		return s, 0, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.version == 0 {
		return s, 0, false
	}
	return r.agg.Clone(e.state), e.version, true
}

// Advance applies to id's cached state the events a command committed to
// id's stream at version in a unit of its own (a run's step, recorded with
// its action), so that Cached shows them without a read. It does nothing
// unless the cached state stands at version: a state that moved on, or
// none cached, is left to the next load.
func (r *Repository[T, E]) Advance(id string, version int64, evs ...E) {
	if r.agg.Clone == nil || version == 0 {
		return
	}
	r.mu.Lock()
	e, found := r.entries[id]
	r.mu.Unlock()
	if !found {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.version != version {
		return
	}
	org := r.agg.OrgID(&e.state)
	for i, ev := range evs {
		r.agg.Apply(&e.state, ev, Recorded{Version: version + int64(i) + 1, OrgID: org})
	}
	e.version += int64(len(evs))
}

// Stream names id's stream.
func (r *Repository[T, E]) Stream(id string) string { return r.agg.Stream(id) }

// fold applies the events of id's stream after version from to s and
// returns the version reached.
func (r *Repository[T, E]) fold(ctx context.Context, id string, s *T, from int64, check Check) (int64, error) {
	evs, err := r.store.LoadChecked(ctx, r.agg.Stream(id), from+1, check)
	if err != nil {
		return from, err
	}
	for _, ev := range evs {
		de, err := r.agg.Codec.Decode(ev.Type, ev.SchemaVersion, ev.Data)
		if err != nil {
			return from, fmt.Errorf("%s: %w", r.agg.Stream(id), err)
		}
		r.agg.Apply(s, de, Recorded{Version: ev.StreamVersion, OrgID: ev.OrgID})
		from = ev.StreamVersion
	}
	return from, nil
}

// The service's one retry policy for decisions that lost an
// optimistic-concurrency race (Retry): a decision is made again on the new
// state, after a short jittered pause from the second loss on, at most
// conflictAttempts times in all. The bound only stops a pathological
// storm; a command that exhausts it fails with the *ConflictError.
const (
	conflictAttempts = 50
	conflictPause    = 2 * time.Millisecond
)

// Retry runs attempt (n counts from 1) until it returns anything but an
// optimistic-concurrency conflict (errors.Is(err, ErrConflict)), under the
// one retry policy: every decision that loses a race is made again on the
// state that won, whether one repository makes it (Update) or a command
// that spans streams and processes (a run's step, a payment provider's
// event). An attempt that must not be made again returns another error.
// ctx ending stops the retries with its error.
func Retry[R any](ctx context.Context, attempt func(n int) (R, error)) (R, error) {
	for n := 1; ; n++ {
		r, err := attempt(n)
		if !errors.Is(err, ErrConflict) || n >= conflictAttempts {
			return r, err
		}
		if n > 1 {
			select {
			case <-ctx.Done():
				return r, ctx.Err()
			case <-time.After(time.Duration(rand.Int64N(int64(n)*int64(conflictPause))) + 1):
			}
		}
	}
}

// ErrStale is what a decision made on a cached state returns when that
// state may have misled it — it refused, or its commit lost a race (the
// stream moved on): DecideCached decides again on the state loaded afresh.
var ErrStale = errors.New("eventstore: decided on a state that may be stale")

// DecideCached runs decide on id's state as this process last saw it
// (cached is true) and, when that decision answers ErrStale, once more on
// the state loaded afresh, whose outcome is final: for a command that
// reads nothing before it records and decides again only when the cheap
// guess was wrong (an action checked against its device). Without a
// cached state it decides once, afresh. decide commits its own unit
// (expecting id's stream at version, Unit.Expect, so a state that moved on
// fails it with a conflict).
func (r *Repository[T, E]) DecideCached(ctx context.Context, id string, decide func(s T, version int64, cached bool) error) error {
	if s, version, ok := r.Cached(id); ok {
		if err := decide(s, version, true); !errors.Is(err, ErrStale) {
			return err
		}
	}
	s, version, err := r.Load(ctx, id)
	if err != nil {
		return err
	}
	return decide(s, version, false)
}

// Update loads id, lets decide return the events its state calls for, and
// appends them at the version decide saw; after a lost race it runs again
// on the new state. It returns the state with the events applied and what
// was committed (zero when decide returned no event). decide may change
// the state it is given only through the events it returns.
func (r *Repository[T, E]) Update(ctx context.Context, id string, decide func(s *T) ([]E, error)) (T, Committed, error) {
	return r.UpdateWith(ctx, id, func(s *T, _ *Unit) ([]E, error) { return decide(s) })
}

// UpdateWith is Update for a decision that also writes other statements in
// the same unit (they commit with the events, or not at all). The unit is
// new on every attempt.
func (r *Repository[T, E]) UpdateWith(ctx context.Context, id string, decide func(s *T, u *Unit) ([]E, error)) (T, Committed, error) {
	return r.update(ctx, id, nil, 0, decide)
}

// UpdateFrom is UpdateWith for a caller that already holds id's state at
// version (the action executor, which recorded the stream's first event
// itself): the first decision is made on it without a load.
func (r *Repository[T, E]) UpdateFrom(ctx context.Context, id string, s T, version int64, decide func(s *T, u *Unit) ([]E, error)) (T, Committed, error) {
	return r.update(ctx, id, &s, version, decide)
}

func (r *Repository[T, E]) update(ctx context.Context, id string, known *T, knownVersion int64, decide func(s *T, u *Unit) ([]E, error)) (T, Committed, error) {
	var s T
	c, err := Retry(ctx, func(attempt int) (Committed, error) {
		var version int64
		var err error
		if attempt == 1 && known != nil {
			s, version = *known, knownVersion
		} else if s, version, err = r.Load(ctx, id); err != nil {
			return Committed{}, err
		}
		u := &Unit{}
		evs, err := decide(&s, u)
		if err != nil {
			return Committed{}, err
		}
		if len(evs) == 0 {
			if u.Empty() {
				return Committed{}, nil
			}
			// Statements alone (tidying a row the stream already settled).
			return r.store.Commit(ctx, u)
		}
		org := r.agg.OrgID(&s)
		for i, e := range evs {
			r.agg.Apply(&s, e, Recorded{Version: version + int64(i) + 1, OrgID: org})
		}
		news, err := r.encode(r.agg.OrgID(&s), evs)
		if err != nil {
			return Committed{}, err
		}
		ops := u.ops
		u.ops = append([]op{{stream: r.agg.Stream(id), expected: version, events: news}}, ops...)
		return r.store.Commit(ctx, u)
	})
	return s, c, err
}

// DecideInto loads id, lets decide return the events its state calls for
// and adds them to u, appended at the version decide saw, for a decision
// that spans streams: the caller's repository commits u, and if id's
// stream moves on first the commit fails with a *ConflictError, so the
// caller's decision, this one included, is made again on the new states.
// It returns id's state as decided on, with the events applied.
func (r *Repository[T, E]) DecideInto(ctx context.Context, u *Unit, id string, decide func(s *T) ([]E, error)) (T, error) {
	s, version, err := r.Load(ctx, id)
	if err != nil {
		return s, err
	}
	evs, err := decide(&s)
	if err != nil || len(evs) == 0 {
		return s, err
	}
	org := r.agg.OrgID(&s)
	for i, e := range evs {
		r.agg.Apply(&s, e, Recorded{Version: version + int64(i) + 1, OrgID: org})
	}
	news, err := r.encode(r.agg.OrgID(&s), evs)
	if err != nil {
		return s, err
	}
	u.Append(r.agg.Stream(id), version, news...)
	return s, nil
}

// encode turns events of this aggregate into events to append for orgID,
// stamped by the repository's clock when it has one.
func (r *Repository[T, E]) encode(orgID string, evs []E) ([]NewEvent, error) {
	out, err := Encode(r.agg.Codec, orgID, evs...)
	if err != nil || r.Now == nil {
		return out, err
	}
	at := r.Now().UTC().Truncate(time.Microsecond)
	for i := range out {
		out[i].OccurredAt = at
	}
	return out, nil
}

// Encode turns domain events into events to append for orgID, for a
// command that builds its own unit (a stream's first events recorded with
// another stream's, say).
func Encode[E any](codec Codec[E], orgID string, evs ...E) ([]NewEvent, error) {
	out := make([]NewEvent, len(evs))
	for i, e := range evs {
		name, version, data, err := codec.Encode(e)
		if err != nil {
			return nil, err
		}
		out[i] = NewEvent{Type: name, SchemaVersion: version, OrgID: orgID, Data: data}
	}
	return out, nil
}
