package fleet

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
)

// WaitFor waits, for a bounded time, until a device's screen shows an
// element, stops showing it, or stops changing (POST
// /v1/devices/{deviceId}/wait, the wait_for tool). It saves an agent the
// loop of observing again and again after an action whose effect takes a
// moment (an app starting, a page loading, a toast going away).
type WaitFor struct {
	Auth     domain.Auth
	DeviceID string
	WaitCondition
}

// WaitCondition is what to wait for.
type WaitCondition struct {
	// Until is WaitAppears (the default), WaitDisappears or WaitStable.
	Until string
	// Text names the element by what it says: an element on screen whose
	// text or content description contains Text (case-sensitive).
	Text string
	// ResourceID names the element by its resource id, whole
	// ("com.example.notes:id/save") or without its package ("save").
	// With Text too, one element must match both.
	ResourceID string
	// StableMs is, for WaitStable, how long the screen must stay unchanged
	// (0 means DefaultStableMs).
	StableMs int
	// TimeoutMs bounds the wait (0 means DefaultWaitTimeoutMs; at most
	// MaxWaitTimeoutMs).
	TimeoutMs int
}

// What a wait can wait for.
const (
	WaitAppears    = "appears"
	WaitDisappears = "disappears"
	WaitStable     = "stable"
)

// Bounds of a wait, in milliseconds.
const (
	DefaultWaitTimeoutMs = 10_000
	MaxWaitTimeoutMs     = 30_000
	DefaultStableMs      = 1_000
	MinStableMs          = 100
	MaxStableMs          = 10_000
	// maxWaitMatch bounds Text and ResourceID, in bytes.
	maxWaitMatch = 200
)

// WaitPoll is how often a wait observes the screen.
const WaitPoll = 200 * time.Millisecond

// WaitResult is a wait's answer: whether the condition held, and the last
// frame the wait saw (the one it held on, when it did), which an action can
// name as observedFrame. It is the same JSON on REST and MCP
// (http/openapi/wait.yaml, WaitResult).
type WaitResult struct {
	DeviceID string `json:"deviceId"`
	Until    string `json:"until"`
	// Met is false when the timeout passed first; that is an answer, not
	// an error.
	Met bool `json:"met"`
	// ElapsedMs is the time from the first observation to the last.
	ElapsedMs int64 `json:"elapsedMs"`
	// Observations counts the looks at the screen.
	Observations int       `json:"observations"`
	FrameID      string    `json:"frameId"`
	ScreenHash   string    `json:"screenHash"`
	CapturedAt   time.Time `json:"capturedAt"`
	// Element is, when an element appeared, the element found (the first
	// in drawing order).
	Element *WaitElement `json:"element,omitempty"`
}

// WaitElement is the element an appears-wait found, named as the UI
// snapshot names it.
type WaitElement struct {
	Ref         string `json:"ref"`
	Class       string `json:"class,omitempty"`
	ResourceID  string `json:"resourceId,omitempty"`
	Text        string `json:"text,omitempty"`
	ContentDesc string `json:"contentDesc,omitempty"`
	Bounds      [4]int `json:"bounds"`
}

// WaitForHandler handles WaitFor. It waits by observing through Observe
// (so every look is an observation like any other: scope, tenancy and the
// device's frames apply) every Poll, reading time from Now and pausing with
// Sleep, which tests replace to run a wait without wall-clock time.
type WaitForHandler struct {
	Observe cqrs.Handles[ObserveDevice, Observation]
	Now     func() time.Time
	// Sleep pauses for d or until ctx ends (then it returns ctx's error).
	Sleep func(ctx context.Context, d time.Duration) error
	Poll  time.Duration
}

// WaitFor returns the handler of WaitFor.
func (f *Fleet) WaitFor() WaitForHandler {
	return WaitForHandler{Observe: f.ObserveDevice(), Now: f.now, Sleep: sleep, Poll: WaitPoll}
}

// sleep pauses for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Handle observes the device until the condition holds or the timeout
// passes, and answers the last frame seen either way. It needs
// devices:read. Errors: permission_denied, invalid_argument (a condition
// that names nothing, or cannot hold within the timeout), and every error
// of ObserveDevice (device_unavailable, capability_unsupported, …).
func (h WaitForHandler) Handle(ctx context.Context, cmd WaitFor) (WaitResult, error) {
	if err := cmd.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return WaitResult{}, err
	}
	c, err := cmd.WaitCondition.normalize()
	if err != nil {
		return WaitResult{}, err
	}
	timeout := time.Duration(c.TimeoutMs) * time.Millisecond
	stable := time.Duration(c.StableMs) * time.Millisecond
	res := WaitResult{DeviceID: cmd.DeviceID, Until: c.Until}
	var start, since time.Time
	var lastHash string
	for {
		obs, err := h.Observe.Handle(ctx, ObserveDevice{Auth: cmd.Auth, DeviceID: cmd.DeviceID, Snapshot: true})
		if err != nil {
			return WaitResult{}, err
		}
		now := h.Now()
		if res.Observations == 0 {
			start = now
		}
		res.Observations++
		res.DeviceID, res.FrameID, res.ScreenHash, res.CapturedAt = obs.DeviceID, obs.Frame.FrameID, obs.Frame.ScreenHash, obs.Frame.CapturedAt
		res.ElapsedMs = now.Sub(start).Milliseconds()
		switch c.Until {
		case WaitStable:
			if res.Observations == 1 || obs.Frame.ScreenHash != lastHash {
				lastHash, since = obs.Frame.ScreenHash, now
			}
			res.Met = now.Sub(since) >= stable
		default:
			el, found, err := c.find(obs)
			if err != nil {
				return WaitResult{}, err
			}
			res.Met = found == (c.Until == WaitAppears)
			if res.Met && found {
				res.Element = el
			}
		}
		if res.Met {
			return res, nil
		}
		left := timeout - now.Sub(start)
		if left <= 0 {
			return res, nil
		}
		if err := h.Sleep(ctx, min(h.Poll, left)); err != nil {
			return WaitResult{}, err
		}
	}
}

// normalize applies the defaults and checks the condition.
func (c WaitCondition) normalize() (WaitCondition, error) {
	if c.Until == "" {
		c.Until = WaitAppears
	}
	if c.TimeoutMs == 0 {
		c.TimeoutMs = DefaultWaitTimeoutMs
	}
	if c.TimeoutMs < 0 || c.TimeoutMs > MaxWaitTimeoutMs {
		return c, domain.Errorf(domain.CodeInvalidArgument, "timeoutMs must be 1 to %d", MaxWaitTimeoutMs)
	}
	if len(c.Text) > maxWaitMatch || len(c.ResourceID) > maxWaitMatch {
		return c, domain.Errorf(domain.CodeInvalidArgument, "text and resourceId must be at most %d bytes", maxWaitMatch)
	}
	switch c.Until {
	case WaitAppears, WaitDisappears:
		if c.Text == "" && c.ResourceID == "" {
			return c, domain.Errorf(domain.CodeInvalidArgument, "waiting until an element %s needs text or resourceId", c.Until)
		}
		if c.StableMs != 0 {
			return c, domain.Errorf(domain.CodeInvalidArgument, "stableMs applies only to until stable")
		}
	case WaitStable:
		if c.Text != "" || c.ResourceID != "" {
			return c, domain.Errorf(domain.CodeInvalidArgument, "until stable waits for the whole screen; it takes no text or resourceId")
		}
		if c.StableMs == 0 {
			c.StableMs = DefaultStableMs
		}
		if c.StableMs < MinStableMs || c.StableMs > MaxStableMs {
			return c, domain.Errorf(domain.CodeInvalidArgument, "stableMs must be %d to %d", MinStableMs, MaxStableMs)
		}
		if c.StableMs >= c.TimeoutMs {
			return c, domain.Errorf(domain.CodeInvalidArgument, "stableMs must be less than timeoutMs, or the screen can never be seen still for that long")
		}
	default:
		return c, domain.Errorf(domain.CodeInvalidArgument, "until must be appears, disappears or stable")
	}
	return c, nil
}

// find returns the first element on the observed screen, in drawing order,
// that matches the condition.
func (c WaitCondition) find(obs Observation) (*WaitElement, bool, error) {
	if len(obs.Snapshot) == 0 {
		return nil, false, nil
	}
	var root domain.UIElement
	if err := json.Unmarshal(obs.Snapshot, &root); err != nil {
		return nil, false, domain.Errorf(domain.CodeInternal, "the UI snapshot could not be read").Wrap(err)
	}
	var found *WaitElement
	var walk func(e *domain.UIElement)
	walk = func(e *domain.UIElement) {
		if found != nil {
			return
		}
		if c.matches(e) && onScreen(e.Bounds, obs.Width, obs.Height) {
			found = &WaitElement{Ref: e.Ref, Class: e.Class, ResourceID: e.ResourceID, Text: e.Text, ContentDesc: e.ContentDesc, Bounds: e.Bounds}
			return
		}
		for i := range e.Children {
			walk(&e.Children[i])
		}
	}
	walk(&root)
	return found, found != nil, nil
}

// matches reports whether e is the element the condition names.
func (c WaitCondition) matches(e *domain.UIElement) bool {
	if c.Text != "" && !strings.Contains(e.Text, c.Text) && !strings.Contains(e.ContentDesc, c.Text) {
		return false
	}
	if c.ResourceID != "" && e.ResourceID != c.ResourceID && !strings.HasSuffix(e.ResourceID, ":id/"+c.ResourceID) {
		return false
	}
	return true
}

// onScreen reports whether bounds enclose a pixel of the w×h screen (an
// unknown screen size admits any non-empty bounds): an element scrolled
// out of view has not appeared.
func onScreen(b [4]int, w, h int) bool {
	if b[0] >= b[2] || b[1] >= b[3] {
		return false
	}
	if w <= 0 || h <= 0 {
		return true
	}
	return b[2] > 0 && b[3] > 0 && b[0] < w && b[1] < h
}
