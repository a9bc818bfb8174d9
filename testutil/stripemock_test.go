package testutil

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestStripeMockAnswersAndIsShared(t *testing.T) {
	base := StripeMock(t)
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "" || u.Port() == "12111" {
		t.Fatalf("got %q; want http://127.0.0.1:<a free port>", base)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/customers", nil)
	req.Header.Set("Authorization", "Bearer "+stripeMockTestKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var list struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&list); err != nil || res.StatusCode != http.StatusOK || list.Object != "list" {
		t.Fatalf("GET /v1/customers: got %s, object %q (%v); want 200 and a list", res.Status, list.Object, err)
	}
	// It validates requests against Stripe's API: an unknown parameter is refused.
	req, _ = http.NewRequest(http.MethodPost, base+"/v1/customers", strings.NewReader(url.Values{"no_such_parameter": {"x"}}.Encode()))
	req.Header.Set("Authorization", "Bearer "+stripeMockTestKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res2.Body)
	res2.Body.Close()
	if res2.StatusCode != http.StatusBadRequest {
		t.Fatalf("POST /v1/customers with an unknown parameter: got %s %s; want 400", res2.Status, body)
	}
	if again := StripeMock(t); again != base {
		t.Fatalf("second call: got %q; want the same process at %q", again, base)
	}
}
