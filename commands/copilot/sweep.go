package copilot

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
)

// SweepThread records on one thread what time alone decides (a worker's
// command, no person's): pending approvals past their expiry are recorded
// expired (copilot.approval_expired), and a turn in flight that recorded
// nothing for LostAfter, and that this process does not run, is ended
// failed with reason turn_lost (its process died), so the thread takes
// messages again, and the leases that turn took for itself
// (copilot.lease_taken) are given back.
type SweepThread struct {
	ThreadID string
	// LostAfter is zero for domain.CopilotTurnLostAfter.
	LostAfter time.Duration
}

// SweepThreadHandler handles SweepThread.
type SweepThreadHandler struct{ c *Copilot }

// Handle reports whether it recorded anything. A thread changed meanwhile
// is read again. The leases a lost turn took are given back after its end
// is recorded (so the turn, were it alive after all, sends nothing more
// under them); only those: a lease the person took by hand was never
// recorded as the turn's, and a lease is given back by its id, so another
// lease on the device is never ended. A lease already ended (given back,
// expired) is left as it is.
func (h SweepThreadHandler) Handle(ctx context.Context, cmd SweepThread) (bool, error) {
	c := h.c
	lost := cmd.LostAfter
	if lost <= 0 {
		lost = domain.CopilotTurnLostAfter
	}
	for attempt := 0; ; attempt++ {
		t, version, err := c.threads.Load(ctx, cmd.ThreadID)
		if err != nil {
			return false, err
		}
		if !t.Exists() {
			return false, nil
		}
		judge := lost
		if t.Turn != "" && c.runs(t.ID, t.Turn) {
			judge = 0 // live here: not lost, however quiet
		}
		evs := t.Sweep(c.now(), judge)
		if len(evs) == 0 {
			return false, nil
		}
		err = c.record(ctx, t.ID, version, evs...)
		if errors.Is(err, eventstore.ErrConflict) && attempt < 3 {
			continue
		}
		if err != nil {
			return false, err
		}
		if ended(evs) {
			return true, c.giveBack(ctx, t)
		}
		return true, nil
	}
}

// ended reports whether evs end a turn.
func ended(evs []domain.Event) bool {
	for _, e := range evs {
		if _, ok := e.(domain.CopilotTurnEnded); ok {
			return true
		}
	}
	return false
}

// giveBack gives back the leases the thread's turn (ended lost) took for
// itself, through the fleet's ReleaseLease as the person who held them
// (the turn's holder), narrowed to giving a lease back.
func (c *Copilot) giveBack(ctx context.Context, t *domain.CopilotThread) error {
	holder := domain.Auth{OrgID: t.OrgID, Kind: domain.PrincipalConsole, UserID: t.UserID, Scopes: []domain.Scope{domain.ScopeDevicesLease}}
	var errs []error
	for _, device := range slices.Sorted(maps.Keys(t.TurnLeases)) {
		_, err := c.devices.ReleaseLease.Handle(ctx, fleet.ReleaseLease{Auth: holder, DeviceID: device, LeaseID: t.TurnLeases[device]})
		var de *domain.Error
		if err != nil && !(errors.As(err, &de) && (de.Code == domain.CodeLeaseMismatch || de.Code == domain.CodeLeaseRequired)) {
			errs = append(errs, fmt.Errorf("give back lease %s on %s: %w", t.TurnLeases[device], device, err))
		}
	}
	return errors.Join(errs...)
}

// runs reports whether this process runs the thread's turn.
func (c *Copilot) runs(threadID, turnID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.running[threadID]
	return ok && r.turnID == turnID
}
