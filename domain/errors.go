// Package domain holds phonefleet's core vocabulary: error codes, identifiers,
// event types and aggregates. It imports no database, HTTP or MCP package.
package domain

import (
	"errors"
	"fmt"
	"maps"
)

// Code is one member of the closed set of error codes the service answers with.
// Adding a code is additive; changing or removing one is a breaking change.
type Code string

// The 44 control-surface codes (spec 7.2). The comment after each names the
// surfaces that may emit it.
const (
	CodeBackendResolutionFailed   Code = "backend_resolution_failed"         // MCP, REST
	CodeBackendNotImplemented     Code = "backend_not_implemented"           // MCP, REST
	CodeDeviceUnavailable         Code = "device_unavailable"                // MCP, REST
	CodeDeviceDisconnected        Code = "device_disconnected"               // MCP, REST
	CodeLeaseMismatch             Code = "lease_mismatch"                    // MCP, REST
	CodeLeaseRequired             Code = "lease_required"                    // MCP, REST
	CodeCapabilityUnsupported     Code = "capability_unsupported"            // MCP, REST
	CodeInvalidArgument           Code = "invalid_argument"                  // MCP, REST
	CodeBackendCommandFailed      Code = "backend_command_failed"            // MCP, REST
	CodeIdempotencyConflict       Code = "idempotency_conflict"              // MCP, REST
	CodeActionOutcomeUnknown      Code = "action_outcome_unknown"            // MCP, REST
	CodeStaleFrame                Code = "stale_frame"                       // MCP, REST
	CodeInternal                  Code = "internal_error"                    // MCP, REST
	CodeUnauthorized              Code = "unauthorized"                      // MCP, REST
	CodePermissionDenied          Code = "permission_denied"                 // MCP, REST
	CodeRunNotFound               Code = "run_not_found"                     // MCP, REST
	CodeFrameNotFound             Code = "frame_not_found"                   // MCP, REST
	CodeDeviceBusy                Code = "device_busy"                       // MCP, REST
	CodeAdmissionUnavailable      Code = "admission_unavailable"             // REST
	CodeCheckoutUnavailable       Code = "checkout_unavailable"              // REST
	CodeCheckoutCustomerBalance   Code = "checkout_customer_balance"         // REST
	CodeCheckoutInProgress        Code = "checkout_in_progress"              // REST
	CodeQuoteChanged              Code = "quote_changed"                     // REST
	CodePaymentInProgress         Code = "payment_in_progress"               // REST
	CodeOutOfStock                Code = "out_of_stock"                      // REST
	CodeWrongState                Code = "wrong_state"                       // REST
	CodeInstanceNotServed         Code = "instance_not_served"               // REST
	CodeReverificationRequired    Code = "reverification_required"           // REST
	CodeNotFound                  Code = "not_found"                         // REST
	CodeReceiptNotFound           Code = "receipt_not_found"                 // REST
	CodeRateLimited               Code = "rate_limited"                      // REST
	CodePayloadTooLarge           Code = "payload_too_large"                 // REST
	CodeOriginNotAllowed          Code = "origin_not_allowed"                // REST
	CodeAPIKeyFromBrowserOrigin   Code = "api_key_from_browser_origin"       // REST
	CodeKeyPredatesInstanceAttrib Code = "key_predates_instance_attribution" // REST
	CodeOrgNotServedByInstance    Code = "org_not_served_by_instance"        // REST
	CodeTenantBindingUnavailable  Code = "tenant_binding_unavailable"        // REST
	CodeTenantBindingUnsettled    Code = "tenant_binding_unsettled"          // REST
	CodeFleetAtCapacity           Code = "fleet_at_capacity"                 // REST
	CodeForbidden                 Code = "forbidden"                         // REST
	CodeServiceUnavailable        Code = "service_unavailable"               // REST
	CodeInvalidSignature          Code = "invalid_signature"                 // payment provider webhook
	CodeInvalidEvent              Code = "invalid_event"                     // payment provider webhook
	CodeNotSettled                Code = "not_settled"                       // payment provider webhook
)

// The ten device-surface codes (spec 7.3). They keep their upper-case spelling
// because the contract spells them so.
const (
	VrxDeviceNotFound        Code = "DEVICE_NOT_FOUND"
	VrxInvalidAction         Code = "INVALID_ACTION"
	VrxFrameViewportMismatch Code = "FRAME_VIEWPORT_MISMATCH"
	VrxCoordinateOutOfReach  Code = "COORDINATE_OUT_OF_REACH"
	VrxActionUnavailable     Code = "ACTION_UNAVAILABLE"
	VrxFencingTokenStale     Code = "FENCING_TOKEN_STALE"
	VrxStaleFrame            Code = "STALE_FRAME"
	VrxHardwareOffline       Code = "HARDWARE_OFFLINE"
	VrxFrameUnavailable      Code = "FRAME_UNAVAILABLE"
	VrxActionOutcomeUnknown  Code = "ACTION_OUTCOME_UNKNOWN"
)

// RESTCodes lists the 44 codes of the control surface in spec order.
var RESTCodes = []Code{
	CodeBackendResolutionFailed, CodeBackendNotImplemented, CodeDeviceUnavailable,
	CodeDeviceDisconnected, CodeLeaseMismatch, CodeLeaseRequired, CodeCapabilityUnsupported,
	CodeInvalidArgument, CodeBackendCommandFailed, CodeIdempotencyConflict,
	CodeActionOutcomeUnknown, CodeStaleFrame, CodeInternal, CodeUnauthorized,
	CodePermissionDenied, CodeRunNotFound, CodeFrameNotFound, CodeDeviceBusy,
	CodeAdmissionUnavailable, CodeCheckoutUnavailable, CodeCheckoutCustomerBalance,
	CodeCheckoutInProgress, CodeQuoteChanged, CodePaymentInProgress, CodeOutOfStock,
	CodeWrongState, CodeInstanceNotServed, CodeReverificationRequired, CodeNotFound,
	CodeReceiptNotFound, CodeRateLimited, CodePayloadTooLarge, CodeOriginNotAllowed,
	CodeAPIKeyFromBrowserOrigin, CodeKeyPredatesInstanceAttrib, CodeOrgNotServedByInstance,
	CodeTenantBindingUnavailable, CodeTenantBindingUnsettled, CodeFleetAtCapacity,
	CodeForbidden, CodeServiceUnavailable, CodeInvalidSignature, CodeInvalidEvent,
	CodeNotSettled,
}

// MCPCodes lists the 18 codes a tool call may answer with (spec 7.1): the
// codes marked MCP in spec 7.2, in spec order. It is written out rather than
// sliced from RESTCodes so that it is its own list: the MCP set does not
// depend on where codes sit in RESTCodes, and appending to one list can
// never overwrite the other.
var MCPCodes = []Code{
	CodeBackendResolutionFailed, CodeBackendNotImplemented, CodeDeviceUnavailable,
	CodeDeviceDisconnected, CodeLeaseMismatch, CodeLeaseRequired, CodeCapabilityUnsupported,
	CodeInvalidArgument, CodeBackendCommandFailed, CodeIdempotencyConflict,
	CodeActionOutcomeUnknown, CodeStaleFrame, CodeInternal, CodeUnauthorized,
	CodePermissionDenied, CodeRunNotFound, CodeFrameNotFound, CodeDeviceBusy,
}

// VrxCodes lists the ten device-surface codes.
var VrxCodes = []Code{
	VrxDeviceNotFound, VrxInvalidAction, VrxFrameViewportMismatch, VrxCoordinateOutOfReach,
	VrxActionUnavailable, VrxFencingTokenStale, VrxStaleFrame, VrxHardwareOffline,
	VrxFrameUnavailable, VrxActionOutcomeUnknown,
}

// Error is the one error type that crosses a surface. Message is for people
// and must never be branched on; Extra carries the code-specific fields
// (reason, deviceId, retryAfterMs, …) rendered beside code and message.
type Error struct {
	Code      Code
	Message   string
	Retryable *bool
	Extra     map[string]any
	// Err is an optional cause kept for logs; it is never rendered.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an Error with a formatted, lower-case message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// The builders below (WithRetryable, With, Wrap) are copy-on-write: each
// returns a new *Error and never modifies the one it is called on, whose
// Extra map in particular stays untouched. An error value may be shared (a
// package-level sentinel, or one error reported to several callers), so
// builders on it may run concurrently. Always use the result:
// e = e.With(k, v).

// WithRetryable returns a copy of e recording whether re-issuing the same
// call unchanged is meaningful.
func (e *Error) WithRetryable(r bool) *Error {
	c := *e
	c.Retryable = &r
	return &c
}

// With returns a copy of e with one extra field added to the envelope; the
// copy has its own Extra map.
func (e *Error) With(key string, value any) *Error {
	c := *e
	c.Extra = make(map[string]any, len(e.Extra)+1)
	maps.Copy(c.Extra, e.Extra)
	c.Extra[key] = value
	return &c
}

// Wrap returns a copy of e that keeps cause for logs without exposing it.
func (e *Error) Wrap(cause error) *Error {
	c := *e
	c.Err = cause
	return &c
}

// ErrorCode returns the code of err, or internal_error when err carries none.
func ErrorCode(err error) Code {
	var de *Error
	if errors.As(err, &de) {
		return de.Code
	}
	return CodeInternal
}

// AsError returns err as a *Error; anything unclassified becomes internal_error
// with a generic message so internals never leak.
func AsError(err error) *Error {
	var de *Error
	if errors.As(err, &de) {
		return de
	}
	return &Error{Code: CodeInternal, Message: "internal error", Err: err}
}
