package copilot

import (
	"context"

	"phonefleet/domain"
	"phonefleet/projections"
)

// ListThreads lists the person's threads, most recently active first (GET
// /v1/copilot/threads).
type ListThreads struct {
	Auth domain.Auth
	// Limit is at most 100; zero means 50.
	Limit int
}

// ListThreadsHandler handles ListThreads.
type ListThreadsHandler struct{ c *Copilot }

// Handle answers the caller's own threads in their organisation (a
// person never sees another's), within the credential's devices.
// Refusals: permission_denied, invalid_argument (limit).
func (h ListThreadsHandler) Handle(ctx context.Context, q ListThreads) ([]projections.CopilotThreadView, error) {
	if err := access(q.Auth); err != nil {
		return nil, err
	}
	switch {
	case q.Limit == 0:
		q.Limit = 50
	case q.Limit < 1 || q.Limit > 100:
		return nil, domain.Errorf(domain.CodeInvalidArgument, "limit must be between 1 and 100").With("field", "limit")
	}
	return h.c.cfg.Queries.Threads(ctx, q.Auth.OrgID, q.Auth.UserID, q.Auth.Devices, q.Limit)
}

// GetThread reads one thread with its items (GET
// /v1/copilot/threads/{id}).
type GetThread struct {
	Auth     domain.Auth
	ThreadID string
}

// Thread is a thread and what happened in it, in order.
type Thread struct {
	projections.CopilotThreadView
	Items []projections.CopilotItem
}

// GetThreadHandler handles GetThread.
type GetThreadHandler struct{ c *Copilot }

// Handle answers the caller's own thread; any other id answers not_found,
// the same as one that names nothing.
func (h GetThreadHandler) Handle(ctx context.Context, q GetThread) (Thread, error) {
	a := q.Auth
	if err := access(a); err != nil {
		return Thread{}, err
	}
	if !domain.HasPrefix(q.ThreadID, domain.PrefixCopilotThread) {
		return Thread{}, domain.ErrCopilotThreadNotFound(q.ThreadID)
	}
	v, items, found, err := h.c.cfg.Queries.Thread(ctx, a.OrgID, a.UserID, q.ThreadID)
	if err != nil {
		return Thread{}, err
	}
	if !found || !a.CanSeeDevice(v.DeviceID) {
		return Thread{}, domain.ErrCopilotThreadNotFound(q.ThreadID)
	}
	return Thread{CopilotThreadView: v, Items: items}, nil
}
