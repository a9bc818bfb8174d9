package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"phonefleet/eventstore"
	"phonefleet/internal/claims"
	"phonefleet/internal/clock"
)

// Reaction is one kind of "event → retried, idempotent side effect": the
// part a Reactor cannot know, because it depends on the reaction's tables
// and on the world it acts on. T is what one claimed item carries to its
// effect; O is what acting on it came to (the facts its attempt event
// records).
//
// The rules a reaction keeps, so that any number of instances can run it:
// each item's key is derived from the event it reacts to (so a projection
// rebuild recreates the same items and never repeats work done in the
// world); an attempt number is claimed under a lease and recorded as an
// event at most once; and an item's next due time is decided from its
// attempt events (the retry schedule is the domain's, not the loop's).
//
// Every reaction of the service claims through the one claims mechanism:
// it embeds *claims.Claims (which gives it Claim and Cleanup, over the one
// claims table) and records with claims.Recorded in its attempt's unit.
// The interface stays this small so that the reactor can be tested on its
// own, with a reaction that keeps items and claims in one toy table.
type Reaction[T, O any] interface {
	// Claim takes the lease on up to n due attempts for l.Holder until
	// l.Until, selecting its claim rows with FOR UPDATE SKIP LOCKED, so that
	// instances claiming at once pass over each other's rows instead of
	// queueing on them. An attempt is due when its item is due at l.Now and
	// the attempt before it is on record, or when an instance claimed it,
	// never recorded it and its lease has lapsed by l.Now (the holder died
	// between acting and recording: the attempt is made again). A recorded
	// attempt is never claimed again, even while a read model still lags
	// behind its event. A reactor never calls Claim concurrently with
	// itself, so a reaction may keep state from one claim to the next.
	Claim(ctx context.Context, l Lease, n int) ([]Claimed[T], error)
	// Act performs one claimed attempt's effect, outside any transaction,
	// and returns its outcome. Its context carries the attempt's event
	// metadata and does not end with the reactor's: an effect, once begun,
	// runs to its end and is recorded. Act bounds its own time, well within
	// the lease.
	Act(ctx context.Context, c Claimed[T]) O
	// Record appends the attempt's event to the item's stream at version
	// c.Attempt−1, in the same unit as marking the claim recorded
	// (claims.Recorded), so that an attempt number is recorded once
	// whichever instance made it. Its error matches eventstore.ErrConflict
	// when another instance recorded that attempt first (after taking over
	// a lapsed claim); the reactor counts the attempt as recorded then.
	Record(ctx context.Context, c Claimed[T], o O) (eventstore.Appended, error)
}

// ClaimCleaner is implemented by a reaction whose claim rows outlive their
// use (recorded attempts a read model has applied, claims of items that
// left the read side), as claims.Claims does; a reactor calls Cleanup once
// a minute.
type ClaimCleaner interface {
	Cleanup(ctx context.Context, now time.Time) error
}

// Lease is what a claim takes (claims.Lease): the holder's name, the time
// of the claim and the end of the lease.
type Lease = claims.Lease

// Claimed is one attempt a reactor holds a lease on (claims.Claimed).
type Claimed[T any] = claims.Claimed[T]

// Attempt is one attempt a reactor made: the claim, what acting on it came
// to, and what recording wrote.
type Attempt[T, O any] struct {
	Claimed[T]
	Outcome O
	// Appended is what recording wrote; zero when another instance had
	// already recorded this attempt, or recording failed (Err).
	Appended eventstore.Appended
	Err      error
}

// ReactorConfig configures a Reactor. Zero values take the documented
// defaults.
type ReactorConfig[T, O any] struct {
	// Name names the reaction in logs and, with ID, as the actor of the
	// attempts it records ("Name:ID").
	Name string
	// ID names this instance in claims and event metadata; empty means a
	// random one.
	ID string
	// Now is the clock of claims and leases; nil means clock.Now.
	Now func() time.Time
	// Concurrency is how many attempts are in flight at once; zero means 32.
	Concurrency int
	// Lease is how long a claim is held before another instance may take it
	// over (it must outlast an attempt); zero means one minute.
	Lease time.Duration
	// Poll is how often Run looks for due items when nothing wakes it, and
	// the first step of its backoff after a failed claim; zero means 50 ms.
	Poll time.Duration
	// Logger receives failures to claim, record or clean up; nil discards
	// them.
	Logger *slog.Logger
	// OnAttempt, when not nil, is called after each attempt is recorded (or
	// recording failed), from the goroutine that made it: a hook for
	// metrics and benchmarks.
	OnAttempt func(Attempt[T, O])
}

// Reactor runs a Reaction: it claims due attempts, acts on each outside
// any transaction with at most Concurrency in flight, records every
// attempt, and backs off when there is nothing to do or claiming fails.
// Any number of reactors (instances) may run one reaction on one database:
// claims skip each other's locked rows, a lease lets another instance take
// over the claims of one that died, and an attempt number is recorded once.
// Delivery is therefore at least once: an instance that dies between acting
// and recording leaves an attempt that is made again, under the same key,
// once its lease lapses.
type Reactor[T, O any] struct {
	cfg      ReactorConfig[T, O]
	reaction Reaction[T, O]
	// claimMu keeps claims of one reactor one at a time (Run and Once may
	// overlap), as Reaction.Claim promises.
	claimMu sync.Mutex
}

const (
	// maxClaimBackoff bounds the wait after claims fail in a row.
	maxClaimBackoff = 5 * time.Second
	// recordTimeout bounds recording one attempt; it does not depend on the
	// reactor's context, which may have ended while the attempt was made.
	recordTimeout = 30 * time.Second
	// cleanupEvery is how often Run calls a ClaimCleaner.
	cleanupEvery = time.Minute
)

// NewReactor returns a reactor running reaction under cfg.
func NewReactor[T, O any](reaction Reaction[T, O], cfg ReactorConfig[T, O]) *Reactor[T, O] {
	if cfg.ID == "" {
		cfg.ID = uuid.NewString()[:8]
	}
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.Lease <= 0 {
		cfg.Lease = time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reactor[T, O]{cfg: cfg, reaction: reaction}
}

// ID returns the instance's name.
func (r *Reactor[T, O]) ID() string { return r.cfg.ID }

// Run reacts until ctx ends, then lets the attempts in flight finish and
// be recorded. It claims when a quarter of its slots are free (so claims
// come in batches, not one per finished attempt), or when any are and
// nothing is in flight; it claims again at once when a claim filled every
// free slot (more may be due), and otherwise after Poll or when an attempt
// ends. Claims that fail wait twice as long each time, up to five seconds,
// so a database in trouble is not hammered.
func (r *Reactor[T, O]) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, r.cfg.Concurrency)
	freed := make(chan struct{}, 1)
	lowWater := max(1, r.cfg.Concurrency/4)
	backoff := r.cfg.Poll
	nextCleanup := time.Now()
	for ctx.Err() == nil {
		free := r.cfg.Concurrency - len(slots)
		full := false
		if free >= lowWater || (free > 0 && len(slots) == 0) {
			items, err := r.claim(ctx, free)
			if err != nil {
				if ctx.Err() == nil {
					r.cfg.Logger.Warn(r.cfg.Name+": claim failed", "instance", r.cfg.ID, "err", err)
				}
				backoff = min(backoff*2, maxClaimBackoff)
			} else {
				backoff = r.cfg.Poll
			}
			for _, c := range items {
				slots <- struct{}{}
				wg.Add(1)
				go func() {
					defer wg.Done()
					r.attempt(ctx, c)
					<-slots
					select {
					case freed <- struct{}{}:
					default:
					}
				}()
			}
			full = len(items) == free
		}
		if time.Now().After(nextCleanup) {
			r.cleanup(ctx)
			nextCleanup = time.Now().Add(cleanupEvery)
		}
		if full {
			continue
		}
		select {
		case <-ctx.Done():
		case <-freed:
		case <-time.After(backoff):
		}
	}
}

// Once claims up to Concurrency due attempts, makes them concurrently,
// records every one, and returns them.
func (r *Reactor[T, O]) Once(ctx context.Context) ([]Attempt[T, O], error) {
	items, err := r.claim(ctx, r.cfg.Concurrency)
	if err != nil {
		return nil, err
	}
	out := make([]Attempt[T, O], len(items))
	var wg sync.WaitGroup
	for i, c := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = r.attempt(ctx, c)
		}()
	}
	wg.Wait()
	return out, nil
}

func (r *Reactor[T, O]) claim(ctx context.Context, n int) ([]Claimed[T], error) {
	if n <= 0 {
		return nil, nil
	}
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	now := r.cfg.Now()
	return r.reaction.Claim(ctx, Lease{Holder: r.cfg.ID, Now: now, Until: now.Add(r.cfg.Lease)}, n)
}

// attempt acts on one claimed attempt and records it. It runs to the end
// even when ctx ends: an attempt, once made, is recorded.
func (r *Reactor[T, O]) attempt(ctx context.Context, c Claimed[T]) Attempt[T, O] {
	// The attempt is this instance's act, caused by the item (itself
	// derived from the event reacted to); its request is the attempt.
	ctx = eventstore.WithMetadata(context.WithoutCancel(ctx), eventstore.Metadata{ActorKind: "system",
		ActorID: r.cfg.Name + ":" + r.cfg.ID, RequestID: fmt.Sprintf("%s#%d", c.Key, c.Attempt), CausationID: c.Key})
	a := Attempt[T, O]{Claimed: c, Outcome: r.reaction.Act(ctx, c)}
	rctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	a.Appended, a.Err = r.reaction.Record(rctx, c, a.Outcome)
	log := r.cfg.Logger.With("instance", r.cfg.ID, "key", c.Key, "attempt", c.Attempt)
	switch {
	case errors.Is(a.Err, eventstore.ErrConflict):
		a.Appended, a.Err = eventstore.Appended{}, nil
		log.Debug(r.cfg.Name + ": attempt recorded already by another instance")
	case a.Err != nil:
		log.Warn(r.cfg.Name+": recording an attempt failed; its lease will lapse and it will be made again", "err", a.Err)
	default:
		log.Debug(r.cfg.Name+": attempt recorded", "outcome", a.Outcome)
	}
	if r.cfg.OnAttempt != nil {
		r.cfg.OnAttempt(a)
	}
	return a
}

// cleanup lets a ClaimCleaner drop the claim rows nothing depends on.
func (r *Reactor[T, O]) cleanup(ctx context.Context) {
	c, ok := r.reaction.(ClaimCleaner)
	if !ok {
		return
	}
	if err := c.Cleanup(ctx, r.cfg.Now()); err != nil && ctx.Err() == nil {
		r.cfg.Logger.Warn(r.cfg.Name+": cleanup failed", "instance", r.cfg.ID, "err", err)
	}
}
