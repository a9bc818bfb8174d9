package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"phonefleet/http/apitest"
	"phonefleet/http/contract"
)

// testEvolution deprecates two operations (one with a page about it, one
// whose path variable is a mux pattern) and notes a meaning change of a
// third; its changelog announces them and removes a tool.
func testEvolution() *contract.Evolution {
	reg := contract.Registry{
		Deprecations: []contract.Deprecation{
			{Operation: "GET /healthz", Since: "2026-12-01", Sunset: "2027-03-01", Replacement: "GET /readyz",
				Note: "The probe moves.", Link: "https://docs.example/deprecations#healthz"},
			{Operation: "GET /v1/receipts/{idempotencyKey}", Since: "2026-12-02", Sunset: "2027-06-01",
				Replacement: "GET /v1/receipts", Note: "Read receipts by filter."},
		},
		Meanings: []contract.Meaning{
			{Operation: "GET /v1/devices", Since: "2026-12-03", Note: "state counts a device being reset as busy."},
		},
	}
	log := contract.Changelog{Entries: []contract.Entry{
		{Date: "2026-12-01", Kind: contract.KindDeprecated, Operation: "GET /healthz", Effective: "2027-03-01", Note: "The probe moves."},
		{Date: "2027-01-10", Kind: contract.KindRemoved, Tool: "old_tool", Previous: strings.Repeat("a", 64), Note: "No longer served."},
	}}
	return &contract.Evolution{Changelog: log, Registry: reg}
}

// get sends a GET to the running server and returns the answer with its
// body read.
func get(t *testing.T, ts *httptest.Server, path string) (*http.Response, []byte) {
	t.Helper()
	resp, err := ts.Client().Get(ts.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// TestDeprecatedOperations serves a registry of the test's own over a real
// HTTP round trip: a deprecated operation answers Deprecation (RFC 9745)
// and Sunset (RFC 8594) headers whatever its outcome, and is marked
// deprecated in the served document, which still loads and validates as
// OpenAPI 3.1 and still describes the answers; other operations carry
// nothing; no fingerprint moves.
func TestDeprecatedOperations(t *testing.T) {
	s, _ := newTestServer(t, Deps{Contract: testEvolution()})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	v := apitest.FromHandler(t, s.Handler()) // loads and validates the marked document

	tests := []struct {
		name, path                string
		deprecation, sunset, link string
	}{
		{name: "deprecated with a page", path: "/healthz",
			deprecation: "@1796083200", sunset: "Mon, 01 Mar 2027 00:00:00 GMT", link: `<https://docs.example/deprecations#healthz>; rel="deprecation"`},
		{name: "deprecated, a key with a slash, answered an error", path: "/v1/receipts/run_1%2Fstep-1%2F0",
			deprecation: "@1796169600", sunset: "Tue, 01 Jun 2027 00:00:00 GMT"},
		{name: "not deprecated", path: "/v1/receipts"},
		{name: "not deprecated: the document", path: "/openapi.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := get(t, ts, tt.path)
			for _, h := range []struct{ name, want string }{{"Deprecation", tt.deprecation}, {"Sunset", tt.sunset}, {"Link", tt.link}} {
				if got := resp.Header.Get(h.name); got != h.want {
					t.Errorf("got %s %q; want %q", h.name, got, h.want)
				}
			}
			req := httptest.NewRequest(http.MethodGet, tt.path, nil)
			v.Check(t, req, resp, body)
		})
	}

	type operation struct {
		Deprecated  bool   `json:"deprecated"`
		Description string `json:"description"`
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	_, raw := get(t, ts, "/openapi.json")
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	ops := map[string]operation{}
	for path, item := range doc.Paths {
		for method, v := range item {
			if method == "parameters" {
				continue
			}
			var op operation
			if err := json.Unmarshal(v, &op); err != nil {
				t.Fatal(err)
			}
			key := strings.ToUpper(method) + " " + path
			ops[key] = op
			want := key == "GET /healthz" || key == "GET /v1/receipts/{idempotencyKey}"
			if op.Deprecated != want {
				t.Errorf("%s: got deprecated %v; want %v", key, op.Deprecated, want)
			}
		}
	}
	if d := ops["GET /healthz"].Description; !strings.HasPrefix(d, "Deprecated since 2026-12-01: This operation stops being served on 2027-03-01. Use GET /readyz instead. The probe moves.") {
		t.Errorf("got description %q; want the notice first", d)
	}
	if d := ops["GET /v1/devices"].Description; !strings.HasSuffix(d, "\n\n@since 2026-12-03: state counts a device being reset as busy.") {
		t.Errorf("got description %q; want the @since line last", d)
	}

	// Deprecations and notes are prose: no fingerprint moves.
	plain, _ := newTestServer(t, Deps{})
	_, marked := get(t, ts, "/api/contract-fingerprints.json")
	_, unmarked := apitest.Do(t, plain.Handler(), httptest.NewRequest(http.MethodGet, "/api/contract-fingerprints.json", nil))
	if !bytes.Equal(marked, unmarked) {
		t.Error("the fingerprints moved when operations were marked deprecated")
	}

	// The changelog served is the one given, with the version it implies.
	resp, body := get(t, ts, "/api/changelog.json")
	v.Check(t, httptest.NewRequest(http.MethodGet, "/api/changelog.json", nil), resp, body)
	var log struct {
		ToolSurfaceVersion string           `json:"toolSurfaceVersion"`
		Entries            []contract.Entry `json:"entries"`
	}
	if err := json.Unmarshal(body, &log); err != nil {
		t.Fatal(err)
	}
	if log.ToolSurfaceVersion != "2.0.0" || len(log.Entries) != 2 || log.Entries[0].Kind != contract.KindDeprecated {
		t.Errorf("got changelog %s; want the test's, at version 2.0.0", body)
	}
}

// TestNothingIsMarkedDeprecatedToday: spec 9.5. The production registry is
// empty, so the served document has no deprecated marker anywhere and no
// answer carries Deprecation, Sunset or Warning; the changelog is served
// without a credential and matches the document.
func TestNothingIsMarkedDeprecatedToday(t *testing.T) {
	s, _ := newTestServer(t, Deps{Mode: "hosted"})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	v := apitest.FromHandler(t, s.Handler())

	_, raw := get(t, ts, "/openapi.json")
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(at string, v any)
	walk = func(at string, v any) {
		switch t2 := v.(type) {
		case map[string]any:
			for k, x := range t2 {
				if k == "deprecated" {
					t.Errorf("%s: got a deprecated marker", at)
				}
				walk(at+"/"+k, x)
			}
		case []any:
			for _, x := range t2 {
				walk(at+"/[]", x)
			}
		}
	}
	walk("#", doc)
	if bytes.Contains(raw, []byte("@since")) || bytes.Contains(raw, []byte("Deprecated since")) {
		t.Error("got a deprecation notice or an @since note in the document")
	}

	for _, path := range []string{"/healthz", "/openapi.json", "/api/contract-fingerprints.json", "/api/changelog.json", "/v1/devices", "/v1/receipts/k"} {
		resp, body := get(t, ts, path)
		for _, h := range []string{"Deprecation", "Sunset", "Warning"} {
			if got := resp.Header.Get(h); got != "" {
				t.Errorf("GET %s: got %s %q; want none", path, h, got)
			}
		}
		if path == "/api/changelog.json" {
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: got %d; want 200 without a credential", path, resp.StatusCode)
			}
			v.Check(t, httptest.NewRequest(http.MethodGet, path, nil), resp, body)
			want, err := contract.Current().Changelog.Published()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(body, want) {
				t.Errorf("got changelog %s; want the committed one", body)
			}
		}
	}
}

// TestRegistryNamingNoOperation: a registry naming an operation the
// document does not have is a defect of the build, refused at start-up.
func TestRegistryNamingNoOperation(t *testing.T) {
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), `"GET /v1/nothing"`) {
			t.Fatalf("got panic %v; want one naming the operation", p)
		}
	}()
	New(Deps{Contract: &contract.Evolution{Registry: contract.Registry{Deprecations: []contract.Deprecation{
		{Operation: "GET /v1/nothing", Since: "2026-12-01", Sunset: "2027-01-01", Note: "n"}}}}})
}
