package copilot

import (
	"context"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
)

// PostMessage is a person's message to the copilot (POST /v1/copilot): to
// the thread ThreadID, or, without one, to a new thread about DeviceID, or
// about the person's fleet when DeviceID is empty too.
type PostMessage struct {
	Auth     domain.Auth
	ThreadID string
	DeviceID string
	Message  string
	// ApproveEveryAction, for a new thread, makes every device action of
	// the thread wait for the person's yes.
	ApproveEveryAction bool
}

// PostedMessage names the thread and the turn the message started.
type PostedMessage struct {
	ThreadID string
	TurnID   string
}

// PostMessageHandler handles PostMessage.
type PostMessageHandler struct{ c *Copilot }

// Handle records the message (and the thread, when new), starting a turn
// that this process then runs, and answers once the threads read model
// shows it. When the organisation's metered allowance is spent no turn
// runs: the copilot's answer, recorded with the message, says so and how
// to use direct commands (no model is asked, no tokens are spent). Refusals: permission_denied (not a person's session),
// service_unavailable (no model), invalid_argument (message, deviceId; a
// fleet thread from a credential narrowed to some devices),
// not_found (a thread that is not the caller's), device_unavailable
// (not_found: a device the caller cannot see), wrong_state (the thread is
// still answering).
func (h PostMessageHandler) Handle(ctx context.Context, cmd PostMessage) (PostedMessage, error) {
	c, a := h.c, cmd.Auth
	if err := access(a); err != nil {
		return PostedMessage{}, err
	}
	if err := c.chatServed(); err != nil {
		return PostedMessage{}, err
	}
	text, err := domain.CheckCopilotMessage(cmd.Message)
	if err != nil {
		return PostedMessage{}, err
	}
	threadID := cmd.ThreadID
	deviceID := cmd.DeviceID
	if threadID == "" {
		// Without a device the thread is about the person's fleet.
		if deviceID != "" {
			if _, err := c.devices.GetDevice.Handle(ctx, fleet.GetDevice{Auth: a, DeviceID: deviceID}); err != nil {
				return PostedMessage{}, err
			}
		} else if err := fleetThreadAllowed(a); err != nil {
			return PostedMessage{}, err
		}
		threadID = domain.NewID(domain.PrefixCopilotThread)
	} else {
		t, _, err := c.visibleThread(ctx, a, threadID)
		if err != nil {
			return PostedMessage{}, err
		}
		if deviceID != "" && deviceID != t.DeviceID {
			about := "device " + t.DeviceID
			if t.Fleet() {
				about = "the fleet"
			}
			return PostedMessage{}, domain.Errorf(domain.CodeInvalidArgument, "thread %s is about %s; a thread stays with what it is about", threadID, about).
				With("field", "deviceId")
		}
	}
	spent, err := c.allowanceSpent(ctx, a.OrgID, 0)
	if err != nil {
		return PostedMessage{}, err
	}
	turnID := domain.NewID(domain.PrefixCopilotTurn)
	t, committed, err := c.threads.Update(ctx, threadID, func(t **domain.CopilotThread) ([]domain.Event, error) {
		if (*t).Exists() && !(*t).VisibleTo(a) {
			return nil, domain.ErrCopilotThreadNotFound(threadID)
		}
		now := c.now()
		evs, err := (*t).Post(a, deviceID, turnID, text, cmd.ApproveEveryAction, now)
		if err != nil || !spent {
			return evs, err
		}
		// Command mode: the copilot answers without its model (no tokens).
		return append(evs,
			domain.CopilotTextStreamed{ThreadID: threadID, TurnID: turnID, Step: 1, Text: domain.CopilotAllowanceSpentMessage, At: now},
			domain.CopilotTurnEnded{ThreadID: threadID, TurnID: turnID, Outcome: domain.CopilotTurnCompleted, Reason: "allowance_exhausted",
				Detail: "the copilot allowance of this billing month is spent; direct commands are still served", At: now}), nil
	})
	if err != nil {
		return PostedMessage{}, err
	}
	last := committed.Last()
	if !spent {
		c.start(ctx, a, t, turnID, text, last.Version)
	}
	if err := c.wait(ctx, last); err != nil {
		return PostedMessage{}, err
	}
	return PostedMessage{ThreadID: threadID, TurnID: turnID}, nil
}

// allowanceSpent reports whether orgID's metered allowance is spent (with
// owing tokens not recorded yet), so a message is answered in command mode
// and a running turn asks the model no more. An allowance that is not
// configured does not stop the chat (only its read answers
// checkout_unavailable).
func (c *Copilot) allowanceSpent(ctx context.Context, orgID string, owing int64) (bool, error) {
	if !c.cfg.Metered || c.cfg.TokensPerDevice == nil {
		return false, nil
	}
	al, err := c.allowance(ctx, orgID, owing)
	return al.Spent(), err
}

// start runs the turn in this process, under the service's lifetime, with
// the request's authorization and metadata.
func (c *Copilot) start(ctx context.Context, a domain.Auth, t *domain.CopilotThread, turnID, text string, version int64) {
	meta, _ := eventstore.MetadataFrom(ctx)
	tctx, cancel := context.WithCancel(c.base)
	tctx = domain.WithAuth(eventstore.WithMetadata(tctx, meta), a)
	c.mu.Lock()
	c.running[t.ID] = runningTurn{turnID: turnID, cancel: cancel}
	c.mu.Unlock()
	r := &turn{c: c, auth: a, threadID: t.ID, deviceID: t.DeviceID, turnID: turnID, message: text, version: version, dev: c.devices,
		everyAction: t.ApproveEveryAction, frames: map[string]string{}, leases: map[string]*turnLease{}}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		r.run(tctx)
		c.mu.Lock()
		if rt, ok := c.running[t.ID]; ok && rt.turnID == turnID {
			delete(c.running, t.ID)
		}
		c.mu.Unlock()
	}()
}

// fleetThreadAllowed refuses a fleet thread to a credential narrowed to
// some devices: a thread about the whole fleet is not within its subset.
func fleetThreadAllowed(a domain.Auth) error {
	if a.Devices != nil {
		return domain.Errorf(domain.CodeInvalidArgument, "deviceId is required: this credential reaches only some devices, so it cannot start a thread about the fleet").
			With("field", "deviceId")
	}
	return nil
}
