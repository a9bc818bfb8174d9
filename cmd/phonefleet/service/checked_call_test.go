package service

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"phonefleet/http/apitest"
)

// checkedCaller returns call: it sends method path with body (JSON, when
// not empty) and the bearer token to the service at base, fails the test
// unless the answer's status is want, checks the answer against the
// OpenAPI document v, and returns the answer decoded as a JSON object.
func checkedCaller(t *testing.T, v *apitest.Validator, base string) func(token, method, path, body string, want int) map[string]any {
	return func(token, method, path, body string, want int) map[string]any {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var raw json.RawMessage
		_ = json.NewDecoder(resp.Body).Decode(&raw)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: got %d %s; want %d", method, path, resp.StatusCode, raw, want)
		}
		v.Check(t, httptest.NewRequest(method, path, strings.NewReader(body)), resp, raw)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return out
	}
}
