package mcp_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"phonefleet/domain"
	"phonefleet/testutil"
)

// TestToolsetsThroughTheOfficialClient connects the official go-sdk client
// to /mcp?tools=observe,leases on both protocol revisions: the list is the
// chosen groups less what the key cannot use, a tool in them answers, and
// one outside them is a protocol error, not a result.
func TestToolsetsThroughTheOfficialClient(t *testing.T) {
	svc := startService(t, 1)
	dev := svc.fleet.DeviceIDs[0]
	token := svc.key(t, domain.ScopeDevicesRead, domain.ScopeDevicesAct)
	for _, version := range []string{"2025-11-25", ""} {
		name := version
		if name == "" {
			name = "2026-07-28"
		}
		t.Run(name, func(t *testing.T) {
			c := sdk.NewClient(&sdk.Implementation{Name: "phonefleet-test", Version: "1"}, nil)
			ctx, cancel := context.WithTimeout(testutil.Context(t), 30*time.Second)
			defer cancel()
			s, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: svc.url + "/mcp?tools=observe,leases",
				HTTPClient: &http.Client{Transport: bearer{token}}, MaxRetries: -1}, &sdk.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer s.Close()
			res, err := s.ListTools(ctx, nil)
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			var got []string
			for _, tl := range res.Tools {
				got = append(got, tl.Name)
			}
			slices.Sort(got)
			// devices:lease is not held: of the leases group only list_leases.
			if want := []string{"get_frame", "list_leases", "observe", "wait_for"}; !slices.Equal(got, want) {
				t.Errorf("got tools/list %v; want %v", got, want)
			}
			out, err := s.CallTool(ctx, &sdk.CallToolParams{Name: "observe", Arguments: map[string]any{"deviceId": dev, "screenshot": false}})
			if err != nil || out.IsError {
				t.Errorf("observe: got %v, %v; want a result", out, err)
			}
			if _, err := s.CallTool(ctx, &sdk.CallToolParams{Name: "tap", Arguments: map[string]any{"deviceId": dev, "x": 1, "y": 1}}); err == nil {
				t.Error("tap outside the chosen toolsets: got a result; want a protocol error (-32601)")
			}
		})
	}
}
