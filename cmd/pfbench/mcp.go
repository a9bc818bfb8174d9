package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/internal/config"
)

func init() {
	addSection("mcp", 70, func(ctx context.Context, b *bench, o options) error { return b.mcpLatency(ctx, o.cell) })
}

// mcpLatency measures tool-call latency over MCP (POST /mcp) beside the
// same work over REST, on one sim phone of one service, one call at a time,
// interleaved call by call so all see the same conditions: a screenshot,
// the UI elements, and a tap. The MCP calls are made twice: as plain
// JSON-RPC requests on the sessionless 2026-07-28 revision, read whole but
// not decoded, exactly as the REST calls are (like for like: the service's
// own cost), and through mcp-go's client (what an agent built on it pays,
// its decoding included). The target is the service's MCP p50 and p99
// within 1.5× of REST's: the tool surface adds JSON-RPC framing, schema
// validation and the compact element list, nothing else.
func (b *bench) mcpLatency(ctx context.Context, d time.Duration) error {
	header("Tool calls over MCP vs the same calls over REST (one sim phone, one caller, interleaved)")
	db, err := b.newDB(ctx)
	if err != nil {
		return err
	}
	db.pool.Reset()
	dir, err := os.MkdirTemp("", "pfbench-mcp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env := map[string]string{"DATABASE_URL": db.url, "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_MODE": "local",
		"SERVICE_DATA_DIR": dir, "SERVICE_SIM_DEVICES": "1", "SERVICE_LOG_LEVEL": "error"}
	cfg, err := config.Load(flag.NewFlagSet("pfbench", flag.ContinueOnError), nil, func(k string) string { return env[k] })
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	a, err := service.New(sctx, cfg, quiet)
	if err != nil {
		stop()
		return err
	}
	served := make(chan error, 1)
	go func() { served <- a.Run(sctx) }()
	defer func() { stop(); <-served }()
	base := "http://" + a.Addr()

	httpc := &http.Client{Timeout: 30 * time.Second}
	rest := func(method, path string, body any, out any) error {
		return restCall(ctx, httpc, method, base+path, body, out)
	}
	tr, err := transport.NewStreamableHTTP(base+"/mcp", transport.WithHTTPBasicClient(httpc))
	if err != nil {
		return err
	}
	mc := mcpclient.NewClient(tr)
	if err := mc.Start(ctx); err != nil {
		return err
	}
	defer mc.Close()
	if _, err := mc.Initialize(ctx, mcpgo.InitializeRequest{}); err != nil {
		return err
	}
	seq := 0
	wire := func(name string, args map[string]any) error {
		seq++
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": seq, "method": "tools/call", "params": map[string]any{
			"name": name, "arguments": args, "_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": mcpgo.ProtocolVersion20260728,
				"io.modelcontextprotocol/clientInfo": map[string]string{"name": "pfbench", "version": "1"}, "io.modelcontextprotocol/clientCapabilities": map[string]any{}}}})
		req, err := http.NewRequestWithContext(ctx, "POST", base+"/mcp", bytes.NewReader(body))
		if err != nil {
			return err
		}
		h := req.Header
		h.Set("Content-Type", "application/json")
		h.Set("Accept", "application/json, text/event-stream")
		h.Set("Mcp-Protocol-Version", mcpgo.ProtocolVersion20260728)
		h.Set("Mcp-Method", "tools/call")
		h.Set("Mcp-Name", name)
		resp, err := httpc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || bytes.Contains(raw, []byte(`"isError":true`)) {
			return fmt.Errorf("%s: %d %.300s", name, resp.StatusCode, raw)
		}
		return nil
	}
	tool := func(name string, args map[string]any) error {
		req := mcpgo.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = name, args
		res, err := mc.CallTool(ctx, req)
		if err == nil && res.IsError {
			err = fmt.Errorf("%s failed: %v", name, res.Content)
		}
		return err
	}

	var list struct {
		Devices []struct {
			DeviceID string `json:"deviceId"`
		} `json:"devices"`
	}
	for wait := time.Now().Add(30 * time.Second); len(list.Devices) == 0 && time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
		if err := rest("GET", "/v1/devices", nil, &list); err != nil {
			return err
		}
	}
	if len(list.Devices) == 0 {
		return fmt.Errorf("the service shows no device")
	}
	dev := list.Devices[0].DeviceID
	var lease struct {
		LeaseID string `json:"leaseId"`
	}
	if err := rest("POST", "/v1/devices/"+dev+"/lease", map[string]int{"ttlSeconds": 3600}, &lease); err != nil {
		return err
	}

	// Each measured call: REST, then the same over MCP on the wire, then
	// through mcp-go's client; n makes every action's key new.
	type measured struct {
		name                  string
		rest, mcpWire, mcpSDK func(n int) error
		restT, wireT, sdkT    []time.Duration
	}
	observe := func(args map[string]any) func(call func(string, map[string]any) error) func(int) error {
		return func(call func(string, map[string]any) error) func(int) error {
			return func(int) error { return call("observe", maps.Clone(args)) }
		}
	}
	shot := observe(map[string]any{"deviceId": dev, "elements": "none"})
	elems := observe(map[string]any{"deviceId": dev, "screenshot": false})
	tap := func(prefix string, call func(string, map[string]any) error) func(int) error {
		return func(n int) error {
			return call("tap", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "x": 540, "y": 1500,
				"idempotencyKey": fmt.Sprintf("bench-%s-%d", prefix, n)})
		}
	}
	both := observe(map[string]any{"deviceId": dev})
	rows := []*measured{
		// What an agent does to look at the screen: one observe over MCP;
		// over REST, which has no combined read, the screenshot and the
		// UI snapshot.
		{name: "observe",
			rest: func(int) error {
				if err := rest("GET", "/v1/devices/"+dev+"/screenshot?format=json", nil, nil); err != nil {
					return err
				}
				return rest("GET", "/v1/devices/"+dev+"/snapshot", nil, nil)
			},
			mcpWire: both(wire), mcpSDK: both(tool)},
		{name: "observe: screenshot",
			rest:    func(int) error { return rest("GET", "/v1/devices/"+dev+"/screenshot?format=json", nil, nil) },
			mcpWire: shot(wire), mcpSDK: shot(tool)},
		{name: "observe: UI elements",
			rest:    func(int) error { return rest("GET", "/v1/devices/"+dev+"/snapshot", nil, nil) },
			mcpWire: elems(wire), mcpSDK: elems(tool)},
		{name: "tap",
			rest: func(n int) error {
				return rest("POST", "/v1/devices/"+dev+"/actions", map[string]any{"action": "tap", "arguments": map[string]int{"x": 540, "y": 1500},
					"idempotencyKey": fmt.Sprintf("bench-rest-%d", n), "leaseId": lease.LeaseID}, nil)
			},
			mcpWire: tap("wire", wire), mcpSDK: tap("sdk", tool)},
	}
	line("%-21s %9s %9s %9s %9s %7s %7s %12s  %s", "call", "REST p50", "REST p99", "MCP p50", "MCP p99", "p50 ×", "p99 ×",
		"mcp-go p50", "target MCP ≤ 1.5× REST")
	for _, m := range rows {
		warm := time.Now().Add(time.Second)
		end := warm.Add(d)
		for n := 0; time.Now().Before(end); n++ {
			t0 := time.Now()
			if err := m.rest(n); err != nil {
				return err
			}
			t1 := time.Now()
			if err := m.mcpWire(n); err != nil {
				return err
			}
			t2 := time.Now()
			if err := m.mcpSDK(n); err != nil {
				return err
			}
			t3 := time.Now()
			if t0.After(warm) {
				m.restT, m.wireT, m.sdkT = append(m.restT, t1.Sub(t0)), append(m.wireT, t2.Sub(t1)), append(m.sdkT, t3.Sub(t2))
			}
		}
		r50, r99 := percentile(m.restT, 0.50), percentile(m.restT, 0.99)
		w50, w99 := percentile(m.wireT, 0.50), percentile(m.wireT, 0.99)
		x50, x99 := float64(w50)/float64(r50), float64(w99)/float64(r99)
		rd := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
		line("%-21s %9s %9s %9s %9s %6.2f× %6.2f× %12s  %s (%d calls each)", m.name, rd(r50), rd(r99), rd(w50), rd(w99), x50, x99,
			rd(percentile(m.sdkT, 0.50)), verdict(x50 <= 1.5 && x99 <= 1.5), len(m.wireT))
	}
	return nil
}
