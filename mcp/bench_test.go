package mcp_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/domain"
)

// BenchmarkObserve measures the calls of cmd/pfbench's mcp section one
// kind at a time: over REST, and over MCP as plain sessionless JSON-RPC.
func BenchmarkObserve(b *testing.B) {
	svc := startService(b, 1)
	token := svc.key(b, domain.ScopeDevicesRead)
	httpc := &http.Client{}
	do := func(req *http.Request) {
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := httpc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || bytes.Contains(raw, []byte(`"isError":true`)) {
			b.Fatalf("%s: %d %.300s", req.URL, resp.StatusCode, raw)
		}
	}
	var list struct {
		Devices []struct {
			DeviceID string `json:"deviceId"`
		} `json:"devices"`
	}
	req, _ := http.NewRequest("GET", svc.url+"/v1/devices", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	dev := list.Devices[0].DeviceID
	rest := func(path string) func() {
		return func() {
			req, _ := http.NewRequest("GET", svc.url+path, nil)
			do(req)
		}
	}
	wire := func(args map[string]any) func() {
		args["deviceId"] = dev
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{
			"name": "observe", "arguments": args, "_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": mcpgo.ProtocolVersion20260728,
				"io.modelcontextprotocol/clientInfo": map[string]string{"name": "bench", "version": "1"}, "io.modelcontextprotocol/clientCapabilities": map[string]any{}}}})
		return func() {
			req, _ := http.NewRequest("POST", svc.url+"/mcp", bytes.NewReader(body))
			h := req.Header
			h.Set("Content-Type", "application/json")
			h.Set("Accept", "application/json, text/event-stream")
			h.Set("Mcp-Protocol-Version", mcpgo.ProtocolVersion20260728)
			h.Set("Mcp-Method", "tools/call")
			h.Set("Mcp-Name", "observe")
			do(req)
		}
	}
	for _, c := range []struct {
		name string
		call func()
	}{
		{"screenshot/rest", rest("/v1/devices/" + dev + "/screenshot?format=json")},
		{"screenshot/mcp", wire(map[string]any{"elements": "none"})},
		{"elements/rest", rest("/v1/devices/" + dev + "/snapshot")},
		{"elements/mcp", wire(map[string]any{"screenshot": false})},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.call()
			}
		})
	}
}
