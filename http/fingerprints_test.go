package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"phonefleet/http/apitest"
)

func fingerprintsOf(t *testing.T, doc string) map[string]string {
	t.Helper()
	raw, err := contractFingerprints([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var out fingerprintsDoc
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out.Operations
}

func TestFingerprintsMoveWithShapeNotProse(t *testing.T) {
	base := `{"openapi":"3.1.0","paths":{"/x":{"get":{"summary":"S","responses":{"200":{"description":"D",
		"headers":{"Retry-After":{"description":"h","schema":{"type":"integer"}}},
		"content":{"application/json":{"schema":{"$ref":"#/components/schemas/X"}}}}}}}},
		"components":{"schemas":{"X":{"type":"object","description":"an x","properties":{"a":{"type":"string"}}}}}}`
	want := fingerprintsOf(t, base)["GET /x"]
	if len(want) != 64 {
		t.Fatalf("got digest %q; want 64 hex digits", want)
	}
	for _, tc := range []struct {
		name  string
		doc   string
		moves bool
	}{
		{"a description changes", strings.ReplaceAll(base, `"an x"`, `"an X, reworded"`), false},
		{"a summary changes", strings.ReplaceAll(base, `"S"`, `"T"`), false},
		{"a header's description changes", strings.ReplaceAll(base, `"h"`, `"hh"`), false},
		{"a referenced schema changes", strings.ReplaceAll(base, `{"a":{"type":"string"}}`, `{"a":{"type":"integer"}}`), true},
		{"a response header is added", strings.ReplaceAll(base, `"headers":{`, `"headers":{"X-New":{"schema":{"type":"string"}},`), true},
		{"a status is added", strings.ReplaceAll(base, `"responses":{`, `"responses":{"404":{"description":"n"},`), true},
		{"security changes", strings.ReplaceAll(base, `"get":{`, `"get":{"security":[],`), true},
		{"a property called description is added", strings.ReplaceAll(base, `{"a":{"type":"string"}}`, `{"a":{"type":"string"},"description":{"type":"string"}}`), true},
		{"a property called title is added", strings.ReplaceAll(base, `{"a":{"type":"string"}}`, `{"a":{"type":"string"},"title":{"type":"string"}}`), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fingerprintsOf(t, tc.doc)["GET /x"]
			if (got != want) != tc.moves {
				t.Fatalf("digest moved: %v; want %v", got != want, tc.moves)
			}
		})
	}
}

func TestFingerprintsOfARecursiveSchema(t *testing.T) {
	doc := `{"paths":{"/t":{"get":{"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/E"}}}}}}}},
		"components":{"schemas":{"E":{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#/components/schemas/E"}}}}}}}`
	a := fingerprintsOf(t, doc)["GET /t"]
	b := fingerprintsOf(t, strings.Replace(doc, `"type":"array"`, `"type":"array","maxItems":9`, 1))["GET /t"]
	if a == "" || a == b {
		t.Fatalf("got %q then %q; want a digest that moves when the recursive schema does", a, b)
	}
}

func TestFingerprintsCoverEveryDocumentedOperation(t *testing.T) {
	s := New(Deps{})
	v := apitest.FromHandler(t, s.Handler())
	req := httptest.NewRequest(http.MethodGet, "/api/contract-fingerprints.json", nil)
	resp, body := apitest.Do(t, s.Handler(), req)
	v.Check(t, req, resp, body)
	var got fingerprintsDoc
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	ops := v.Operations()
	if len(ops) == 0 || len(got.Operations) != len(ops) {
		t.Fatalf("got %d fingerprints for %d documented operations", len(got.Operations), len(ops))
	}
}
