package copilot

import (
	"context"
	"errors"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// SweepThread records on one thread what time alone decides (a worker's
// command, no person's): pending approvals past their expiry are recorded
// expired (copilot.approval_expired), and a turn in flight that recorded
// nothing for LostAfter, and that this process does not run, is ended
// failed with reason turn_lost (its process died), so the thread takes
// messages again. A lease such a turn took runs out by itself.
type SweepThread struct {
	ThreadID string
	// LostAfter is zero for domain.CopilotTurnLostAfter.
	LostAfter time.Duration
}

// SweepThreadHandler handles SweepThread.
type SweepThreadHandler struct{ c *Copilot }

// Handle reports whether it recorded anything. A thread changed meanwhile
// is read again.
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
		return err == nil, err
	}
}

// runs reports whether this process runs the thread's turn.
func (c *Copilot) runs(threadID, turnID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.running[threadID]
	return ok && r.turnID == turnID
}
