package mcp

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/testutil"
)

// TestEveryToolIsInOneToolset checks the groups: every tool in exactly one.
func TestEveryToolIsInOneToolset(t *testing.T) {
	s := newTestServer(t)
	if err := checkToolsets(s.ToolNames()); err != nil {
		t.Fatal(err)
	}
}

// TestToolsetChoice connects with ?tools= and checks what the choice
// does: tools/list narrowed to the chosen groups (less what the credential
// cannot use), a call outside them -32601 like a name that is no tool, a
// call inside them served, and an unknown group refused on every request.
func TestToolsetChoice(t *testing.T) {
	s := newTestServer(t)
	readOnly := domain.Auth{OrgID: "org_1", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: []domain.Scope{domain.ScopeDevicesRead}}
	post := func(query, body string, a domain.Auth) (int, string) {
		const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
		r := httptest.NewRequest(http.MethodPost, "/mcp"+query, strings.NewReader(strings.Replace(body, `"params":{`, `"params":{`+meta+`,`, 1)))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		var head struct {
			Method string `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		_ = json.Unmarshal([]byte(body), &head)
		r.Header.Set("Mcp-Method", head.Method)
		if head.Params.Name != "" {
			r.Header.Set("Mcp-Name", head.Params.Name)
		}
		r = r.WithContext(domain.WithAuth(testutil.Context(t), a))
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Result().Body)
		return w.Code, string(b)
	}

	t.Run("list narrowed", func(t *testing.T) {
		_, got := toolsListBytes(t, s, domain.LocalOperator("org_1"), "?tools=observe,leases")
		want := slices.Sorted(slices.Values(slices.Concat(toolsets["observe"], toolsets["leases"])))
		if !slices.Equal(got, want) {
			t.Errorf("got tools/list %v; want %v", got, want)
		}
		// The credential still decides: a read-only key has no lease tools.
		_, got = toolsListBytes(t, s, readOnly, "?tools=observe,leases")
		if want := []string{"get_frame", "list_leases", "observe", "wait_for"}; !slices.Equal(got, want) {
			t.Errorf("read-only key: got tools/list %v; want %v", got, want)
		}
		if _, got := toolsListBytes(t, s, domain.LocalOperator("org_1"), "?tools=all"); len(got) != len(s.ToolNames()) {
			t.Errorf("tools=all: got %d tools; want all %d", len(got), len(s.ToolNames()))
		}
	})

	t.Run("call outside the choice", func(t *testing.T) {
		status, body := post("?tools=observe", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_devices","arguments":{}}}`, readOnly)
		var resp struct {
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &resp); err != nil || status != http.StatusNotFound || resp.Error.Code != -32601 ||
			!strings.Contains(resp.Error.Message, "toolsets this connection chose") {
			t.Errorf("got %d %s; want 404 and -32601 naming the choice", status, body)
		}
	})

	t.Run("call inside the choice", func(t *testing.T) {
		// Nothing is behind the test server: the tool runs and answers
		// internal_error, a tool result, not a protocol error.
		status, body := post("?tools=devices", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"list_devices","arguments":{}}}`, readOnly)
		if status != http.StatusOK || !strings.Contains(body, `"isError":true`) || strings.Contains(body, "-32601") {
			t.Errorf("got %d %s; want the tool's own result", status, body)
		}
	})

	t.Run("unknown toolset", func(t *testing.T) {
		status, body := post("?tools=observe,teleport", `{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{}}`, readOnly)
		if status != http.StatusBadRequest || !strings.Contains(body, `-32602`) || !strings.Contains(body, `unknown toolset \"teleport\"`) {
			t.Errorf("got %d %s; want 400, -32602 naming the unknown toolset", status, body)
		}
	})
}
