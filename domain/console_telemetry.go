package domain

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// PrefixConsoleEvent is the type prefix of a console telemetry event's id.
const PrefixConsoleEvent = "cev"

// Bounds of the console's telemetry (POST /v1/console/events).
const (
	// MaxConsoleEventsPerBatch bounds one request's events.
	MaxConsoleEventsPerBatch = 20
	// ConsoleEventsPerMinute is each person's budget of events per
	// minute (a fixed window, as the request rate limit's).
	ConsoleEventsPerMinute = 60
	// MaxConsolePageRunes bounds an event's page.
	MaxConsolePageRunes = 200
	// MaxConsoleMessageRunes bounds an event's message.
	MaxConsoleMessageRunes = 1000
	// MaxConsoleUserAgentRunes is where the browser's User-Agent is
	// clipped (it is a header, not the page's words: clipped, not
	// refused).
	MaxConsoleUserAgentRunes = 300
)

// ConsoleTelemetryWindow returns the start of the budget window (the UTC
// minute) holding t.
func ConsoleTelemetryWindow(t time.Time) time.Time { return t.UTC().Truncate(time.Minute) }

// ConsoleTelemetryStream returns the stream of by's console events of
// organisation orgID in the window starting at window: its length is what
// by spent of that minute's budget, so the budget holds across instances
// by the stream's expected version, and each stream stays short.
func ConsoleTelemetryStream(orgID string, by Actor, window time.Time) string {
	return fmt.Sprintf("console-telemetry-%s-%s-%s:%s", window.UTC().Format("200601021504"), orgID, by.Kind, by.ID)
}

// ConsoleEventInput is one telemetry event as a page sends it.
type ConsoleEventInput struct {
	Type    string
	Page    string
	Message string
	// At is when the page says it happened; nil when it does not say.
	At *time.Time
}

// CheckConsoleBatch checks a batch a page sends: 1 to
// MaxConsoleEventsPerBatch events, each of a known type, naming its page
// (at most MaxConsolePageRunes characters, no control characters), with a
// message of at most MaxConsoleMessageRunes characters. A refusal is
// invalid_argument naming the field (events[2].page).
func CheckConsoleBatch(items []ConsoleEventInput) error {
	if len(items) == 0 || len(items) > MaxConsoleEventsPerBatch {
		return Errorf(CodeInvalidArgument, "events must hold 1 to %d events", MaxConsoleEventsPerBatch).With("field", "events")
	}
	for i, it := range items {
		field := func(name string) string { return fmt.Sprintf("events[%d].%s", i, name) }
		switch it.Type {
		case ConsolePageView, ConsoleClientError:
		default:
			return Errorf(CodeInvalidArgument, "%s must be %s or %s", field("type"), ConsolePageView, ConsoleClientError).With("field", field("type"))
		}
		if strings.TrimSpace(it.Page) == "" || !utf8.ValidString(it.Page) || utf8.RuneCountInString(it.Page) > MaxConsolePageRunes ||
			strings.IndexFunc(it.Page, unicode.IsControl) >= 0 {
			return Errorf(CodeInvalidArgument, "%s must be text of 1 to %d characters without control characters", field("page"), MaxConsolePageRunes).
				With("field", field("page"))
		}
		if !utf8.ValidString(it.Message) || utf8.RuneCountInString(it.Message) > MaxConsoleMessageRunes {
			return Errorf(CodeInvalidArgument, "%s must be text of at most %d characters", field("message"), MaxConsoleMessageRunes).
				With("field", field("message"))
		}
	}
	return nil
}

// ClipUserAgent keeps a User-Agent header within MaxConsoleUserAgentRunes
// printable characters.
func ClipUserAgent(ua string) string {
	ua = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return -1
		}
		return r
	}, ua)
	if utf8.RuneCountInString(ua) <= MaxConsoleUserAgentRunes {
		return ua
	}
	return string([]rune(ua)[:MaxConsoleUserAgentRunes])
}

// ConsoleTelemetry is the aggregate of one person's console events in one
// minute (ConsoleTelemetryStream): how much of the minute's budget they
// spent.
type ConsoleTelemetry struct {
	OrgID string
	Count int
}

// Apply changes the window's state by one recorded event of its stream.
func (w *ConsoleTelemetry) Apply(e Event) {
	if e, ok := e.(ConsoleEventRecorded); ok {
		w.OrgID = e.OrgID
		w.Count++
	}
}

// Record decides the events recording items, sent at now by a's page
// (a signed-in session: permission_denied otherwise) with User-Agent
// userAgent, under the ids ids (one per item). A batch that does not fit
// in what is left of a's budget for the minute is refused whole with
// rate_limited, whose retryAfterMs runs to the end of the minute.
func (w *ConsoleTelemetry) Record(a Auth, items []ConsoleEventInput, ids []string, userAgent string, now time.Time) ([]Event, error) {
	if err := a.RequireSession("console telemetry"); err != nil {
		return nil, err
	}
	if err := CheckConsoleBatch(items); err != nil {
		return nil, err
	}
	if len(ids) != len(items) {
		return nil, fmt.Errorf("record console events: %d ids for %d events", len(ids), len(items))
	}
	if w.Count+len(items) > ConsoleEventsPerMinute {
		wait := ConsoleTelemetryWindow(now).Add(time.Minute).Sub(now)
		ms := max(int64(1), (wait.Nanoseconds()+int64(time.Millisecond)-1)/int64(time.Millisecond))
		return nil, Errorf(CodeRateLimited, "too many console events this minute; wait as Retry-After says").
			With("retryAfterMs", ms).WithRetryable(true)
	}
	by := ActorOf(a)
	ua := ClipUserAgent(userAgent)
	out := make([]Event, len(items))
	for i, it := range items {
		var at *time.Time
		if it.At != nil {
			t := it.At.UTC()
			at = &t
		}
		out[i] = ConsoleEventRecorded{EventID: ids[i], OrgID: a.OrgID, Type: it.Type, Page: strings.TrimSpace(it.Page),
			Message: it.Message, UserAgent: ua, ClientAt: at, ReceivedAt: now, By: by}
	}
	return out, nil
}
