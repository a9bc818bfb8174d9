package domain

import "time"

// consoleEvents are the events of the console's own telemetry (POST
// /v1/console/events): one stream per person per minute
// (ConsoleTelemetryStream), whose length is the person's use of the
// minute's budget.
var consoleEvents = []EventDef{
	Def[ConsoleEventRecorded](1, nil),
}

// Console telemetry event types.
const (
	// ConsolePageView is a page of the console being shown.
	ConsolePageView = "page_view"
	// ConsoleClientError is an error the page caught (an exception, a
	// rejected promise).
	ConsoleClientError = "client_error"
)

// ConsoleEventRecorded records one telemetry event a console page sent.
// Everything but ReceivedAt and By is what the page said, checked for
// shape and length only.
type ConsoleEventRecorded struct {
	EventID string `json:"eventId"`
	OrgID   string `json:"orgId"`
	// Type is ConsolePageView or ConsoleClientError.
	Type string `json:"type"`
	// Page is the console route the event happened on (#/devices/:id).
	Page    string `json:"page"`
	Message string `json:"message,omitempty"`
	// UserAgent is the browser's User-Agent header, clipped.
	UserAgent string `json:"userAgent,omitempty"`
	// ClientAt is when the page says it happened (its own clock); nil
	// when it did not say.
	ClientAt   *time.Time `json:"clientAt,omitempty"`
	ReceivedAt time.Time  `json:"receivedAt"`
	// By is the signed-in person whose page sent it.
	By Actor `json:"by"`
}

// EventName implements Event.
func (ConsoleEventRecorded) EventName() string { return "console.event_recorded" }
