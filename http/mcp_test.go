package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"phonefleet/http/apitest"
	"phonefleet/mcp"
)

// TestMCPContract sends POST, GET and DELETE /mcp through the whole edge
// (authentication, body limit) to the tool surface and checks every answer
// against the served document: JSON-RPC answers, the transport's own
// refusals, and the edge's 401 and 413 envelopes.
func TestMCPContract(t *testing.T) {
	tools, err := mcp.New(mcp.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tools.Close() })
	s, _ := newTestServer(t, Deps{MCP: tools, LocalOrgID: "org_contract"})
	v := apitest.FromHandler(t, s.Handler())

	// Open a session (session-based revision) for the requests that need one.
	init := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	init.Header.Set("Content-Type", "application/json")
	resp, body := apitest.Do(t, s.Handler(), init)
	v.Check(t, init, resp, body)
	session := resp.Header.Get("Mcp-Session-Id")
	var initialized struct {
		Result struct {
			ServerInfo struct{ Name, Version string } `json:"serverInfo"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &initialized); err != nil || session == "" ||
		initialized.Result.ServerInfo.Version != mcp.ToolSurfaceVersion {
		t.Fatalf("initialize: got %d %s (session %q); want serverInfo version %s and a session", resp.StatusCode, body, session, mcp.ToolSurfaceVersion)
	}

	rpc := func(body string) func() *http.Request {
		return func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Mcp-Session-Id", session)
			r.Header.Set("Mcp-Protocol-Version", "2025-11-25")
			return r
		}
	}
	modern := func(body, method, name string) func() *http.Request {
		return func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Mcp-Protocol-Version", "2026-07-28")
			r.Header.Set("Mcp-Method", method)
			if name != "" {
				r.Header.Set("Mcp-Name", name)
			}
			return r
		}
	}
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
	tests := []struct {
		name     string
		req      func() *http.Request
		status   int
		contains string
	}{
		{"notification", rpc(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), http.StatusAccepted, ""},
		{"tools/list", rpc(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`), http.StatusOK, `"name":"tap_element"`},
		{"tool failure is a result", rpc(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_devices","arguments":{}}}`),
			http.StatusOK, `"isError":true`},
		{"unknown tool", rpc(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"nope","arguments":{}}}`),
			http.StatusOK, `"code":-32601`},
		{"server/discover on 2026-07-28", modern(`{"jsonrpc":"2.0","id":5,"method":"server/discover","params":{`+meta+`}}`, "server/discover", ""),
			http.StatusOK, `"supportedVersions"`},
		{"unknown tool on 2026-07-28", modern(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"nope","arguments":{},`+meta+`}}`, "tools/call", "nope"),
			http.StatusNotFound, `"code":-32601`},
		{"wrong content type", func() *http.Request {
			r := rpc(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`)()
			r.Header.Set("Content-Type", "text/plain")
			return r
		}, http.StatusBadRequest, "content type"},
		{"refused credential", func() *http.Request {
			r := rpc(`{"jsonrpc":"2.0","id":8,"method":"tools/list"}`)()
			// Local mode without SERVICE_DEV_TOKEN takes any bearer but a
			// key as the operator (spec 5.7); a header that is no bearer at
			// all is still refused before the tool surface sees it.
			r.Header.Set("Authorization", "Basic dXNlcjpwdw==")
			return r
		}, http.StatusUnauthorized, `"reason":"malformed_credentials"`},
		{"body over the limit", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/mcp", bytes.NewReader(bytes.Repeat([]byte(" "), 2<<20)))
			r.Header.Set("Content-Type", "application/json")
			return r
		}, http.StatusRequestEntityTooLarge, `"payload_too_large"`},
		{"chunked body over the limit", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/mcp", bytes.NewReader(bytes.Repeat([]byte(" "), 2<<20)))
			r.ContentLength, r.TransferEncoding = -1, []string{"chunked"}
			r.Header.Set("Content-Type", "application/json")
			return r
		}, http.StatusRequestEntityTooLarge, `"payload_too_large"`},
		{"no standalone stream", func() *http.Request {
			r := httptest.NewRequest(http.MethodGet, "/mcp", nil)
			r.Header.Set("Mcp-Session-Id", session)
			return r
		}, http.StatusMethodNotAllowed, ""},
		{"no GET on 2026-07-28", func() *http.Request {
			r := httptest.NewRequest(http.MethodGet, "/mcp", nil)
			r.Header.Set("Mcp-Protocol-Version", "2026-07-28")
			return r
		}, http.StatusMethodNotAllowed, ""},
		{"end the session", func() *http.Request {
			r := httptest.NewRequest(http.MethodDelete, "/mcp", nil)
			r.Header.Set("Mcp-Session-Id", session)
			return r
		}, http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req()
			resp, body := apitest.Do(t, s.Handler(), req)
			if resp.StatusCode != tt.status {
				t.Fatalf("got status %d; want %d\nbody: %s", resp.StatusCode, tt.status, body)
			}
			v.Check(t, req, resp, body)
			if !strings.Contains(string(body), tt.contains) {
				t.Errorf("got body %s; want it to contain %s", body, tt.contains)
			}
		})
	}

	t.Run("a tool failure's text block is the envelope", func(t *testing.T) {
		req := rpc(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"list_devices","arguments":{}}}`)()
		_, body := apitest.Do(t, s.Handler(), req)
		var out struct {
			Result struct {
				Content []struct {
					Type, Text string
				} `json:"content"`
				IsError           bool `json:"isError"`
				StructuredContent any  `json:"structuredContent"`
			} `json:"result"`
		}
		if err := json.Unmarshal(body, &out); err != nil || len(out.Result.Content) != 1 || out.Result.StructuredContent != nil {
			t.Fatalf("got %s; want one text block and no structuredContent", body)
		}
		v.CheckSchema(t, "MCPToolError", []byte(out.Result.Content[0].Text))
	})

	t.Run("not wired", func(t *testing.T) {
		bare, _ := newTestServer(t, Deps{})
		req := rpc(`{"jsonrpc":"2.0","id":10,"method":"tools/list"}`)()
		resp, body := apitest.Do(t, bare.Handler(), req)
		if resp.StatusCode != http.StatusServiceUnavailable || errorCode(t, body) != "service_unavailable" {
			t.Fatalf("got %d %s; want 503 service_unavailable", resp.StatusCode, body)
		}
		v.Check(t, req, resp, body)
	})

	t.Run("other methods are not served", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodPut, "/mcp", nil)
		resp, body := apitest.Do(t, s.Handler(), req)
		v.CheckUnrouted(t, req, resp, body)
	})
}
