package console

import (
	"encoding/json"
	"maps"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestConnectSrcAllowsTheIssuersOrigin: the page fetches the issuer's
// metadata and its token endpoint, which are other paths than the issuer
// URL, so the policy names the issuer's origin.
func TestConnectSrcAllowsTheIssuersOrigin(t *testing.T) {
	cases := []struct{ issuer, want string }{
		{"", "connect-src 'self';"},
		{"https://idp.example", "connect-src 'self' https://idp.example;"},
		{"https://login.example/tenant/v2.0", "connect-src 'self' https://login.example;"},
		{"http://127.0.0.1:4444/", "connect-src 'self' http://127.0.0.1:4444;"},
	}
	for _, tc := range cases {
		t.Run(tc.issuer, func(t *testing.T) {
			c, err := New(Config{Mode: "hosted", Issuer: tc.issuer, ClientID: "console", Resource: "https://pf.example/mcp"})
			if err != nil {
				t.Fatal(err)
			}
			w := httptest.NewRecorder()
			c.ServeIndex(w, httptest.NewRequest("GET", "/", nil))
			if got := w.Header().Get("Content-Security-Policy"); !strings.Contains(got, tc.want) {
				t.Errorf("got policy %q; want it to contain %q", got, tc.want)
			}
		})
	}
}

// TestConfigIsAnObject: the page's JSON.parse of #console-config must give
// the configuration object (mode, issuer, clientId, resource), not a
// string holding it, and a value cannot end the script element.
func TestConfigIsAnObject(t *testing.T) {
	c, err := New(Config{Mode: "hosted", Issuer: "https://idp.example", ClientID: "console</script><script>alert(1)</script>",
		Resource: "https://pf.example/mcp"})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	c.ServeIndex(w, httptest.NewRequest("GET", "/", nil))
	page := w.Body.String()
	const open = `<script type="application/json" id="console-config">`
	start := strings.Index(page, open)
	if start < 0 {
		t.Fatalf("no configuration element in %s", page)
	}
	raw, _, ok := strings.Cut(page[start+len(open):], "</script>")
	if !ok {
		t.Fatal("the configuration element does not end")
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatalf("the configuration %s is not a JSON object: %v", raw, err)
	}
	want := map[string]string{"mode": "hosted", "issuer": "https://idp.example", "clientId": "console</script><script>alert(1)</script>",
		"resource": "https://pf.example/mcp"}
	if !maps.Equal(got, want) {
		t.Errorf("got configuration %v; want %v", got, want)
	}
}
