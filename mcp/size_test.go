package mcp

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/testutil"
)

// toolsListBytes answers tools/list for a and returns the size of the
// JSON-RPC response body, as a client receives it, and the tools listed.
func toolsListBytes(t *testing.T, s *Server, a domain.Auth, query string) (int, []string) {
	t.Helper()
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
	r := httptest.NewRequest(http.MethodPost, "/mcp"+query,
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+meta+`}}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	r.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	r.Header.Set("Mcp-Method", "tools/list")
	r = r.WithContext(domain.WithAuth(testutil.Context(t), a))
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	body, _ := io.ReadAll(w.Result().Body)
	var resp struct {
		Result struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		} `json:"result"`
	}
	if w.Code != http.StatusOK || json.Unmarshal(body, &resp) != nil {
		t.Fatalf("tools/list: got %d %.300s; want 200 and a result", w.Code, body)
	}
	var names []string
	for _, tl := range resp.Result.Tools {
		names = append(names, tl.Name)
	}
	return len(body), names
}

// TestToolListSize prints what tools/list costs a client for each scope
// set, and fails above the budgets of issue 29: 30 KB for the full
// default set, 20 KB for a key holding devices:read, devices:lease and
// devices:act (and for every single toolset).
func TestToolListSize(t *testing.T) {
	s := newTestServer(t)
	read, lease, act, runs := domain.ScopeDevicesRead, domain.ScopeDevicesLease, domain.ScopeDevicesAct, domain.ScopeRunsStart
	key := func(scopes ...domain.Scope) domain.Auth {
		return domain.Auth{OrgID: "org_1", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: scopes}
	}
	tests := []struct {
		name  string
		auth  domain.Auth
		query string
		// max is the budget in bytes; 0 is none (printed only).
		max int
	}{
		{name: "full (local operator)", auth: domain.LocalOperator("org_1"), max: 30 << 10},
		{name: "devices:read", auth: key(read)},
		{name: "devices:read+lease+act", auth: key(read, lease, act), max: 20 << 10},
		{name: "devices:read+lease+act+runs:start", auth: key(read, lease, act, runs)},
		{name: "devices:read+lease+act, driving a phone", auth: key(read, lease, act), query: "?tools=devices,leases,observe,act,receipts", max: 20 << 10},
	}
	for _, g := range append(toolsetNames(), toolsetAll, toolsetMeta) {
		tests = append(tests, struct {
			name  string
			auth  domain.Auth
			query string
			max   int
		}{name: "toolset " + g, auth: domain.LocalOperator("org_1"), query: "?tools=" + g, max: 30 << 10})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, names := toolsListBytes(t, s, tt.auth, tt.query)
			t.Logf("tools/list%s: %d tools, %d bytes (%.1f KB)", tt.query, len(names), n, float64(n)/1024)
			if tt.max > 0 && n > tt.max {
				t.Errorf("got %d bytes; want at most %d", n, tt.max)
			}
		})
	}
}
