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

// TestMetaMode connects with ?tools=meta: three tools listed, the others
// reachable only through call_tool (with their own scope guard, input
// schema and answers), and the meta tools absent from other connections.
func TestMetaMode(t *testing.T) {
	s := newTestServer(t)
	readOnly := domain.Auth{OrgID: "org_1", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: []domain.Scope{domain.ScopeDevicesRead}}
	call := func(query, name, args string) (int, map[string]any) {
		t.Helper()
		const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
		r := httptest.NewRequest(http.MethodPost, "/mcp"+query, strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{`+meta+`,"name":"`+name+`","arguments":`+args+`}}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		r.Header.Set("Mcp-Method", "tools/call")
		r.Header.Set("Mcp-Name", name)
		r = r.WithContext(domain.WithAuth(testutil.Context(t), readOnly))
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		var resp map[string]any
		_ = json.NewDecoder(w.Result().Body).Decode(&resp)
		return w.Code, resp
	}
	text := func(resp map[string]any) string {
		res, _ := resp["result"].(map[string]any)
		content, _ := res["content"].([]any)
		if len(content) == 0 {
			return ""
		}
		return content[len(content)-1].(map[string]any)["text"].(string)
	}

	if _, got := toolsListBytes(t, s, readOnly, "?tools=meta"); !slices.Equal(got, []string{"call_tool", "describe_tool", "list_tools"}) {
		t.Errorf("got tools/list %v; want the three meta tools", got)
	}
	if _, got := toolsListBytes(t, s, domain.LocalOperator("org_1"), ""); slices.Contains(got, "call_tool") {
		t.Error("got call_tool listed without ?tools=meta; want it absent")
	}

	_, resp := call("?tools=meta", "list_tools", `{"toolset":"leases"}`)
	var listed struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if err := json.Unmarshal([]byte(text(resp)), &listed); err != nil || len(listed.Tools) != 1 || listed.Tools[0].Name != "list_leases" {
		t.Errorf("list_tools leases for a read-only key: got %v; want list_leases alone", text(resp))
	}
	_, resp = call("?tools=meta", "describe_tool", `{"name":"observe"}`)
	if !strings.Contains(text(resp), `"inputSchema":{`) || !strings.Contains(text(resp), `"observe"`) {
		t.Errorf("describe_tool observe: got %s; want its definition", text(resp))
	}
	_, resp = call("?tools=meta", "describe_tool", `{"name":"tap"}`)
	if !strings.Contains(text(resp), `"permission_denied"`) || !strings.Contains(text(resp), `"devices:act"`) {
		t.Errorf("describe_tool tap for a read-only key: got %s; want permission_denied naming devices:act", text(resp))
	}
	_, resp = call("?tools=meta", "call_tool", `{"name":"tap","arguments":{}}`)
	if !strings.Contains(text(resp), `"permission_denied"`) {
		t.Errorf("call_tool tap for a read-only key: got %s; want permission_denied", text(resp))
	}
	_, resp = call("?tools=meta", "call_tool", `{"name":"get_device","arguments":{"deviceId":"nope"}}`)
	if !strings.HasPrefix(text(resp), "-32602: ") {
		t.Errorf("call_tool with arguments off the schema: got %s; want the -32602 result", text(resp))
	}
	_, resp = call("?tools=meta", "call_tool", `{"name":"teleport","arguments":{}}`)
	if !strings.Contains(text(resp), `"unknown_tool"`) {
		t.Errorf("call_tool of no tool: got %s; want invalid_argument with reason unknown_tool", text(resp))
	}
	if status, _ := call("?tools=meta", "get_device", `{}`); status != http.StatusNotFound {
		t.Errorf("get_device called directly on a meta connection: got %d; want 404 (-32601)", status)
	}
	if status, _ := call("", "call_tool", `{"name":"get_device","arguments":{}}`); status != http.StatusNotFound {
		t.Errorf("call_tool without ?tools=meta: got %d; want 404 (-32601)", status)
	}
}
