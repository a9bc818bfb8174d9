package testutil

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/template"
)

// recordedListPaths are the provider's list calls reconciliation makes,
// and the file of dir that answers each.
var recordedListPaths = map[string]string{
	"/v1/subscriptions":   "subscriptions.json",
	"/v1/payment_intents": "payment_intents.json",
	"/v1/refunds":         "refunds.json",
	"/v1/disputes":        "disputes.json",
}

// recordedCharges is the optional file of dir listing the provider's
// charges (each with its invoice expanded, as SubscriptionOfCharge reads
// it): it answers GET /v1/charges and GET /v1/charges/{id}.
const recordedCharges = "charges.json"

// StripeRecordedLists returns the base URL of the payment provider's API
// for reconciliation tests, and only for them: stripe-mock answers its
// fixed fixtures to list calls whatever was created, so a reconciliation
// test cannot plant a difference there. GET /v1/subscriptions,
// /v1/payment_intents, /v1/refunds and /v1/disputes answer the recorded
// list answers in dir (subscriptions.json, payment_intents.json,
// refunds.json, disputes.json: Stripe list objects, each a text/template
// executed with vars, so they can name the ids a test made); when dir has
// charges.json (a list of charges), GET /v1/charges and /v1/charges/{id}
// answer from it; every other request is passed to upstream, the real
// stripe-mock (testutil.StripeMock). The server stops at t.Cleanup.
func StripeRecordedLists(t testing.TB, upstream, dir string, vars any) string {
	t.Helper()
	return NewStripeRecorded(t, upstream, dir, vars).URL
}

// StripeRecorded is a recorded set of provider answers served to
// stripe-go (StripeRecordedLists), whose lists a test may edit to plant a
// difference (Plant).
type StripeRecorded struct {
	// URL is the base URL of the API.
	URL string

	t         testing.TB
	templates map[string]*template.Template // by file name
	vars      any
	mu        sync.Mutex
	plant     func(lists map[string][]map[string]any)
}

// NewStripeRecorded serves the recorded answers of dir as
// StripeRecordedLists does. The templates are executed with vars at each
// request; SetVars replaces them (names the test learns after the server
// started: ids its commands made).
func NewStripeRecorded(t testing.TB, upstream, dir string, vars any) *StripeRecorded {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatalf("testutil: upstream %q: %v", upstream, err)
	}
	r := &StripeRecorded{t: t, templates: map[string]*template.Template{}, vars: vars}
	names := []string{recordedCharges}
	for _, name := range recordedListPaths {
		names = append(names, name)
	}
	for _, name := range names {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if name == recordedCharges && errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatalf("testutil: recorded list: %v", err)
		}
		tmpl, err := template.New(name).Option("missingkey=error").Parse(string(raw))
		if err != nil {
			t.Fatalf("testutil: recorded list %s: %v", name, err)
		}
		r.templates[name] = tmpl
	}
	if _, err := r.lists(); err != nil {
		t.Fatalf("testutil: %v", err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet {
			if body, ok, err := r.answer(req.URL.Path); err != nil {
				t.Errorf("testutil: recorded answer to %s: %v", req.URL.Path, err)
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			} else if ok {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Request-Id", "req_recorded")
				_, _ = w.Write(body)
				return
			}
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// SetVars makes vars the names every later answer is executed with. Pass
// a value, not a pointer the test goes on changing: the server reads it
// on its own goroutines.
func (r *StripeRecorded) SetVars(vars any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vars = vars
}

// Plant makes every later answer the recorded one edited by plant, which
// gets the items of each list by file name ("subscriptions.json", …,
// "charges.json") and may change, add or remove items (a planted
// difference). nil serves the recorded answers again.
func (r *StripeRecorded) Plant(plant func(lists map[string][]map[string]any)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plant = plant
}

// lists renders every recorded list with vars, the plant applied: the
// items of each, by file name.
func (r *StripeRecorded) lists() (map[string][]map[string]any, error) {
	r.mu.Lock()
	vars, plant := r.vars, r.plant
	r.mu.Unlock()
	out := map[string][]map[string]any{}
	for name, tmpl := range r.templates {
		var b bytes.Buffer
		if err := tmpl.Execute(&b, vars); err != nil {
			return nil, fmt.Errorf("recorded list %s: %w", name, err)
		}
		var list struct {
			Data []map[string]any `json:"data"`
		}
		if err := json.Unmarshal(b.Bytes(), &list); err != nil {
			return nil, fmt.Errorf("recorded list %s: %w", name, err)
		}
		out[name] = list.Data
	}
	if plant != nil {
		plant(out)
	}
	return out, nil
}

// answer is the body of the recorded answer to GET path, if one is
// recorded.
func (r *StripeRecorded) answer(path string) ([]byte, bool, error) {
	name, isList := recordedListPaths[path]
	chargeID, isCharge := strings.CutPrefix(path, "/v1/charges/")
	if _, ok := r.templates[recordedCharges]; ok && path == "/v1/charges" {
		name, isList = recordedCharges, true
	}
	if _, ok := r.templates[recordedCharges]; !isList && (!ok || !isCharge || chargeID == "" || strings.Contains(chargeID, "/")) {
		return nil, false, nil
	}
	lists, err := r.lists()
	if err != nil {
		return nil, false, err
	}
	if isList {
		data := lists[name]
		if data == nil {
			data = []map[string]any{}
		}
		b, err := json.Marshal(map[string]any{"object": "list", "url": path, "has_more": false, "data": data})
		return b, true, err
	}
	for _, c := range lists[recordedCharges] {
		if c["id"] == chargeID {
			b, err := json.Marshal(c)
			return b, true, err
		}
	}
	return nil, false, nil
}

// StripeRecordedObjects returns the base URL of the payment provider's API
// answering GET path with the recorded object body (a Stripe object as
// JSON) for each path of answers, and passing every other request to
// upstream, the real stripe-mock. It is for lookups stripe-mock cannot
// answer because it stores nothing: a subscription's charge whose invoice
// names that subscription (stripe-mock's invoices name none). The server
// stops at t.Cleanup.
func StripeRecordedObjects(t testing.TB, upstream string, answers map[string]string) string {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatalf("testutil: upstream %q: %v", upstream, err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if body, ok := answers[r.URL.Path]; ok && r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Request-Id", "req_recorded")
			_, _ = w.Write([]byte(body))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
