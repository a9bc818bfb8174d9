package vrx

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"phonefleet/domain"
	"phonefleet/http/kernel"
)

// TestEveryCodeTranslatesToOneOfTheTen proves the map is total: every code
// of the closed set, the ten included, answers one of the ten, except
// payload_too_large, which keeps the answer it has on every surface.
func TestEveryCodeTranslatesToOneOfTheTen(t *testing.T) {
	for _, c := range slices.Concat(domain.RESTCodes, domain.VrxCodes) {
		if c == domain.CodePayloadTooLarge {
			continue
		}
		t.Run(string(c), func(t *testing.T) {
			if _, ok := codeOf[c]; !ok && !vrxCodes[c] {
				t.Errorf("code %s is not in the map", c)
			}
			got, msg := translate(domain.Errorf(c, "something about %s", c))
			if !slices.Contains(domain.VrxCodes, got) {
				t.Errorf("got %s; want one of the ten", got)
			}
			if msg == "" {
				t.Error("got an empty message")
			}
			if kernel.StatusOf(got) == http.StatusInternalServerError {
				t.Errorf("got %s with status 500; every device-surface code has its own status", got)
			}
		})
	}
	for _, c := range domain.VrxCodes {
		if got, _ := translate(domain.Errorf(c, "x")); got != c {
			t.Errorf("got %s for %s; want it unchanged", got, c)
		}
	}
}

func TestTranslate(t *testing.T) {
	retryable := func(e *domain.Error, r bool) *domain.Error { return e.WithRetryable(r) }
	reason := func(c domain.Code, r string) *domain.Error { return domain.Errorf(c, "m").With("reason", r) }
	tests := []struct {
		name    string
		err     *domain.Error
		want    domain.Code
		message string // "" means the error's own
	}{
		{"refused token", domain.ErrDeviceNotFound(""), domain.VrxDeviceNotFound, deviceNotFoundMessage},
		{"device gone", domain.ErrDeviceNotFound("dev_1"), domain.VrxDeviceNotFound, deviceNotFoundMessage},
		{"run not found", domain.ErrRunNotFound("run_1"), domain.VrxDeviceNotFound, deviceNotFoundMessage},
		{"permission denied", domain.Errorf(domain.CodePermissionDenied, "needs devices:act"), domain.VrxDeviceNotFound, deviceNotFoundMessage},
		{"unauthorized", domain.Errorf(domain.CodeUnauthorized, "no"), domain.VrxDeviceNotFound, deviceNotFoundMessage},
		{"device offline", reason(domain.CodeDeviceUnavailable, domain.ReasonOffline), domain.VrxHardwareOffline, ""},
		{"device asleep", reason(domain.CodeDeviceUnavailable, domain.ReasonAsleep), domain.VrxHardwareOffline, ""},
		{"run parked", reason(domain.CodeDeviceUnavailable, "run_awaiting_user"), domain.VrxFencingTokenStale, ""},
		{"run paused", reason(domain.CodeDeviceUnavailable, "run_paused"), domain.VrxHardwareOffline, ""},
		{"device leased by another", reason(domain.CodeDeviceUnavailable, domain.ReasonAlreadyLeased), domain.VrxFencingTokenStale, ""},
		{"device disconnected", domain.Errorf(domain.CodeDeviceDisconnected, "m"), domain.VrxHardwareOffline, ""},
		{"device busy", domain.Errorf(domain.CodeDeviceBusy, "m"), domain.VrxHardwareOffline, ""},
		{"backend command failed", domain.Errorf(domain.CodeBackendCommandFailed, "m"), domain.VrxHardwareOffline, ""},
		{"lease mismatch", domain.Errorf(domain.CodeLeaseMismatch, "m"), domain.VrxFencingTokenStale, ""},
		{"lease required", domain.Errorf(domain.CodeLeaseRequired, "m"), domain.VrxFencingTokenStale, ""},
		{"bad argument", domain.Errorf(domain.CodeInvalidArgument, "m"), domain.VrxInvalidAction, ""},
		{"point off the screen", reason(domain.CodeInvalidArgument, "out_of_bounds"), domain.VrxCoordinateOutOfReach, ""},
		{"element gone", reason(domain.CodeInvalidArgument, "element_not_found"), domain.VrxActionUnavailable, ""},
		{"app missing", reason(domain.CodeInvalidArgument, "app_not_installed"), domain.VrxActionUnavailable, ""},
		{"unknown reason keeps the code's", reason(domain.CodeInvalidArgument, "something_else"), domain.VrxInvalidAction, ""},
		{"capability unsupported", domain.Errorf(domain.CodeCapabilityUnsupported, "m"), domain.VrxActionUnavailable, ""},
		{"backend not implemented", domain.Errorf(domain.CodeBackendNotImplemented, "m"), domain.VrxActionUnavailable, ""},
		{"stale frame", domain.Errorf(domain.CodeStaleFrame, "m"), domain.VrxStaleFrame, ""},
		{"frame of another device", reason(domain.CodeStaleFrame, "other_device"), domain.VrxFrameViewportMismatch, ""},
		{"frame not found", domain.Errorf(domain.CodeFrameNotFound, "m"), domain.VrxFrameUnavailable, ""},
		{"outcome unknown", domain.Errorf(domain.CodeActionOutcomeUnknown, "m"), domain.VrxActionOutcomeUnknown, ""},
		{"key reused for another action", retryable(domain.Errorf(domain.CodeIdempotencyConflict, "m"), false), domain.VrxInvalidAction, ""},
		{"key in flight", retryable(domain.Errorf(domain.CodeIdempotencyConflict, "m"), true), domain.VrxHardwareOffline, ""},
		{"wrong state", domain.Errorf(domain.CodeWrongState, "m"), domain.VrxInvalidAction, ""},
		{"service unavailable", domain.Errorf(domain.CodeServiceUnavailable, "m"), domain.VrxHardwareOffline, ""},
		{"internal error", domain.Errorf(domain.CodeInternal, "pq: relation runs does not exist"), domain.VrxHardwareOffline, internalMessage},
		{"unknown code", domain.Errorf(domain.Code("made_up"), "secret detail"), domain.VrxHardwareOffline, internalMessage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, msg := translate(tt.err)
			if got != tt.want {
				t.Errorf("got %s; want %s", got, tt.want)
			}
			want := tt.message
			if want == "" {
				want = tt.err.Message
			}
			if msg != want {
				t.Errorf("got message %q; want %q", msg, want)
			}
		})
	}
}

// TestWriteError checks the rendered answers: the envelope and nothing
// else, the status of the code, Retry-After from retryAfterMs, and the
// internal text of a server fault never shown.
func TestWriteError(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		status     int
		body       string
		retryAfter string
	}{
		{"refused token", domain.ErrDeviceNotFound("dev_123"), 404,
			`{"ok":false,"error":{"code":"DEVICE_NOT_FOUND","message":"no device is available to this run token"}}`, ""},
		{"stale frame with extras", domain.Errorf(domain.CodeStaleFrame, "the screen changed").With("frameId", "frm_1").WithRetryable(false), 409,
			`{"ok":false,"error":{"code":"STALE_FRAME","message":"the screen changed"}}`, ""},
		{"bad argument", domain.Errorf(domain.CodeInvalidArgument, `action must be "tap"`), 400,
			`{"ok":false,"error":{"code":"INVALID_ACTION","message":"action must be \"tap\""}}`, ""},
		{"busy device", domain.Errorf(domain.CodeDeviceBusy, "too many actions").With("retryAfterMs", 1500), 503,
			`{"ok":false,"error":{"code":"HARDWARE_OFFLINE","message":"too many actions"}}`, "2"},
		{"plain Go error", errors.New("dial tcp: refused"), 503,
			`{"ok":false,"error":{"code":"HARDWARE_OFFLINE","message":"internal error"}}`, ""},
		{"wrapped domain error", fmt.Errorf("act: %w", domain.Errorf(domain.CodeActionOutcomeUnknown, "no outcome")), 504,
			`{"ok":false,"error":{"code":"ACTION_OUTCOME_UNKNOWN","message":"no outcome"}}`, ""},
		{"unprocessable", domain.Errorf(domain.CodeCapabilityUnsupported, "a sim phone cannot install_app"), 422,
			`{"ok":false,"error":{"code":"ACTION_UNAVAILABLE","message":"a sim phone cannot install_app"}}`, ""},
		{"frame", domain.Errorf(domain.CodeFrameNotFound, "no frame frm_1 is readable"), 404,
			`{"ok":false,"error":{"code":"FRAME_UNAVAILABLE","message":"no frame frm_1 is readable"}}`, ""},
		{"payload too large keeps the answer of every surface", kernel.PayloadTooLarge(1 << 20), 413,
			`{"error":{"code":"payload_too_large","message":"request body exceeds the limit of 1048576 bytes"}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			WriteError(rec, httptest.NewRequest(http.MethodGet, "/vrx/x/v1/run", nil), tt.err)
			if rec.Code != tt.status {
				t.Errorf("got status %d; want %d", rec.Code, tt.status)
			}
			if got := rec.Body.String(); got != tt.body {
				t.Errorf("got body %s; want %s", got, tt.body)
			}
			if got := rec.Header().Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("got Retry-After %q; want %q", got, tt.retryAfter)
			}
			if got := rec.Header().Get("Content-Type"); got != "application/json" {
				t.Errorf("got Content-Type %q; want application/json", got)
			}
		})
	}
}
