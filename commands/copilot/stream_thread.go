package copilot

import (
	"context"
	"encoding/json"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// StreamThread opens a thread's event stream (GET
// /v1/copilot/threads/{id}/stream): its events after version After (0:
// from the start), as they are recorded.
type StreamThread struct {
	Auth     domain.Auth
	ThreadID string
	After    int64
}

// StreamThreadHandler handles StreamThread.
type StreamThreadHandler struct{ c *Copilot }

// Handle checks the caller may read the thread and returns its stream.
// Refusals: permission_denied, service_unavailable, not_found.
func (h StreamThreadHandler) Handle(ctx context.Context, q StreamThread) (*ThreadEvents, error) {
	c := h.c
	if err := access(q.Auth); err != nil {
		return nil, err
	}
	if err := c.chatServed(); err != nil {
		return nil, err
	}
	if _, _, err := c.visibleThread(ctx, q.Auth, q.ThreadID); err != nil {
		return nil, err
	}
	if q.After < 0 {
		q.After = 0
	}
	return &ThreadEvents{store: c.cfg.Store, stream: domain.CopilotThreadStream(q.ThreadID), after: q.After}, nil
}

// ThreadEvent is one event of a thread as its stream sends it: the
// stream version (the server-sent event's id), the event's name and its
// data as recorded.
type ThreadEvent struct {
	ID   int64
	Type string
	Data json.RawMessage
}

// ThreadEvents reads a thread's events in order, waiting for new ones.
type ThreadEvents struct {
	store  *eventstore.Store
	stream string
	after  int64
}

// streamPoll bounds how long Next waits without a commit's wake-up before
// reading again (a commit of another instance without the relay).
const streamPoll = 2 * time.Second

// Next returns the events after the last returned, waiting until there
// is at least one or ctx ends (its error).
func (s *ThreadEvents) Next(ctx context.Context) ([]ThreadEvent, error) {
	for {
		woken := s.store.Signal().C()
		evs, err := s.store.Load(ctx, s.stream, s.after+1)
		if err != nil {
			return nil, err
		}
		if len(evs) > 0 {
			out := make([]ThreadEvent, len(evs))
			for i, e := range evs {
				out[i] = ThreadEvent{ID: e.StreamVersion, Type: e.Type, Data: e.Data}
			}
			s.after = evs[len(evs)-1].StreamVersion
			return out, nil
		}
		t := time.NewTimer(streamPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-woken:
		case <-t.C:
		}
		t.Stop()
	}
}
