package domain

import (
	"sort"
	"time"
)

// WebhookSource says how one domain event type causes a webhook event. The
// outbox projection looks every event up in webhookSources and, for each
// enabled subscription of the event's organisation that names Event (or the
// one subscription Build targets), records a delivery.
type WebhookSource struct {
	// Event is the webhook event sent (one of WebhookEventNames).
	Event string
	// Build returns the delivery's data object (shallow: ids, not nested
	// records) for one occurrence of the domain event. target, when not
	// empty, aims the delivery at that one subscription whatever events it
	// names (a test). ok false means this occurrence sends nothing (for
	// example a fulfilment cancelled in a way that sends no event, spec 3.2).
	Build func(e Event) (data map[string]any, target string, ok bool)
}

// webhookSources is the explicit map from domain event type to the webhook
// event it causes. It is the one place a capability connects its events to
// webhooks; a domain event type not listed here causes none.
//
//	domain event               webhook event            added by
//	webhook.test_requested     run.ended (data.test)    webhooks (this issue)
//	run.ended                  run.ended                runs
//	run.parked                 run.needs_user_control   runs
//	schedule fired with device schedule.triggered       the schedules issue
//	fulfilment provisioned /   fulfilment.changed       the provisioning issue
//	awaiting / cancelled (the
//	cases of spec 3.2 that send)
//	receipt.checkpoint_signed  receipt.checkpoint_signed issue 27 (additive)
//
// The later rows name domain events that do not exist yet; each issue that
// adds one adds its row here with a Build that returns exactly the data
// fields of spec 6 (run.ended: agentRunId, runId, deviceId, state, goal,
// stepSeq, reason, detail; run.needs_user_control: agentRunId, deviceId,
// goal, deadlineAt; schedule.triggered: scheduleId, name, agentRunId,
// scheduledFor; fulfilment.changed: fulfilmentId, state, deviceId).
var webhookSources = map[string]WebhookSource{
	WebhookTestRequested{}.EventName():    {Event: WebhookRunEnded, Build: testRunEnded},
	ScheduleFiringCompleted{}.EventName(): {Event: WebhookScheduleTriggered, Build: scheduleTriggered},
	RunEnded{}.EventName():                {Event: WebhookRunEnded, Build: runEnded},
	RunParked{}.EventName():               {Event: WebhookRunNeedsUserControl, Build: runNeedsUserControl},

	FulfilmentProvisioned{}.EventName():          {Event: WebhookFulfilmentChanged, Build: fulfilmentChanged},
	FulfilmentAwaitingProvisioning{}.EventName(): {Event: WebhookFulfilmentChanged, Build: fulfilmentChanged},
	FulfilmentCancelled{}.EventName():            {Event: WebhookFulfilmentChanged, Build: fulfilmentChanged},

	ReceiptCheckpointSigned{}.EventName(): {Event: WebhookReceiptCheckpoint, Build: receiptCheckpoint},
}

// WebhookSourceTypes lists the event types that cause webhooks, sorted.
func WebhookSourceTypes() []string {
	out := make([]string, 0, len(webhookSources))
	for t := range webhookSources {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// WebhookSourceFor returns how events of type eventType cause a webhook, if
// they do.
func WebhookSourceFor(eventType string) (WebhookSource, bool) {
	s, ok := webhookSources[eventType]
	return s, ok
}

// testRunEnded is the data of a test delivery: a run.ended with every field
// of spec 6 present and data.test true.
func testRunEnded(e Event) (map[string]any, string, bool) {
	t, ok := e.(WebhookTestRequested)
	if !ok {
		return nil, "", false
	}
	return map[string]any{
		"agentRunId": t.AgentRunID,
		"runId":      t.RunID,
		"deviceId":   nil,
		"state":      "succeeded",
		"goal":       "Test delivery from phonefleet",
		"stepSeq":    0,
		"reason":     nil,
		"detail":     nil,
		"test":       true,
	}, t.WebhookID, true
}

// runEnded is the data of run.ended: every field of spec 6, reason and
// detail null when there is nothing to say.
func runEnded(e Event) (map[string]any, string, bool) {
	r, ok := e.(RunEnded)
	if !ok {
		return nil, "", false
	}
	return map[string]any{
		"agentRunId": r.AgentRunID,
		"runId":      r.RunID,
		"deviceId":   r.DeviceID,
		"state":      r.State,
		"goal":       r.Goal,
		"stepSeq":    r.StepSeq,
		"reason":     r.Reason,
		"detail":     r.Detail,
	}, "", true
}

// runNeedsUserControl is the data of run.needs_user_control.
func runNeedsUserControl(e Event) (map[string]any, string, bool) {
	p, ok := e.(RunParked)
	if !ok {
		return nil, "", false
	}
	return map[string]any{
		"agentRunId": p.AgentRunID,
		"deviceId":   p.DeviceID,
		"goal":       p.Goal,
		"deadlineAt": p.DeadlineAt.UTC().Format(time.RFC3339Nano),
	}, "", true
}

// receiptCheckpoint is the data of receipt.checkpoint_signed: the signed
// checkpoint itself, every member as GET /v1/receipts/checkpoints shows
// it, so a receiver can keep it and check an export against it later.
func receiptCheckpoint(e Event) (map[string]any, string, bool) {
	c, ok := e.(ReceiptCheckpointSigned)
	if !ok {
		return nil, "", false
	}
	cp := c.Checkpoint
	return map[string]any{
		"v":         cp.V,
		"orgId":     cp.OrgID,
		"entries":   cp.Entries,
		"headHash":  cp.HeadHash,
		"signedAt":  cp.SignedAt,
		"keyId":     cp.KeyID,
		"signature": cp.Signature,
	}, "", true
}
