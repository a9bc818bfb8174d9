package kernel

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"phonefleet/domain"
)

// TestEveryCodeHasAStatus proves no code of either closed set falls through
// to StatusOf's fallback.
func TestEveryCodeHasAStatus(t *testing.T) {
	sets := []struct {
		name  string
		codes []domain.Code
		want  int
	}{
		{name: "control surface", codes: domain.RESTCodes, want: 44},
		{name: "device surface", codes: domain.VrxCodes, want: 10},
	}
	for _, set := range sets {
		t.Run(set.name, func(t *testing.T) {
			if len(set.codes) != set.want {
				t.Errorf("got %d codes; want %d", len(set.codes), set.want)
			}
			for _, code := range set.codes {
				status, ok := statusOf[code]
				if !ok {
					t.Errorf("code %s has no status", code)
					continue
				}
				if status < 400 || status > 599 {
					t.Errorf("code %s: got status %d; want a 4xx or 5xx", code, status)
				}
			}
		})
	}
	if got, want := len(statusOf), len(domain.RESTCodes)+len(domain.VrxCodes); got != want {
		t.Errorf("got %d entries in statusOf; want %d (one per code, nothing else)", got, want)
	}
}

// TestStatusesShownBySpec pins the statuses the contract and ARCHITECTURE.md
// fix, so a typo in the map cannot pass unnoticed.
func TestStatusesShownBySpec(t *testing.T) {
	want := map[domain.Code]int{
		domain.CodeBackendResolutionFailed:   500,
		domain.CodeBackendNotImplemented:     501,
		domain.CodeDeviceUnavailable:         409,
		domain.CodeDeviceDisconnected:        503,
		domain.CodeLeaseMismatch:             409,
		domain.CodeLeaseRequired:             409,
		domain.CodeCapabilityUnsupported:     422,
		domain.CodeInvalidArgument:           400,
		domain.CodeBackendCommandFailed:      502,
		domain.CodeIdempotencyConflict:       409,
		domain.CodeActionOutcomeUnknown:      504,
		domain.CodeStaleFrame:                409,
		domain.CodeInternal:                  500,
		domain.CodeUnauthorized:              401,
		domain.CodePermissionDenied:          403,
		domain.CodeRunNotFound:               404,
		domain.CodeFrameNotFound:             404,
		domain.CodeDeviceBusy:                429,
		domain.CodeAdmissionUnavailable:      503,
		domain.CodeCheckoutUnavailable:       503,
		domain.CodeCheckoutCustomerBalance:   503,
		domain.CodeCheckoutInProgress:        409,
		domain.CodeQuoteChanged:              409,
		domain.CodePaymentInProgress:         409,
		domain.CodeOutOfStock:                409,
		domain.CodeWrongState:                409,
		domain.CodeInstanceNotServed:         403,
		domain.CodeReverificationRequired:    403,
		domain.CodeNotFound:                  404,
		domain.CodeReceiptNotFound:           404,
		domain.CodeRateLimited:               429,
		domain.CodePayloadTooLarge:           413,
		domain.CodeOriginNotAllowed:          403,
		domain.CodeAPIKeyFromBrowserOrigin:   403,
		domain.CodeKeyPredatesInstanceAttrib: 403,
		domain.CodeOrgNotServedByInstance:    403,
		domain.CodeTenantBindingUnavailable:  503,
		domain.CodeTenantBindingUnsettled:    503,
		domain.CodeFleetAtCapacity:           409,
		domain.CodeForbidden:                 403,
		domain.CodeServiceUnavailable:        503,
		domain.CodeInvalidSignature:          400,
		domain.CodeInvalidEvent:              400,
		domain.CodeNotSettled:                503,
	}
	for _, code := range domain.RESTCodes {
		if got := StatusOf(code); got != want[code] {
			t.Errorf("StatusOf(%s): got %d; want %d", code, got, want[code])
		}
	}
	if got := StatusOf("no_such_code"); got != 500 {
		t.Errorf("StatusOf(no_such_code): got %d; want 500", got)
	}
}

func TestWriteError(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		status     int
		body       string
		retryAfter string
	}{
		{
			name:   "domain error",
			err:    domain.Errorf(domain.CodeInvalidArgument, "limit must be at least 1"),
			status: 400,
			body:   `{"error":{"code":"invalid_argument","message":"limit must be at least 1"}}`,
		},
		{
			name:   "wrapped domain error with retryable and extras",
			err:    fmt.Errorf("acquire: %w", domain.Errorf(domain.CodeDeviceUnavailable, "device is leased").WithRetryable(true).With("reason", "already leased").With("deviceId", "dev_1")),
			status: 409,
			body:   `{"error":{"code":"device_unavailable","message":"device is leased","retryable":true,"deviceId":"dev_1","reason":"already leased"}}`,
		},
		{
			name: "extras never override code, message or retryable",
			err: domain.Errorf(domain.CodeNotFound, "no such device").
				With("code", "internal_error").With("message", "leak").With("retryable", true).With("deviceId", "dev_2"),
			status: 404,
			body:   `{"error":{"code":"not_found","message":"no such device","deviceId":"dev_2"}}`,
		},
		{
			name:       "device busy derives Retry-After from retryAfterMs, rounded up",
			err:        domain.Errorf(domain.CodeDeviceBusy, "too many actions waiting").WithRetryable(true).With("retryAfterMs", 1500),
			status:     429,
			body:       `{"error":{"code":"device_busy","message":"too many actions waiting","retryable":true,"retryAfterMs":1500}}`,
			retryAfter: "2",
		},
		{
			name:       "exact seconds are not rounded up",
			err:        domain.Errorf(domain.CodeDeviceBusy, "busy").With("retryAfterMs", 2000.0),
			status:     429,
			body:       `{"error":{"code":"device_busy","message":"busy","retryAfterMs":2000}}`,
			retryAfter: "2",
		},
		{
			name:       "tenant binding unavailable",
			err:        domain.Errorf(domain.CodeTenantBindingUnavailable, "cannot check organisation binding now"),
			status:     503,
			body:       `{"error":{"code":"tenant_binding_unavailable","message":"cannot check organisation binding now"}}`,
			retryAfter: "30",
		},
		{
			name:       "tenant binding unsettled",
			err:        domain.Errorf(domain.CodeTenantBindingUnsettled, "organisation binding is being recorded"),
			status:     503,
			body:       `{"error":{"code":"tenant_binding_unsettled","message":"organisation binding is being recorded"}}`,
			retryAfter: "1",
		},
		{
			name:       "admission unavailable",
			err:        domain.Errorf(domain.CodeAdmissionUnavailable, "provisioning store cannot be read"),
			status:     503,
			body:       `{"error":{"code":"admission_unavailable","message":"provisioning store cannot be read"}}`,
			retryAfter: "5",
		},
		{
			name:   "unclassified error never leaks its text",
			err:    errors.New("pq: password authentication failed for user admin"),
			status: 500,
			body:   `{"error":{"code":"internal_error","message":"internal error"}}`,
		},
		{
			name:   "device-surface code on the control surface",
			err:    domain.Errorf(domain.VrxStaleFrame, "frame moved"),
			status: 500,
			body:   `{"error":{"code":"internal_error","message":"internal error"}}`,
		},
		{
			name:   "empty message gets the status text",
			err:    &domain.Error{Code: domain.CodeForbidden},
			status: 403,
			body:   `{"error":{"code":"forbidden","message":"forbidden"}}`,
		},
		{
			name:   "unencodable extra is left out",
			err:    domain.Errorf(domain.CodeWrongState, "order cannot be returned").With("state", "cancelled").With("bad", make(chan int)),
			status: 409,
			body:   `{"error":{"code":"wrong_state","message":"order cannot be returned","state":"cancelled"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			WriteError(rec, httptest.NewRequest(http.MethodGet, "/", nil), tt.err)
			if rec.Code != tt.status {
				t.Errorf("got status %d; want %d", rec.Code, tt.status)
			}
			if got := rec.Body.String(); got != tt.body {
				t.Errorf("got body %s; want %s", got, tt.body)
			}
			if got := rec.Header().Get("Content-Type"); got != "application/json" {
				t.Errorf("got Content-Type %q; want application/json", got)
			}
			if got := rec.Header().Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("got Retry-After %q; want %q", got, tt.retryAfter)
			}
		})
	}
}
