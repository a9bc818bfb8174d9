package vrx

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"

	"phonefleet/domain"
	"phonefleet/http/kernel"
)

// Decision (docs/decisions.md, device surface errors): the device surface
// answers every failure as {ok:false,error:{code,message}} with one of the
// ten codes of spec 7.3, and nothing else in the envelope (no retryable, no
// extra fields: the spec shows none). The application answers with the
// fleet's codes, so each is translated here, once, by this total map; a code
// the map does not name (none today; the tests prove it) answers
// HARDWARE_OFFLINE "internal error", like internal_error.
//
//	fleet code                                  device-surface code       status
//	device_unavailable (reason not_found)       DEVICE_NOT_FOUND          404
//	run_not_found, not_found, receipt_not_found DEVICE_NOT_FOUND          404
//	unauthorized, permission_denied, forbidden,
//	  instance_not_served, reverification_required,
//	  origin_not_allowed, api_key_from_browser_origin,
//	  key_predates_instance_attribution,
//	  org_not_served_by_instance                DEVICE_NOT_FOUND          404
//	invalid_argument                            INVALID_ACTION            400
//	  (reason out_of_bounds / out_of_reach)     COORDINATE_OUT_OF_REACH   422
//	  (reason element_not_found, app_not_installed,
//	   not_in_catalog, no_focused_field)        ACTION_UNAVAILABLE        422
//	idempotency_conflict (retryable: in flight)  HARDWARE_OFFLINE          503
//	idempotency_conflict (not retryable), wrong_state,
//	  checkout_in_progress, quote_changed, payment_in_progress,
//	  out_of_stock, fleet_at_capacity,
//	  invalid_signature, invalid_event          INVALID_ACTION            400
//	capability_unsupported,
//	  backend_not_implemented                   ACTION_UNAVAILABLE        422
//	lease_mismatch, lease_required,
//	  device_unavailable (reason already_leased,
//	  run_awaiting_user)                        FENCING_TOKEN_STALE       409
//	stale_frame                                 STALE_FRAME               409
//	  (reason other_device / viewport_mismatch) FRAME_VIEWPORT_MISMATCH   409
//	frame_not_found                             FRAME_UNAVAILABLE         404
//	device_unavailable (offline, asleep, run_paused,
//	  run_queued, other),
//	  device_disconnected, device_busy,
//	  backend_command_failed, backend_resolution_failed,
//	  internal_error, rate_limited, service_unavailable,
//	  admission_unavailable, checkout_unavailable,
//	  checkout_customer_balance, tenant_binding_unavailable,
//	  tenant_binding_unsettled, not_settled     HARDWARE_OFFLINE          503
//	action_outcome_unknown                      ACTION_OUTCOME_UNKNOWN    504
//	payload_too_large                           (the control surface's 413, see below)
//
// The statuses are the kernel's one code→status map (kernel.StatusOf).
//
// Why these: the run token is the surface's only credential, so every
// refusal of a credential or of what it names is the one DEVICE_NOT_FOUND,
// rendered from a fixed message so that an unknown, malformed, expired,
// ended or wrong-device token, an API key in the path and a refused
// permission are byte-identical. A lease the run no longer holds (parked,
// its device handed to a person) is its fencing token gone stale; a
// paused run keeps its lease and answers HARDWARE_OFFLINE until resumed. A frame that
// cannot be read is FRAME_UNAVAILABLE. Everything that means "the phone or
// the service cannot do this now" is HARDWARE_OFFLINE (503, so a worker
// backs off and retries; device_busy's retryAfterMs becomes Retry-After),
// internal_error included, with its message reduced to "internal error".
// An idempotencyKey reused for another action, or still in flight, is the
// worker's mistake to correct: INVALID_ACTION; a key whose first use is
// still in flight is HARDWARE_OFFLINE, so the worker retries the same
// request later and gets the recorded outcome. A reason, where the fleet
// gives one, refines the code; messages are never read.
//
// payload_too_large is the one answer outside the ten: spec 7.2 says it is
// "answered the same on every surface", and the chain (kernel.Chain)
// refuses a declared Content-Length over 1 MiB before routing, with the
// control surface's envelope, where no surface can be known. A chunked body
// that runs past the limit is refused here with that same answer, so both
// are byte-identical: 413 {"error":{"code":"payload_too_large",...}}.

// deviceNotFoundMessage is the one message of DEVICE_NOT_FOUND; it names
// nothing so that every refusal is byte-identical.
const deviceNotFoundMessage = "no device is available to this run token"

// internalMessage replaces the message of a failure that is the service's.
const internalMessage = "internal error"

// codeOf is the device-surface code of each fleet code, before reasons
// refine it (refine).
var codeOf = map[domain.Code]domain.Code{
	domain.CodeBackendResolutionFailed:   domain.VrxHardwareOffline,
	domain.CodeBackendNotImplemented:     domain.VrxActionUnavailable,
	domain.CodeDeviceUnavailable:         domain.VrxHardwareOffline,
	domain.CodeDeviceDisconnected:        domain.VrxHardwareOffline,
	domain.CodeLeaseMismatch:             domain.VrxFencingTokenStale,
	domain.CodeLeaseRequired:             domain.VrxFencingTokenStale,
	domain.CodeCapabilityUnsupported:     domain.VrxActionUnavailable,
	domain.CodeInvalidArgument:           domain.VrxInvalidAction,
	domain.CodeBackendCommandFailed:      domain.VrxHardwareOffline,
	domain.CodeIdempotencyConflict:       domain.VrxInvalidAction,
	domain.CodeActionOutcomeUnknown:      domain.VrxActionOutcomeUnknown,
	domain.CodeStaleFrame:                domain.VrxStaleFrame,
	domain.CodeInternal:                  domain.VrxHardwareOffline,
	domain.CodeUnauthorized:              domain.VrxDeviceNotFound,
	domain.CodePermissionDenied:          domain.VrxDeviceNotFound,
	domain.CodeRunNotFound:               domain.VrxDeviceNotFound,
	domain.CodeFrameNotFound:             domain.VrxFrameUnavailable,
	domain.CodeDeviceBusy:                domain.VrxHardwareOffline,
	domain.CodeAdmissionUnavailable:      domain.VrxHardwareOffline,
	domain.CodeCheckoutUnavailable:       domain.VrxHardwareOffline,
	domain.CodeCheckoutCustomerBalance:   domain.VrxHardwareOffline,
	domain.CodeCheckoutInProgress:        domain.VrxInvalidAction,
	domain.CodeQuoteChanged:              domain.VrxInvalidAction,
	domain.CodePaymentInProgress:         domain.VrxInvalidAction,
	domain.CodeOutOfStock:                domain.VrxInvalidAction,
	domain.CodeWrongState:                domain.VrxInvalidAction,
	domain.CodeInstanceNotServed:         domain.VrxDeviceNotFound,
	domain.CodeReverificationRequired:    domain.VrxDeviceNotFound,
	domain.CodeNotFound:                  domain.VrxDeviceNotFound,
	domain.CodeReceiptNotFound:           domain.VrxDeviceNotFound,
	domain.CodeRateLimited:               domain.VrxHardwareOffline,
	domain.CodeOriginNotAllowed:          domain.VrxDeviceNotFound,
	domain.CodeAPIKeyFromBrowserOrigin:   domain.VrxDeviceNotFound,
	domain.CodeKeyPredatesInstanceAttrib: domain.VrxDeviceNotFound,
	domain.CodeOrgNotServedByInstance:    domain.VrxDeviceNotFound,
	domain.CodeTenantBindingUnavailable:  domain.VrxHardwareOffline,
	domain.CodeTenantBindingUnsettled:    domain.VrxHardwareOffline,
	domain.CodeFleetAtCapacity:           domain.VrxInvalidAction,
	domain.CodeForbidden:                 domain.VrxDeviceNotFound,
	domain.CodeServiceUnavailable:        domain.VrxHardwareOffline,
	domain.CodeInvalidSignature:          domain.VrxInvalidAction,
	domain.CodeInvalidEvent:              domain.VrxInvalidAction,
	domain.CodeNotSettled:                domain.VrxHardwareOffline,
}

// refinedBy are the reasons that move a fleet code to a more precise
// device-surface code than codeOf gives.
var refinedBy = map[domain.Code]map[string]domain.Code{
	domain.CodeDeviceUnavailable: {
		domain.ReasonNotFound:      domain.VrxDeviceNotFound,
		domain.ReasonAlreadyLeased: domain.VrxFencingTokenStale,
		// A parked run's lease went to a person; a paused or queued one
		// keeps it and continues (HARDWARE_OFFLINE: retry later).
		"run_" + domain.RunStateAwaitingUser: domain.VrxFencingTokenStale,
	},
	domain.CodeInvalidArgument: {
		"out_of_bounds":     domain.VrxCoordinateOutOfReach,
		"out_of_reach":      domain.VrxCoordinateOutOfReach,
		"element_not_found": domain.VrxActionUnavailable,
		"app_not_installed": domain.VrxActionUnavailable,
		"not_in_catalog":    domain.VrxActionUnavailable,
		"no_focused_field":  domain.VrxActionUnavailable,
	},
	domain.CodeStaleFrame: {
		"other_device":      domain.VrxFrameViewportMismatch,
		"viewport_mismatch": domain.VrxFrameViewportMismatch,
	},
}

var vrxCodes = func() map[domain.Code]bool {
	set := map[domain.Code]bool{}
	for _, c := range domain.VrxCodes {
		set[c] = true
	}
	return set
}()

// translate returns the device-surface code and message that answer e.
func translate(e *domain.Error) (domain.Code, string) {
	code, ok := codeOf[e.Code]
	switch {
	case vrxCodes[e.Code]:
		code = e.Code
	case !ok:
		return domain.VrxHardwareOffline, internalMessage
	}
	if e.Code == domain.CodeIdempotencyConflict && e.Retryable != nil && *e.Retryable {
		code = domain.VrxHardwareOffline
	}
	if reason, _ := e.Extra["reason"].(string); reason != "" {
		if c, ok := refinedBy[e.Code][reason]; ok {
			code = c
		}
	}
	switch {
	case code == domain.VrxDeviceNotFound:
		return code, deviceNotFoundMessage
	case e.Code == domain.CodeInternal || e.Message == "":
		return code, internalMessage
	}
	return code, e.Message
}

// deviceNotFoundBody is the one body of DEVICE_NOT_FOUND.
var deviceNotFoundBody = envelope(domain.VrxDeviceNotFound, deviceNotFoundMessage)

// WriteError is the device surface's error renderer (kernel.ErrorWriter):
// {ok:false,error:{code,message}} with the status of its code, per the
// decision above. A failure that is not a domain.Error is the service's own
// (HARDWARE_OFFLINE "internal error"); its cause goes to the access log
// only.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	e := domain.AsError(err)
	if e.Code == domain.CodePayloadTooLarge {
		kernel.WriteError(w, r, err)
		return
	}
	code, message := translate(e)
	status := kernel.StatusOf(code)
	if !kernel.BeginError(r, status, err) {
		return
	}
	if code == domain.VrxDeviceNotFound {
		kernel.WriteBody(w, status, deviceNotFoundBody)
		return
	}
	if code == domain.VrxHardwareOffline {
		if s, ok := retryAfterSeconds(e.Extra["retryAfterMs"]); ok {
			w.Header().Set("Retry-After", strconv.Itoa(s))
		}
	}
	kernel.WriteBody(w, status, envelope(code, message))
}

// envelope encodes {ok:false,error:{code,message}}.
func envelope(code domain.Code, message string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"ok":false,"error":{"code":`)
	c, _ := json.Marshal(code) // strings always encode
	b.Write(c)
	b.WriteString(`,"message":`)
	m, _ := json.Marshal(message)
	b.Write(m)
	b.WriteString("}}")
	return b.Bytes()
}

// retryAfterSeconds reads a retryAfterMs extra (device_busy) as whole
// seconds, rounded up.
func retryAfterSeconds(v any) (int, bool) {
	var ms float64
	switch n := v.(type) {
	case int:
		ms = float64(n)
	case int64:
		ms = float64(n)
	case float64:
		ms = n
	default:
		return 0, false
	}
	if ms < 0 || math.IsNaN(ms) || math.IsInf(ms, 0) {
		return 0, false
	}
	return int(math.Ceil(ms / 1000)), true
}
