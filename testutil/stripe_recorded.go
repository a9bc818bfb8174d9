package testutil

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
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

// StripeRecordedLists returns the base URL of the payment provider's API
// for reconciliation tests, and only for them: stripe-mock answers its
// fixed fixtures to list calls whatever was created, so a reconciliation
// test cannot plant a difference there. GET /v1/subscriptions,
// /v1/payment_intents and /v1/refunds answer the recorded list answers in
// dir (subscriptions.json, payment_intents.json, refunds.json: Stripe list
// objects, each a text/template executed with vars, so they can name the
// ids a test made); every other request is passed to upstream, the real
// stripe-mock (testutil.StripeMock). The server stops at t.Cleanup.
func StripeRecordedLists(t testing.TB, upstream, dir string, vars any) string {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatalf("testutil: upstream %q: %v", upstream, err)
	}
	answers := map[string][]byte{}
	for path, name := range recordedListPaths {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("testutil: recorded list: %v", err)
		}
		tmpl, err := template.New(name).Option("missingkey=error").Parse(string(raw))
		if err != nil {
			t.Fatalf("testutil: recorded list %s: %v", name, err)
		}
		var b bytes.Buffer
		if err := tmpl.Execute(&b, vars); err != nil {
			t.Fatalf("testutil: recorded list %s: %v", name, err)
		}
		answers[path] = b.Bytes()
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if body, ok := answers[r.URL.Path]; ok && r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Request-Id", "req_recorded")
			_, _ = w.Write(body)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
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
