package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/http/kernel"
)

// TestErrorCodeEnumMatchesDomain keeps the document's closed code sets equal
// to the domain's.
func TestErrorCodeEnumMatchesDomain(t *testing.T) {
	doc, err := embeddedOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Components struct {
			Schemas struct {
				ErrorCode struct {
					Enum []domain.Code `json:"enum"`
				} `json:"ErrorCode"`
				VrxError struct {
					Properties struct {
						Error struct {
							Properties struct {
								Code struct {
									Enum []domain.Code `json:"enum"`
								} `json:"code"`
							} `json:"properties"`
						} `json:"error"`
					} `json:"properties"`
				} `json:"VrxError"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	if got := d.Components.Schemas.ErrorCode.Enum; !slices.Equal(got, domain.RESTCodes) {
		t.Errorf("ErrorCode enum: got %v; want %v", got, domain.RESTCodes)
	}
	if got := d.Components.Schemas.VrxError.Properties.Error.Properties.Code.Enum; !slices.Equal(got, domain.VrxCodes) {
		t.Errorf("VrxError code enum: got %v; want %v", got, domain.VrxCodes)
	}
}

// TestErrorEnvelopesValidate renders every code of each surface and checks
// the body against the document's envelope schema.
func TestErrorEnvelopesValidate(t *testing.T) {
	s, _ := newTestServer(t, Deps{})
	v := apitest.FromHandler(t, s.Handler())
	surfaces := []struct {
		name   string
		codes  []domain.Code
		write  func(http.ResponseWriter, *http.Request, error)
		schema string
	}{
		{name: "control surface", codes: domain.RESTCodes, write: writeError, schema: "Error"},
	}
	for _, surface := range surfaces {
		for _, code := range surface.codes {
			t.Run(surface.name+"/"+string(code), func(t *testing.T) {
				rec := httptest.NewRecorder()
				err := domain.Errorf(code, "something about %s", code).WithRetryable(false).With("deviceId", "dev_1")
				surface.write(rec, httptest.NewRequest(http.MethodGet, "/", nil), err)
				if rec.Code != kernel.StatusOf(code) {
					t.Errorf("got status %d; want %d", rec.Code, kernel.StatusOf(code))
				}
				v.CheckSchema(t, surface.schema, rec.Body.Bytes())
			})
		}
	}
}

// TestWriteErrorAfterResponseStarted proves a late error does not write a
// second status or body, and still reaches the log.
func TestWriteErrorAfterResponseStarted(t *testing.T) {
	s, logs := newTestServer(t, Deps{})
	s.v1.Handle("/half", kernel.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("partial"))
		return errors.New("stream broke")
	})).Methods(http.MethodGet)
	resp, body := apitest.Do(t, s.Handler(), httptest.NewRequest(http.MethodGet, "/v1/half", nil))
	if resp.StatusCode != 200 || string(body) != "partial" {
		t.Errorf("got %d %q; want 200 \"partial\"", resp.StatusCode, body)
	}
	lines := logs.lines(t)
	if len(lines) != 1 {
		t.Fatalf("got %d log lines; want 1", len(lines))
	}
	if got, _ := lines[0]["error"].(string); !strings.Contains(got, "stream broke") {
		t.Errorf("got logged error %q; want the cause", got)
	}
}

func TestMethodNotAllowedNamesAllowedMethods(t *testing.T) {
	s, _ := newTestServer(t, Deps{})
	nop := kernel.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
	v1 := s.v1
	v1.Handle("/devices/{deviceId}", nop).Methods(http.MethodGet)
	v1.Handle("/devices/{deviceId}", nop).Methods(http.MethodPatch)
	v1.Handle("/devices/{deviceId}/lease", nop).Methods(http.MethodPost, http.MethodPatch, http.MethodDelete)
	tests := []struct {
		name   string
		method string
		path   string
		allow  string
	}{
		{name: "two routes on one path", method: http.MethodDelete, path: "/v1/devices/dev_1", allow: "GET, PATCH"},
		{name: "one route with three methods", method: http.MethodGet, path: "/v1/devices/dev_1/lease", allow: "DELETE, PATCH, POST"},
		{name: "top-level route", method: http.MethodDelete, path: "/healthz", allow: "GET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := apitest.Do(t, s.Handler(), httptest.NewRequest(tt.method, tt.path, nil))
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("got status %d; want 404", resp.StatusCode)
			}
			if got := resp.Header.Get("Allow"); got != tt.allow {
				t.Errorf("got Allow %q; want %q", got, tt.allow)
			}
			e := decodeErrorBody(t, body)
			if e["code"] != "not_found" {
				t.Errorf("got code %v; want not_found", e["code"])
			}
			if msg, _ := e["message"].(string); !strings.Contains(msg, tt.allow) {
				t.Errorf("got message %q; want it to name %s", msg, tt.allow)
			}
		})
	}
}
