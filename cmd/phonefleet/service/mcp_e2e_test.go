package service

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"phonefleet/mcp"
	"phonefleet/testutil"
)

// bearerTransport adds a bearer token to every request of the go-sdk client.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestServeOffersTheToolSurface starts the service as `phonefleet serve`
// does, in local mode with one sim phone, and connects to /mcp with both
// SDKs' clients: the local operator (no credential) sees every tool and
// observes the phone; a key minted over REST with devices:read alone sees
// the read tools only.
func TestServeOffersTheToolSurface(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(dir, "data"), "SERVICE_SIM_DEVICES": "1"}
	_, base := startApp(t, env)
	ctx := testutil.Context(t)

	// mcp-go's client, as the local operator, on the sessionless revision.
	tr, err := transport.NewStreamableHTTP(base + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr)
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	if err := c.Start(cctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	init, err := c.Initialize(cctx, mcpgo.InitializeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if init.ServerInfo.Name != mcp.ServerName || init.ServerInfo.Version != mcp.ToolSurfaceVersion {
		t.Errorf("got serverInfo %+v; want %s %s", init.ServerInfo, mcp.ServerName, mcp.ToolSurfaceVersion)
	}
	list, err := c.ListTools(cctx, mcpgo.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// 33 device, receipt and webhook tools, the 8 run tools and the 4 app
	// store tools (every scope).
	if got := len(list.Tools); got != 45 {
		t.Errorf("got %d tools for the local operator; want 45", got)
	}
	var devices struct {
		Devices []struct {
			DeviceID string `json:"deviceId"`
		} `json:"devices"`
	}
	for wait := time.Now().Add(20 * time.Second); len(devices.Devices) == 0 && time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
		req := mcpgo.CallToolRequest{}
		req.Params.Name = "list_devices"
		res, err := c.CallTool(cctx, req)
		if err != nil || res.IsError {
			t.Fatalf("list_devices: %v %+v", err, res)
		}
		_ = json.Unmarshal([]byte(res.Content[0].(mcpgo.TextContent).Text), &devices)
	}
	if len(devices.Devices) != 1 {
		t.Fatalf("got %d devices; want the one sim phone", len(devices.Devices))
	}
	req := mcpgo.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = "observe", map[string]any{"deviceId": devices.Devices[0].DeviceID, "maxWidth": 200}
	res, err := c.CallTool(cctx, req)
	if err != nil || res.IsError || len(res.Content) != 2 {
		t.Fatalf("observe: got %v %+v; want an image and a text block", err, res)
	}
	if _, ok := res.Content[0].(mcpgo.ImageContent); !ok {
		t.Errorf("got first block %T; want the screenshot", res.Content[0])
	}

	// A key with devices:read only, minted over REST by the local operator,
	// used by the official client on a session-based revision.
	resp, err := http.Post(base+"/v1/api-keys", "application/json", strings.NewReader(`{"name":"agent","scopes":["devices:read"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var minted struct {
		Token string `json:"token"`
	}
	err = json.NewDecoder(resp.Body).Decode(&minted)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("mint: got %d, %v", resp.StatusCode, err)
	}
	session, err := sdk.NewClient(&sdk.Implementation{Name: "app-test", Version: "1"}, nil).Connect(cctx,
		&sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{minted.Token}}, MaxRetries: -1},
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	tools, err := session.ListTools(cctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	want := []string{"create_webhook", "delete_webhook", "get_device", "get_driving", "get_frame", "get_receipt", "list_devices",
		"list_leases", "list_receipts", "list_webhook_deliveries", "list_webhooks", "observe", "rename_device", "rotate_webhook_secret",
		"test_webhook", "update_webhook", "wait_for"}
	if !slices.Equal(names, want) {
		t.Errorf("got tools %v for a devices:read key; want %v", names, want)
	}

	// A key with apps:read alone sees the app store's reading tools, not
	// the installing one (spec 5.5), and calling that one names the scope.
	resp, err = http.Post(base+"/v1/api-keys", "application/json", strings.NewReader(`{"name":"apps","scopes":["apps:read"]}`))
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&minted)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("mint: got %d, %v", resp.StatusCode, err)
	}
	apps, err := sdk.NewClient(&sdk.Implementation{Name: "apps-test", Version: "1"}, nil).Connect(cctx,
		&sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{minted.Token}}, MaxRetries: -1},
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer apps.Close()
	if tools, err = apps.ListTools(cctx, nil); err != nil {
		t.Fatal(err)
	}
	names = nil
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if want := []string{"get_app_catalog", "get_app_installation", "get_app_inventory"}; !slices.Equal(names, want) {
		t.Errorf("got tools %v for an apps:read key; want %v", names, want)
	}
	called, err := apps.CallTool(cctx, &sdk.CallToolParams{Name: "create_app_installation", Arguments: map[string]any{
		"requestKey": "k", "package": "com.example.calculator", "version": "8.4", "devices": []string{devices.Devices[0].DeviceID}}})
	if err != nil || !called.IsError || !strings.Contains(called.Content[0].(*sdk.TextContent).Text, `"scope":"apps:write"`) {
		t.Errorf("create_app_installation with apps:read: got %v %+v; want permission_denied naming apps:write", err, called)
	}
}
