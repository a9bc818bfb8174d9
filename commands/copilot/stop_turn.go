package copilot

import (
	"context"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
)

// StopTurn stops the turn in flight of a thread (POST
// /v1/copilot/threads/{id}/stop).
type StopTurn struct {
	Auth     domain.Auth
	ThreadID string
}

// StopTurnHandler handles StopTurn.
type StopTurnHandler struct{ c *Copilot }

// Handle records the stop and the turn's end in one append, so the turn
// records (and sends) nothing after it; an action already sent settles as
// usual. A thread with no turn in flight is left as it is. Refusals:
// permission_denied, service_unavailable, not_found.
func (h StopTurnHandler) Handle(ctx context.Context, cmd StopTurn) (cqrs.Done, error) {
	c, a := h.c, cmd.Auth
	if err := access(a); err != nil {
		return cqrs.Done{}, err
	}
	if err := c.chatServed(); err != nil {
		return cqrs.Done{}, err
	}
	if _, _, err := c.visibleThread(ctx, a, cmd.ThreadID); err != nil {
		return cqrs.Done{}, err
	}
	var stopped string
	_, committed, err := c.threads.Update(ctx, cmd.ThreadID, func(t **domain.CopilotThread) ([]domain.Event, error) {
		stopped = (*t).Turn
		return (*t).Stop(a, c.now()), nil
	})
	if err != nil {
		return cqrs.Done{}, err
	}
	if len(committed.Appends) == 0 {
		return cqrs.Done{}, nil
	}
	c.mu.Lock()
	if rt, ok := c.running[cmd.ThreadID]; ok && rt.turnID == stopped {
		rt.cancel()
	}
	c.mu.Unlock()
	return cqrs.Done{}, c.wait(ctx, committed.Last())
}
