package kernel

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"phonefleet/domain"
)

// statusOf is the one map from error code to HTTP status. The control-surface
// statuses follow spec 7.2 where it shows one and ARCHITECTURE.md ("HTTP
// statuses the spec does not show") for the rest. The device-surface statuses
// are this package's choice (see the decision below the map).
var statusOf = map[domain.Code]int{
	domain.CodeBackendResolutionFailed:   http.StatusInternalServerError,
	domain.CodeBackendNotImplemented:     http.StatusNotImplemented,
	domain.CodeDeviceUnavailable:         http.StatusConflict,
	domain.CodeDeviceDisconnected:        http.StatusServiceUnavailable,
	domain.CodeLeaseMismatch:             http.StatusConflict,
	domain.CodeLeaseRequired:             http.StatusConflict,
	domain.CodeCapabilityUnsupported:     http.StatusUnprocessableEntity,
	domain.CodeInvalidArgument:           http.StatusBadRequest,
	domain.CodeBackendCommandFailed:      http.StatusBadGateway,
	domain.CodeIdempotencyConflict:       http.StatusConflict,
	domain.CodeActionOutcomeUnknown:      http.StatusGatewayTimeout,
	domain.CodeStaleFrame:                http.StatusConflict,
	domain.CodeInternal:                  http.StatusInternalServerError,
	domain.CodeUnauthorized:              http.StatusUnauthorized,
	domain.CodePermissionDenied:          http.StatusForbidden,
	domain.CodeRunNotFound:               http.StatusNotFound,
	domain.CodeFrameNotFound:             http.StatusNotFound,
	domain.CodeDeviceBusy:                http.StatusTooManyRequests,
	domain.CodeAdmissionUnavailable:      http.StatusServiceUnavailable,
	domain.CodeCheckoutUnavailable:       http.StatusServiceUnavailable,
	domain.CodeCheckoutCustomerBalance:   http.StatusServiceUnavailable,
	domain.CodeCheckoutInProgress:        http.StatusConflict,
	domain.CodeQuoteChanged:              http.StatusConflict,
	domain.CodePaymentInProgress:         http.StatusConflict,
	domain.CodeOutOfStock:                http.StatusConflict,
	domain.CodeWrongState:                http.StatusConflict,
	domain.CodeInstanceNotServed:         http.StatusForbidden,
	domain.CodeReverificationRequired:    http.StatusForbidden,
	domain.CodeNotFound:                  http.StatusNotFound,
	domain.CodeReceiptNotFound:           http.StatusNotFound,
	domain.CodeRateLimited:               http.StatusTooManyRequests,
	domain.CodePayloadTooLarge:           http.StatusRequestEntityTooLarge,
	domain.CodeOriginNotAllowed:          http.StatusForbidden,
	domain.CodeAPIKeyFromBrowserOrigin:   http.StatusForbidden,
	domain.CodeKeyPredatesInstanceAttrib: http.StatusForbidden,
	domain.CodeOrgNotServedByInstance:    http.StatusForbidden,
	domain.CodeTenantBindingUnavailable:  http.StatusServiceUnavailable,
	domain.CodeTenantBindingUnsettled:    http.StatusServiceUnavailable,
	domain.CodeFleetAtCapacity:           http.StatusConflict,
	domain.CodeForbidden:                 http.StatusForbidden,
	domain.CodeServiceUnavailable:        http.StatusServiceUnavailable,
	domain.CodeInvalidSignature:          http.StatusBadRequest,
	domain.CodeInvalidEvent:              http.StatusBadRequest,
	domain.CodeNotSettled:                http.StatusServiceUnavailable,

	// Decision (docs/decisions.md, HTTP edge): the spec shows no statuses for the
	// device surface. Each code takes the status of its control-surface
	// counterpart: an unknown run token is a missing resource (404); a
	// malformed action is a bad request (400); a frame of another viewport and
	// a stale fencing token or frame contradict the device's current state
	// (409, like stale_frame and lease_mismatch); a coordinate the hardware
	// cannot reach and an action the device lacks are well-formed but
	// impossible (422, like capability_unsupported); offline hardware is
	// transient (503, like device_disconnected); a frame that is not there
	// (unknown, another device's, past retention) is missing (404, as
	// frame_not_found answers on REST); an unknown outcome is 504 like
	// action_outcome_unknown.
	domain.VrxDeviceNotFound:        http.StatusNotFound,
	domain.VrxInvalidAction:         http.StatusBadRequest,
	domain.VrxFrameViewportMismatch: http.StatusConflict,
	domain.VrxCoordinateOutOfReach:  http.StatusUnprocessableEntity,
	domain.VrxActionUnavailable:     http.StatusUnprocessableEntity,
	domain.VrxFencingTokenStale:     http.StatusConflict,
	domain.VrxStaleFrame:            http.StatusConflict,
	domain.VrxHardwareOffline:       http.StatusServiceUnavailable,
	domain.VrxFrameUnavailable:      http.StatusNotFound,
	domain.VrxActionOutcomeUnknown:  http.StatusGatewayTimeout,
}

// restCodes says which codes the control-surface envelope may carry.
var restCodes = codeSet(domain.RESTCodes)

func codeSet(codes []domain.Code) map[domain.Code]bool {
	set := make(map[domain.Code]bool, len(codes))
	for _, c := range codes {
		set[c] = true
	}
	return set
}

// StatusOf returns the HTTP status that answers code on its surface. A code
// outside the closed set answers 500, the status of internal_error; the
// package tests prove that no member of the set reaches that fallback.
func StatusOf(code domain.Code) int {
	if status, ok := statusOf[code]; ok {
		return status
	}
	return http.StatusInternalServerError
}

// Fixed Retry-After values in seconds (spec 5.6). admission_unavailable tells
// the client to honour Retry-After without giving a number; five seconds is
// this package's choice, overridden by an explicit retryAfterMs.
var fixedRetryAfter = map[domain.Code]int{
	domain.CodeTenantBindingUnavailable: 30,
	domain.CodeTenantBindingUnsettled:   1,
	domain.CodeAdmissionUnavailable:     5,
}

// reservedErrorKeys are the envelope members that Extra may never replace.
var reservedErrorKeys = map[string]bool{"code": true, "message": true, "retryable": true}

// WriteError renders err as the control-surface envelope
// {"error":{"code","message","retryable"?,...extra}} with the status of its
// code. An error that carries no domain.Error, or one whose code is not a
// control-surface code, renders as internal_error "internal error" so no
// internal text leaks. Retry-After, when it follows from the error, is set
// here and nowhere else. A server fault (5xx) hands its cause to the access
// log. If the response has already started, WriteError only records the
// fault. It sets no WWW-Authenticate: the bearer challenge names addresses
// only a surface knows, so a surface that authenticates renders with
// RESTErrors.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	writeREST(w, r, err, nil)
}

// RESTErrors returns the control-surface renderer, WriteError, that also
// sets WWW-Authenticate on every 401 it answers to challenge's value (RFC
// 6750 3). The challenge is the surface's because it names the surface's
// protected resource; the envelope and statuses stay the kernel's.
func RESTErrors(challenge func(r *http.Request, e *domain.Error) string) ErrorWriter {
	return func(w http.ResponseWriter, r *http.Request, err error) { writeREST(w, r, err, challenge) }
}

func writeREST(w http.ResponseWriter, r *http.Request, err error, challenge func(*http.Request, *domain.Error) string) {
	e := domain.AsError(err)
	if !restCodes[e.Code] {
		e = &domain.Error{Code: domain.CodeInternal, Message: "internal error", Err: err}
	}
	status := StatusOf(e.Code)
	if !BeginError(r, status, err) {
		return
	}
	setRetryAfter(w.Header(), e)
	if status == http.StatusUnauthorized && challenge != nil {
		w.Header().Set("WWW-Authenticate", challenge(r, e))
	}
	WriteBody(w, status, encodeRESTError(e))
}

// BeginError is the first step of every ErrorWriter: it hands a server
// fault's cause (status 5xx) to the access log, which logs it once and
// never shows it to the client, and reports whether an error answer can
// still be written (nothing has been yet). When it reports false the
// writer must write nothing: the client already has a status.
func BeginError(r *http.Request, status int, cause error) bool {
	ex := exchangeFrom(r.Context())
	if status >= http.StatusInternalServerError {
		ex.noteFault(cause)
	}
	return !ex.started()
}

// messageOf returns the error's message, or the status text when a producer
// left it empty, because every envelope requires one.
func messageOf(e *domain.Error, status int) string {
	if e.Message != "" {
		return e.Message
	}
	return strings.ToLower(http.StatusText(status))
}

// encodeRESTError writes code, message and retryable first, then the extra
// fields in key order. Extra cannot replace the first three, and an extra
// value that cannot be encoded is left out rather than losing the envelope.
func encodeRESTError(e *domain.Error) []byte {
	var b bytes.Buffer
	b.WriteString(`{"error":{"code":`)
	writeJSONValue(&b, e.Code)
	b.WriteString(`,"message":`)
	writeJSONValue(&b, messageOf(e, StatusOf(e.Code)))
	if e.Retryable != nil {
		b.WriteString(`,"retryable":`)
		writeJSONValue(&b, *e.Retryable)
	}
	keys := make([]string, 0, len(e.Extra))
	for k := range e.Extra {
		if !reservedErrorKeys[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := json.Marshal(e.Extra[k])
		if err != nil {
			continue
		}
		b.WriteByte(',')
		writeJSONValue(&b, k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteString("}}")
	return b.Bytes()
}

// writeJSONValue appends v, which is always a string, code or bool here and so
// always encodes.
func writeJSONValue(b *bytes.Buffer, v any) {
	out, _ := json.Marshal(v)
	b.Write(out)
}

// setRetryAfter derives Retry-After from the error: an explicit retryAfterMs
// (device_busy, fleet_at_capacity, …) rounded up to whole seconds, else the
// code's fixed value.
func setRetryAfter(h http.Header, e *domain.Error) {
	if ms, ok := retryAfterMs(e.Extra["retryAfterMs"]); ok {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(ms/1000)), 10))
		return
	}
	if s, ok := fixedRetryAfter[e.Code]; ok {
		h.Set("Retry-After", strconv.Itoa(s))
	}
}

func retryAfterMs(v any) (float64, bool) {
	var ms float64
	switch n := v.(type) {
	case int:
		ms = float64(n)
	case int32:
		ms = float64(n)
	case int64:
		ms = float64(n)
	case uint:
		ms = float64(n)
	case uint32:
		ms = float64(n)
	case uint64:
		ms = float64(n)
	case float64:
		ms = n
	case float32:
		ms = float64(n)
	case json.Number:
		f, err := n.Float64()
		if err != nil {
			return 0, false
		}
		ms = f
	default:
		return 0, false
	}
	if ms < 0 || math.IsNaN(ms) || math.IsInf(ms, 0) {
		return 0, false
	}
	return ms, true
}
