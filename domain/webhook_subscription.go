package domain

import (
	"slices"
	"time"
)

// The webhook events a subscription may name: the four of spec 6, and
// receipt.checkpoint_signed, added since (issue 27, an additive change
// announced in the changelog). Any other name is refused at subscribe time.
const (
	WebhookRunEnded            = "run.ended"
	WebhookRunNeedsUserControl = "run.needs_user_control"
	WebhookScheduleTriggered   = "schedule.triggered"
	WebhookFulfilmentChanged   = "fulfilment.changed"
	// WebhookReceiptCheckpoint carries each signed checkpoint of the
	// organisation's receipt chain as it is made.
	WebhookReceiptCheckpoint = "receipt.checkpoint_signed"
)

// WebhookEventNames lists the webhook event names: spec 6's four in its
// order, then the ones added since.
var WebhookEventNames = []string{WebhookRunEnded, WebhookRunNeedsUserControl, WebhookScheduleTriggered, WebhookFulfilmentChanged,
	WebhookReceiptCheckpoint}

// Limits of webhook subscriptions (spec 8).
const (
	// MaxWebhooksPerOrg is how many subscriptions one organisation may hold;
	// every subscription counts, whoever made it.
	MaxWebhooksPerOrg = 20
	// MaxWebhookURLLength is the longest subscription URL accepted.
	MaxWebhookURLLength = 2000
)

// Why a subscription is switched off.
const (
	// WebhookDisabledByUser: a caller sent PATCH enabled false.
	WebhookDisabledByUser = "user"
	// WebhookDisabledPersonLeft: the person an OAuth app made it for left the
	// organisation; only that person may switch it on again (spec 5.2).
	WebhookDisabledPersonLeft = "person_left"
)

// WebhookStream is the stream holding every subscription event of orgID.
func WebhookStream(orgID string) string { return "webhooks-" + orgID }

// WebhookSubscription is one subscription as the command side sees it.
type WebhookSubscription struct {
	ID             string
	URL            string
	Events         []string
	Enabled        bool
	DisabledReason string
	SealedSecret   []byte
	SecretHint     string
	CreatedBy      WebhookCreator
}

// VisibleTo reports whether a may see and act on the subscription: an
// OAuth app sees only those it made for the same person (spec 5.2 item 5);
// every other principal of the organisation sees all of them.
func (s *WebhookSubscription) VisibleTo(a Auth) bool {
	if a.Kind != PrincipalApp {
		return true
	}
	return s.CreatedBy.Kind == PrincipalApp && s.CreatedBy.ClientID == a.ClientID && s.CreatedBy.UserID == a.UserID
}

// WebhookSet is the aggregate of one organisation's subscriptions. Its
// command methods decide and return events; Apply is the only place its
// state changes.
type WebhookSet struct {
	OrgID string
	subs  map[string]*WebhookSubscription
	order []string
}

// NewWebhookSet returns the empty set of orgID.
func NewWebhookSet(orgID string) *WebhookSet {
	return &WebhookSet{OrgID: orgID, subs: map[string]*WebhookSubscription{}}
}

// Apply changes the set's state by one recorded event. Events of other
// types are ignored.
func (s *WebhookSet) Apply(e Event) {
	switch e := e.(type) {
	case WebhookSubscribed:
		s.subs[e.WebhookID] = &WebhookSubscription{ID: e.WebhookID, URL: e.URL, Events: slices.Clone(e.Events),
			Enabled: true, SealedSecret: e.SealedSecret, SecretHint: e.SecretHint, CreatedBy: e.CreatedBy}
		s.order = append(s.order, e.WebhookID)
	case WebhookEnabled:
		if sub := s.subs[e.WebhookID]; sub != nil {
			sub.Enabled, sub.DisabledReason = true, ""
		}
	case WebhookDisabled:
		if sub := s.subs[e.WebhookID]; sub != nil {
			sub.Enabled, sub.DisabledReason = false, e.Reason
		}
	case WebhookSecretRotated:
		if sub := s.subs[e.WebhookID]; sub != nil {
			sub.SealedSecret, sub.SecretHint = e.SealedSecret, e.SecretHint
		}
	case WebhookDeleted:
		delete(s.subs, e.WebhookID)
		s.order = slices.DeleteFunc(s.order, func(id string) bool { return id == e.WebhookID })
	}
}

// Count is the number of live subscriptions.
func (s *WebhookSet) Count() int { return len(s.subs) }

// Get returns the subscription id if a may see it. A missing id, one of
// another organisation (never in this set) and one a may not see all answer
// the same not_found.
func (s *WebhookSet) Get(a Auth, id string) (*WebhookSubscription, error) {
	sub := s.subs[id]
	if sub == nil || a.OrgID != s.OrgID || !sub.VisibleTo(a) {
		return nil, Errorf(CodeNotFound, "no webhook %s", id)
	}
	return sub, nil
}

// Subscribe decides a new subscription. url must already have passed the
// URL checks (CheckWebhookURL and the resolution check); events are
// checked here.
func (s *WebhookSet) Subscribe(a Auth, id, url string, events []string, sealed []byte, hint string) ([]Event, error) {
	evs, err := CheckWebhookEvents(events)
	if err != nil {
		return nil, err
	}
	if s.Count() >= MaxWebhooksPerOrg {
		return nil, Errorf(CodeInvalidArgument, "this organisation already has %d webhooks, the most it may have", MaxWebhooksPerOrg).
			With("reason", "too_many_webhooks").With("limit", MaxWebhooksPerOrg)
	}
	by := WebhookCreator{Kind: a.Kind, UserID: a.UserID, APIKeyID: a.APIKeyID, ClientID: a.ClientID}
	return []Event{WebhookSubscribed{WebhookID: id, URL: url, Events: evs, SealedSecret: sealed, SecretHint: hint, CreatedBy: by}}, nil
}

// SetEnabled decides switching a subscription on or off. Switching on one
// that was switched off because its person left is for that person only
// (permission_denied otherwise). Setting the state it already has records
// nothing.
func (s *WebhookSet) SetEnabled(a Auth, id string, enabled bool) ([]Event, error) {
	sub, err := s.Get(a, id)
	if err != nil {
		return nil, err
	}
	if sub.Enabled == enabled {
		return nil, nil
	}
	if !enabled {
		return []Event{WebhookDisabled{WebhookID: id, Reason: WebhookDisabledByUser}}, nil
	}
	if sub.DisabledReason == WebhookDisabledPersonLeft && (a.Kind == PrincipalAPIKey || a.UserID == "" || a.UserID != sub.CreatedBy.UserID) {
		return nil, Errorf(CodePermissionDenied, "this webhook was switched off because the person it was made for left the organisation; only that person may switch it on")
	}
	return []Event{WebhookEnabled{WebhookID: id}}, nil
}

// Rotate decides a new signing secret for id.
func (s *WebhookSet) Rotate(a Auth, id string, sealed []byte, hint string) ([]Event, error) {
	if _, err := s.Get(a, id); err != nil {
		return nil, err
	}
	return []Event{WebhookSecretRotated{WebhookID: id, SealedSecret: sealed, SecretHint: hint}}, nil
}

// Delete decides removing id.
func (s *WebhookSet) Delete(a Auth, id string) ([]Event, error) {
	if _, err := s.Get(a, id); err != nil {
		return nil, err
	}
	return []Event{WebhookDeleted{WebhookID: id}}, nil
}

// RequestTest decides a test delivery to id. A switched-off subscription
// receives nothing, so its test is refused with invalid_argument (state
// "disabled") rather than accepted and never sent. Not wrong_state: that is
// the code of an order that cannot be cancelled or returned (spec 7.2).
func (s *WebhookSet) RequestTest(a Auth, id, agentRunID, runID string) ([]Event, error) {
	sub, err := s.Get(a, id)
	if err != nil {
		return nil, err
	}
	if !sub.Enabled {
		return nil, Errorf(CodeInvalidArgument, "webhook %s is switched off; switch it on to send a test", id).
			With("state", "disabled").WithRetryable(false)
	}
	return []Event{WebhookTestRequested{WebhookID: id, AgentRunID: agentRunID, RunID: runID}}, nil
}

// PersonLeft decides switching off every enabled subscription an OAuth app
// made for userID (spec 5.2: "webhooks that apps created on their behalf
// there are switched off").
func (s *WebhookSet) PersonLeft(userID string) []Event {
	var out []Event
	for _, id := range s.order {
		sub := s.subs[id]
		if sub.Enabled && sub.CreatedBy.Kind == PrincipalApp && sub.CreatedBy.UserID == userID {
			out = append(out, WebhookDisabled{WebhookID: id, Reason: WebhookDisabledPersonLeft})
		}
	}
	return out
}

// CheckWebhookEvents refuses an empty list and any name outside
// WebhookEventNames, and returns the names deduplicated in that order.
func CheckWebhookEvents(events []string) ([]string, error) {
	if len(events) == 0 {
		return nil, Errorf(CodeInvalidArgument, "events must name at least one of %v", WebhookEventNames).With("reason", "no_events")
	}
	for _, e := range events {
		if !slices.Contains(WebhookEventNames, e) {
			return nil, Errorf(CodeInvalidArgument, "unknown event %q; events are %v", e, WebhookEventNames).
				With("reason", "unknown_event").With("event", e)
		}
	}
	var out []string
	for _, n := range WebhookEventNames {
		if slices.Contains(events, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// WebhookTimeFormat is how webhook bodies and the API write times: ISO 8601
// UTC with microseconds, the precision events are recorded with.
const WebhookTimeFormat = "2006-01-02T15:04:05.000000Z"

// FormatWebhookTime formats t in WebhookTimeFormat.
func FormatWebhookTime(t time.Time) string { return t.UTC().Format(WebhookTimeFormat) }
