package mcp_test

import (
	"slices"
	"strings"
	"testing"

	"phonefleet/http/contract"
	"phonefleet/mcp"
	"phonefleet/testutil/fleettest"
)

// TestDeprecatedToolsThroughClients runs the real edge over a fleet with a
// contract of the test's own: list_devices and get_receipt deprecated,
// observe's meaning changed, and a changelog in which a tool was removed
// after its sunset. Every client (both SDKs, both protocol eras) sees the
// tool surface version moved in serverInfo, the notice and the _meta on
// the deprecated tools' definitions, the @since line on observe, and on
// every result of a deprecated tool the deprecation in _meta, plus the
// notice as the first text block of a success (the JSON text block stays
// last; a failure keeps its envelope as its one text block). A tool not
// deprecated answers as before.
func TestDeprecatedToolsThroughClients(t *testing.T) {
	reg := contract.Registry{
		Deprecations: []contract.Deprecation{
			{Tool: "list_devices", Since: "2026-12-01", Sunset: "2027-03-01", Replacement: "get_device", Note: "Devices are listed over REST."},
			{Tool: "get_receipt", Since: "2026-12-01", Sunset: "2027-03-01", Note: "Receipts are read over REST."},
		},
		Meanings: []contract.Meaning{{Tool: "observe", Since: "2026-12-02", Note: "elements defaults to interactive."}},
	}
	current := contract.Current().Changelog
	log := contract.Changelog{Entries: append(slices.Clone(current.Entries),
		contract.Entry{Date: "2026-12-01", Kind: contract.KindDeprecated, Tool: "retired_tool", Effective: "2027-01-01", Note: "Going."},
		contract.Entry{Date: "2027-01-02", Kind: contract.KindRemoved, Tool: "retired_tool", Previous: strings.Repeat("a", 64), Note: "No longer served."},
	)}
	if current.ToolSurfaceVersion() != "1.0.0" || log.ToolSurfaceVersion() != "2.0.0" {
		t.Fatalf("got versions %s and %s; want 1.0.0 before the removal and 2.0.0 after", current.ToolSurfaceVersion(), log.ToolSurfaceVersion())
	}
	svc := startServiceEvolving(t, fleettest.Options{Devices: 1, WaitForReceipts: true}, &contract.Evolution{Changelog: log, Registry: reg})
	dev := svc.fleet.DeviceIDs[0]
	listNotice := "Deprecated since 2026-12-01: The tool list_devices stops being served on 2027-03-01. Use get_device instead. Devices are listed over REST."

	deprecationOf := func(t *testing.T, meta map[string]any) map[string]any {
		t.Helper()
		d, _ := meta[mcp.DeprecationMeta].(map[string]any)
		if d == nil {
			t.Fatalf("got _meta %v; want %s", meta, mcp.DeprecationMeta)
		}
		return d
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			a := c.connect(t, svc.url, "")
			if name, version := a.serverInfo(); name != mcp.ServerName || version != "2.0.0" {
				t.Errorf("got serverInfo %s %s; want %s 2.0.0: a tool was removed", name, version, mcp.ServerName)
			}

			tools := map[string]sdkTool{}
			for _, tl := range a.tools(t) {
				tools[tl.Name] = tl
			}
			if d := tools["list_devices"].Description; !strings.HasPrefix(d, listNotice+"\n\n") {
				t.Errorf("list_devices: got description %q; want the notice first", d)
			}
			if d := deprecationOf(t, tools["list_devices"].Meta); d["sunset"] != "2027-03-01" || d["replacement"] != "get_device" {
				t.Errorf("list_devices: got _meta deprecation %v", d)
			}
			if d := tools["observe"].Description; !strings.HasSuffix(d, "\n\n@since 2026-12-02: elements defaults to interactive.") {
				t.Errorf("observe: got description %q; want the @since line last", d)
			}
			if tl := tools["get_device"]; strings.Contains(tl.Description, "Deprecated") || tl.Meta[mcp.DeprecationMeta] != nil {
				t.Errorf("get_device: got %+v; want no deprecation", tl)
			}

			ok := mustCall(t, a, "list_devices", map[string]any{})
			if len(ok.texts) != 2 || ok.texts[0] != listNotice {
				t.Errorf("list_devices: got text blocks %q; want the notice, then the JSON", ok.texts)
			}
			var page struct {
				Devices []struct {
					DeviceID string `json:"deviceId"`
				} `json:"devices"`
			}
			ok.json(t, &page)
			if len(page.Devices) != 1 || page.Devices[0].DeviceID != dev {
				t.Errorf("list_devices: got %+v; want the one device", page)
			}
			if d := deprecationOf(t, ok.meta); d["since"] != "2026-12-01" || d["notice"] != listNotice {
				t.Errorf("list_devices: got result _meta deprecation %v", d)
			}

			env := mustFail(t, a, "get_receipt", map[string]any{"idempotencyKey": "no-such-key"})
			if env["name"] != "get_receipt" {
				t.Errorf("get_receipt: got envelope %v", env)
			}
			failed, err := a.call(t, "get_receipt", map[string]any{"idempotencyKey": "no-such-key"})
			if err != nil {
				t.Fatal(err)
			}
			if d := deprecationOf(t, failed.meta); d["sunset"] != "2027-03-01" {
				t.Errorf("get_receipt: got result _meta deprecation %v", d)
			}

			plain := mustCall(t, a, "get_device", map[string]any{"deviceId": dev})
			if len(plain.texts) != 1 || plain.meta[mcp.DeprecationMeta] != nil {
				t.Errorf("get_device: got texts %q and _meta %v; want the JSON alone", plain.texts, plain.meta)
			}
		})
	}
}
