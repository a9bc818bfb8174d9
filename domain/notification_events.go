package domain

import (
	"encoding/hex"
	"fmt"
	"net/mail"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
)

// notificationEvents are the events of notifications (spec §1 item 8):
// what the notification reaction raised for whom, each e-mail attempt, what
// a person read, their preferences, the keys' expiry notices the sweep
// raises.
var notificationEvents = []EventDef{
	Def[NotificationsRaised](1, nil),
	Def[NotificationEmailAttempted](1, nil),
	Def[NotificationsRead](1, nil),
	Def[NotificationPreferencesSet](1, nil),
	Def[NotificationPersonSeen](1, nil),
	Def[APIKeyExpiryNoticeDue](1, nil),
}

// PrefixNotification is the prefix of a notification's id.
const PrefixNotification = "ntf"

// Notification kinds: what a person is told about.
const (
	// NotifyRunNeedsUser: a run parked for a person (run.parked), to its starter.
	NotifyRunNeedsUser = "run_needs_user"
	// NotifyRunEnded: a run ended (run.ended), to its starter.
	NotifyRunEnded = "run_ended"
	// NotifyPaymentFollowupFailed: money the service could not return or a
	// subscription it could not cancel (payment.followup_attempted refused
	// or gave up), to every admin.
	NotifyPaymentFollowupFailed = "payment_followup_failed"
	// NotifyGatewayGone: a gateway's tunnel was lost (gateway.disconnected
	// for a reason that is not routine), to every admin.
	NotifyGatewayGone = "gateway_gone"
	// NotifyAPIKeyExpiring: a key expires within a week or a day, to its minter.
	NotifyAPIKeyExpiring = "api_key_expiring"
	// NotifyDeviceOffline: a device went offline (device.went_offline), to
	// the people who used it in the week before.
	NotifyDeviceOffline = "device_offline"
	// NotifyCopilotNearLimit: the organisation's copilot allowance went past
	// four fifths this billing period (hosted, metered), to every admin and
	// the person whose turn took it there; once per organisation and period.
	NotifyCopilotNearLimit = "copilot_near_limit"
	// NotifyCopilotExhausted: the organisation's copilot allowance is spent
	// this billing period, to the same people; once per organisation and
	// period.
	NotifyCopilotExhausted = "copilot_exhausted"
	// CopilotTokensTrigger is the kind of the trigger every
	// copilot.tokens_used is: the fan-out decides whether it crossed a
	// threshold (and so which of the two kinds above it raises), not a kind
	// of notification.
	CopilotTokensTrigger = "copilot_tokens"
)

// NotificationKinds lists every kind, in the order the preferences show them.
var NotificationKinds = []string{NotifyRunNeedsUser, NotifyRunEnded, NotifyPaymentFollowupFailed,
	NotifyGatewayGone, NotifyAPIKeyExpiring, NotifyDeviceOffline, NotifyCopilotNearLimit, NotifyCopilotExhausted}

// Notification channels.
const (
	ChannelConsole = "console"
	ChannelEmail   = "email"
)

// NotificationChannels are the channels a kind reaches a person on.
type NotificationChannels struct {
	Console bool `json:"console"`
	Email   bool `json:"email"`
}

// NotificationPreferences are one person's: the e-mail address the e-mail
// channel uses (empty: no e-mail) and, per kind, the channels switched on.
// A kind not listed has both channels on.
type NotificationPreferences struct {
	Email string                          `json:"email"`
	Kinds map[string]NotificationChannels `json:"kinds"`
}

// For returns the channels kind reaches the person on: both on unless the
// person switched one off, and e-mail only when an address is set.
func (p NotificationPreferences) For(kind string) NotificationChannels {
	c, ok := p.Kinds[kind]
	if !ok {
		c = NotificationChannels{Console: true, Email: true}
	}
	if p.Email == "" {
		c.Email = false
	}
	return c
}

// NotificationPreferencesChange is a PATCH of preferences: what it names
// changes, the rest stays.
type NotificationPreferencesChange struct {
	Email *string
	Kinds map[string]map[string]bool
}

// Apply returns p changed by c, or invalid_argument naming the field at fault.
func (p NotificationPreferences) Apply(c NotificationPreferencesChange) (NotificationPreferences, error) {
	out := NotificationPreferences{Email: p.Email, Kinds: map[string]NotificationChannels{}}
	for k, v := range p.Kinds {
		out.Kinds[k] = v
	}
	if c.Email != nil {
		addr := strings.TrimSpace(*c.Email)
		if addr != "" {
			a, err := mail.ParseAddress(addr)
			if err != nil || a.Name != "" || a.Address != addr || len(addr) > 254 {
				return p, Errorf(CodeInvalidArgument, "email must be a bare e-mail address (name@example.com), or empty for none").With("field", "email")
			}
		}
		out.Email = addr
	}
	kinds := make([]string, 0, len(c.Kinds))
	for k := range c.Kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		if !slices.Contains(NotificationKinds, k) {
			return p, Errorf(CodeInvalidArgument, "unknown notification kind %q; kinds are %s", k, strings.Join(NotificationKinds, ", ")).
				With("field", "kinds."+k)
		}
		cur, ok := out.Kinds[k]
		if !ok {
			cur = NotificationChannels{Console: true, Email: true}
		}
		for ch, on := range c.Kinds[k] {
			switch ch {
			case ChannelConsole:
				cur.Console = on
			case ChannelEmail:
				cur.Email = on
			default:
				return p, Errorf(CodeInvalidArgument, "unknown channel %q; channels are console and email", ch).
					With("field", "kinds."+k+"."+ch)
			}
		}
		out.Kinds[k] = cur
	}
	return out, nil
}

// notificationNamespace is the UUIDv5 namespace of trigger keys and
// notification ids. Never change it: every recorded id depends on it.
var notificationNamespace = uuid.MustParse("5d0b8c1e-7a3f-4e62-9c41-0f8e2b6d3a17")

// NotificationTriggerKey derives the key of the trigger an event is (the
// item the notification reaction claims): ntr_ and a UUIDv5 of the event
// id, so a rebuilt read model finds the same triggers.
func NotificationTriggerKey(eventID uuid.UUID) string {
	u := uuid.NewSHA1(notificationNamespace, []byte(eventID.String()))
	return "ntr_" + hex.EncodeToString(u[:])
}

// NotificationID derives the id of the notification a trigger raises for a
// person: the same on every attempt, so one trigger tells a person once.
func NotificationID(triggerKey, userID string) string {
	u := uuid.NewSHA1(notificationNamespace, []byte(triggerKey+"\x00"+userID))
	return PrefixNotification + "_" + hex.EncodeToString(u[:])
}

// NotificationTriggerStream is the stream of one trigger's fan-out attempts.
func NotificationTriggerStream(key string) string { return "notification-trigger-" + key }

// NotificationEmailStream is the stream of one notification's e-mail attempts.
func NotificationEmailStream(id string) string { return "notification-email-" + id }

// NotificationPersonID names one person of an organisation to
// notifications (the NotificationPerson aggregate's id).
func NotificationPersonID(orgID, userID string) string { return orgID + "/" + userID }

// NotificationPersonStream is one person's stream: who they are to
// notifications and their preferences.
func NotificationPersonStream(id string) string { return "notification-person-" + id }

// NotificationReadsStream is one person's reads of their notifications.
func NotificationReadsStream(orgID, userID string) string {
	return "notification-reads-" + NotificationPersonID(orgID, userID)
}

// NotificationPerson is one person of an organisation as notifications
// know them: their role when last seen and their preferences.
type NotificationPerson struct {
	OrgID, UserID string
	Known         bool
	Role          string
	Preferences   NotificationPreferences
}

// NewNotificationPerson is the state of a person not seen yet.
func NewNotificationPerson(id string) *NotificationPerson {
	org, user, _ := strings.Cut(id, "/")
	return &NotificationPerson{OrgID: org, UserID: user}
}

// Apply folds one event into the person.
func (p *NotificationPerson) Apply(e Event) {
	switch e := e.(type) {
	case NotificationPersonSeen:
		p.Known, p.Role = true, e.Role
	case NotificationPreferencesSet:
		p.Known, p.Role, p.Preferences = true, e.Role, e.NotificationPreferences
	}
}

// Seen records the person with role unless they are known with it.
func (p *NotificationPerson) Seen(role string, at time.Time) []Event {
	if p.Known && p.Role == role {
		return nil
	}
	return []Event{NotificationPersonSeen{UserID: p.UserID, Role: role, At: at}}
}

// SetPreferences applies a change of preferences made by the person
// holding role.
func (p *NotificationPerson) SetPreferences(role string, c NotificationPreferencesChange, at time.Time) ([]Event, error) {
	next, err := p.Preferences.Apply(c)
	if err != nil {
		return nil, err
	}
	return []Event{NotificationPreferencesSet{UserID: p.UserID, Role: role, NotificationPreferences: next, At: at}}, nil
}

// NotificationEmailKey is the idempotency key every e-mail of a
// notification carries (its Message-ID and X-Phonefleet-Idempotency-Key):
// the same on every attempt, so a receiver can tell a repeat.
func NotificationEmailKey(id string) string { return id + "@phonefleet" }

// NotificationRecipient is one person a trigger reaches and on which channels.
type NotificationRecipient struct {
	NotificationID string `json:"notificationId"`
	UserID         string `json:"userId"`
	Console        bool   `json:"console"`
	// Email is the address e-mailed; empty: no e-mail.
	Email string `json:"email,omitempty"`
}

// NotificationMessage is what a notification says.
type NotificationMessage struct {
	Kind  string `json:"kind"`
	Title string `json:"title"`
	Body  string `json:"body"`
	// Subject names what it is about: {"runId": …}, {"deviceId": …}, …
	Subject map[string]string `json:"subject"`
}

// The fan-out's retry gaps after attempts 1 to 5 (the recipients could
// not be read yet); then it gives up.
var NotificationRetryGaps = [...]time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute}

// NotificationsRaised records one attempt of a trigger's fan-out: the
// notifications raised (one per recipient, ids derived from the trigger),
// or why none could be yet and when it is tried again.
type NotificationsRaised struct {
	TriggerKey string `json:"triggerKey"`
	NotificationMessage
	Recipients    []NotificationRecipient `json:"recipients"`
	Attempt       int                     `json:"attempt"`
	Error         string                  `json:"error,omitempty"`
	NextAttemptAt *time.Time              `json:"nextAttemptAt,omitempty"`
	At            time.Time               `json:"at"`
}

// EventName implements Event.
func (NotificationsRaised) EventName() string { return "notification.raised" }

// DecideNotificationsRaised records attempt (1-based) of a trigger: the
// recipients found, or the error with its retry (given up after the last gap).
func DecideNotificationsRaised(key string, m NotificationMessage, attempt int, at time.Time, rs []NotificationRecipient, err error) NotificationsRaised {
	e := NotificationsRaised{TriggerKey: key, NotificationMessage: m, Recipients: rs, Attempt: attempt, At: at.UTC().Truncate(time.Microsecond)}
	if e.Recipients == nil {
		e.Recipients = []NotificationRecipient{}
	}
	if err != nil {
		e.Recipients = []NotificationRecipient{}
		e.Error = err.Error()
		if attempt <= len(NotificationRetryGaps) {
			next := e.At.Add(NotificationRetryGaps[attempt-1])
			e.NextAttemptAt = &next
		}
	}
	return e
}

// E-mail attempt outcomes.
const (
	// EmailSent: the SMTP server accepted the message.
	EmailSent = "sent"
	// EmailUnconfirmed: an earlier try of this attempt sent the whole
	// message but its instance died before the answer was recorded; it is
	// not sent again (never twice), and counts as sent.
	EmailUnconfirmed = "unconfirmed"
	// EmailRetrying: the server was unreachable or answered 4xx.
	EmailRetrying = "retrying"
	// EmailFailed: the server refused it (5xx) or every retry failed.
	EmailFailed = "failed"
)

// EmailRetryGaps are the gaps after e-mail attempts 1 to 5.
var EmailRetryGaps = [...]time.Duration{10 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour}

// EmailResult is what one SMTP attempt came to.
type EmailResult struct {
	// Unconfirmed: the message was sent by an earlier try of this attempt.
	Unconfirmed bool
	// Temporary: no answer, or a 4xx; Permanent: a 5xx.
	Temporary, Permanent bool
	Error                string
}

// NotificationEmailAttempted records one e-mail attempt of a notification.
type NotificationEmailAttempted struct {
	NotificationID string     `json:"notificationId"`
	UserID         string     `json:"userId"`
	Attempt        int        `json:"attempt"`
	Outcome        string     `json:"outcome"`
	IdempotencyKey string     `json:"idempotencyKey"`
	Error          string     `json:"error,omitempty"`
	NextAttemptAt  *time.Time `json:"nextAttemptAt,omitempty"`
	At             time.Time  `json:"at"`
}

// EventName implements Event.
func (NotificationEmailAttempted) EventName() string { return "notification.email_attempted" }

// DecideEmailAttempt records attempt (1-based) of notification id's e-mail.
func DecideEmailAttempt(id, userID string, attempt int, at time.Time, r EmailResult) NotificationEmailAttempted {
	e := NotificationEmailAttempted{NotificationID: id, UserID: userID, Attempt: attempt,
		IdempotencyKey: NotificationEmailKey(id), Error: r.Error, At: at.UTC().Truncate(time.Microsecond)}
	switch {
	case r.Unconfirmed:
		e.Outcome = EmailUnconfirmed
	case r.Permanent:
		e.Outcome = EmailFailed
	case r.Temporary && attempt > len(EmailRetryGaps):
		e.Outcome = EmailFailed
	case r.Temporary:
		e.Outcome = EmailRetrying
		next := e.At.Add(EmailRetryGaps[attempt-1])
		e.NextAttemptAt = &next
	default:
		e.Outcome = EmailSent
	}
	return e
}

// NotificationsRead records that a person read notifications: those named
// (IDs), or every one of theirs raised before the cursor (Before, BeforeID)
// — all of them when the cursor is zero and no id is named.
type NotificationsRead struct {
	UserID   string     `json:"userId"`
	IDs      []string   `json:"ids,omitempty"`
	Before   *time.Time `json:"before,omitempty"`
	BeforeID string     `json:"beforeId,omitempty"`
	At       time.Time  `json:"at"`
}

// EventName implements Event.
func (NotificationsRead) EventName() string { return "notification.read" }

// NotificationPreferencesSet records a person's preferences as they now stand.
type NotificationPreferencesSet struct {
	UserID string `json:"userId"`
	Role   string `json:"role"`
	NotificationPreferences
	At time.Time `json:"at"`
}

// EventName implements Event.
func (NotificationPreferencesSet) EventName() string { return "notification.preferences_set" }

// NotificationPersonSeen records a person of the organisation and their
// role, from their first visit to their notifications (and again when the
// role changes): whom "every admin" means.
type NotificationPersonSeen struct {
	UserID string    `json:"userId"`
	Role   string    `json:"role"`
	At     time.Time `json:"at"`
}

// EventName implements Event.
func (NotificationPersonSeen) EventName() string { return "notification.person_seen" }

// Key expiry notice thresholds.
const (
	KeyExpiryWeek = "week"
	KeyExpiryDay  = "day"
)

// KeyExpiryThreshold returns the notice a key expiring at expires is due
// at now ("day" within a day, "week" within a week, "" otherwise or once
// expired).
func KeyExpiryThreshold(expires, now time.Time) string {
	left := expires.Sub(now)
	switch {
	case left <= 0:
		return ""
	case left <= 24*time.Hour:
		return KeyExpiryDay
	case left <= 7*24*time.Hour:
		return KeyExpiryWeek
	}
	return ""
}

// APIKeyExpiryNoticeStream is the stream of one notice: one per key,
// expiry and threshold, so a notice is raised once and a renewed key is
// told again before its new expiry.
func APIKeyExpiryNoticeStream(keyID string, expires time.Time, threshold string) string {
	return fmt.Sprintf("notification-key-expiry-%s-%d-%s", keyID, expires.UTC().UnixMicro(), threshold)
}

// APIKeyExpiryNoticeDue records that a key's minter is owed a notice (the
// key-expiry sweep raises it; the notification reaction tells them).
type APIKeyExpiryNoticeDue struct {
	KeyID     string    `json:"keyId"`
	Name      string    `json:"name"`
	MintedBy  string    `json:"mintedBy"`
	ExpiresAt time.Time `json:"expiresAt"`
	Threshold string    `json:"threshold"`
	At        time.Time `json:"at"`
}

// EventName implements Event.
func (APIKeyExpiryNoticeDue) EventName() string { return "notification.api_key_expiry_due" }

// NotificationMessageFor says what a trigger of kind with its facts tells
// a person. Subject keeps the ids a client links to.
func NotificationMessageFor(kind string, f map[string]string) NotificationMessage {
	m := NotificationMessage{Kind: kind, Subject: map[string]string{}}
	for _, k := range []string{"runId", "agentRunId", "deviceId", "gatewayId", "keyId", "followupId", "fulfilmentId", "threadId", "period"} {
		if f[k] != "" {
			m.Subject[k] = f[k]
		}
	}
	switch kind {
	case NotifyRunNeedsUser:
		m.Title = "A run needs you"
		m.Body = fmt.Sprintf("Run %s on device %s is waiting for a person: %s (goal: %s).", f["runId"], f["deviceId"], f["reason"], f["goal"])
	case NotifyRunEnded:
		m.Title = "Run " + f["state"]
		m.Body = fmt.Sprintf("Run %s on device %s ended %s (goal: %s).", f["runId"], f["deviceId"], f["state"], f["goal"])
		if f["reason"] != "" {
			m.Body += " Reason: " + f["reason"] + "."
		}
	case NotifyPaymentFollowupFailed:
		m.Title = "A payment follow-up needs an admin"
		what := "the subscription could not be cancelled"
		if f["action"] == FollowupRefund {
			what = fmt.Sprintf("%s %s could not be refunded", f["amount"], strings.ToUpper(f["currency"]))
		}
		m.Body = fmt.Sprintf("For fulfilment %s, %s: the payment provider %s (%s). Settle it with the provider by hand.",
			f["fulfilmentId"], what, map[string]string{FollowupRefused: "refused", FollowupGaveUp: "stayed unavailable"}[f["outcome"]], f["error"])
	case NotifyGatewayGone:
		m.Title = "A gateway is gone"
		m.Body = fmt.Sprintf("Gateway %s lost its connection (%s); its phones are unreachable until it reconnects.", f["gatewayId"], f["reason"])
	case NotifyAPIKeyExpiring:
		left := "a week"
		if f["threshold"] == KeyExpiryDay {
			left = "a day"
		}
		m.Title = "An API key expires within " + left
		m.Body = fmt.Sprintf("API key %q (%s) expires at %s. Renew or rotate it before then.", f["name"], f["keyId"], f["expiresAt"])
	case NotifyDeviceOffline:
		m.Title = "A device went offline"
		m.Body = fmt.Sprintf("Device %s went offline (%s).", f["deviceId"], f["state"])
	case NotifyCopilotNearLimit:
		m.Title = "The copilot allowance is almost spent"
		m.Body = fmt.Sprintf("The organisation's copilot has used %s of its %s tokens for the billing month starting %s. "+
			"Once they are spent it answers direct commands only until the next month.", f["used"], f["included"], f["period"])
	case NotifyCopilotExhausted:
		m.Title = "The copilot allowance is spent"
		m.Body = fmt.Sprintf("The organisation's copilot has used %s of its %s tokens for the billing month starting %s. "+
			"Until the next month it answers direct commands only, without the model.", f["used"], f["included"], f["period"])
	}
	return m
}

// CopilotAllowanceCrossed says which notification, if any, one answer of
// the copilot's model raises: before and after are the organisation's
// allowance without and with that answer's tokens (the same period and
// inclusion). It is NotifyCopilotExhausted when the answer spent the
// allowance, NotifyCopilotNearLimit when it took it past four fifths
// without spending it, "" otherwise and always on an unmetered deployment.
// An answer that goes from under four fifths to spent raises only the
// exhausted one.
func CopilotAllowanceCrossed(before, after CopilotAllowance) string {
	if !before.Metered || !after.Metered {
		return ""
	}
	switch {
	case after.Exhausted && !before.Exhausted:
		return NotifyCopilotExhausted
	case after.NearLimit && !before.NearLimit && !before.Exhausted:
		return NotifyCopilotNearLimit
	}
	return ""
}

// CopilotAllowanceNoticeKey names one organisation's notice of kind in
// billing period p: the notifications it raises take their ids from it
// (NotificationID), not from the trigger, so one person is told at most
// once per organisation, period and kind.
func CopilotAllowanceNoticeKey(orgID string, p BillingPeriod, kind string) string {
	return "copilot-allowance/" + orgID + "/" + p.Name() + "/" + kind
}
