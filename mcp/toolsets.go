package mcp

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Toolsets narrow what one connection sees (issue 29). A client that
// needs only part of the surface names the groups it wants in the URL it
// connects to, e.g. /mcp?tools=observe,act: tools/list then answers only
// the tools of those groups (still less any the credential cannot use),
// and a call to a tool outside them is the JSON-RPC error -32601, as for a
// name that is no tool, because on this connection it is none. Without
// the parameter (or with tools=all) the connection sees every tool.
//
// The choice is a client's, made per request from the URL like the scope
// filter is made from the credential: Streamable HTTP sends every request
// of a session to the URL it connected to, so the choice holds for the
// whole session without being stored.

// toolsetAll names every group at once.
const toolsetAll = "all"

// toolsets are the groups a connection may choose, by name; every tool is
// in exactly one (New fails otherwise).
var toolsets = map[string][]string{
	"devices":  {"list_devices", "get_device", "get_driving", "wake_device", "stop_device", "rename_device"},
	"leases":   {"acquire_lease", "renew_lease", "release_lease", "list_leases"},
	"observe":  {"observe", "get_frame", "wait_for"},
	"act":      {"tap", "tap_element", "double_tap", "long_press", "swipe", "type_text", "press_key", "open_app", "install_catalog_app", "batch_actions"},
	"receipts": {"get_receipt", "list_receipts", "review_receipt"},
	"webhooks": {"list_webhooks", "create_webhook", "update_webhook", "rotate_webhook_secret", "test_webhook", "delete_webhook", "list_webhook_deliveries"},
	"runs":     {"start_run", "list_runs", "get_run", "pause_run", "resume_run", "cancel_run", "get_run_frames", "get_run_divergence"},
	"apps":     {"get_app_catalog", "create_app_installation", "get_app_installation", "get_app_inventory"},
}

// toolsetNames are the group names, sorted, for messages and docs.
func toolsetNames() []string { return slices.Sorted(maps.Keys(toolsets)) }

// checkToolsets fails when a tool of names is in no group or in two, or a
// group names a tool that does not exist.
func checkToolsets(names []string) error {
	group := map[string]string{}
	for g, tools := range toolsets {
		for _, n := range tools {
			if other, dup := group[n]; dup {
				return fmt.Errorf("mcp: tool %s is in toolsets %s and %s", n, other, g)
			}
			if !slices.Contains(names, n) {
				return fmt.Errorf("mcp: toolset %s names %s, which is no tool", g, n)
			}
			group[n] = g
		}
	}
	for _, n := range names {
		if _, ok := group[n]; !ok {
			return fmt.Errorf("mcp: tool %s is in no toolset (mcp/toolsets.go)", n)
		}
	}
	return nil
}

// chosenTools is the set of tool names a connection chose with the tools
// parameter; nil is every tool.
type chosenTools map[string]bool

// parseToolsets reads the tools parameter: group names separated by
// commas. It refuses an unknown name, naming the known ones.
func parseToolsets(param string) (chosenTools, error) {
	if strings.TrimSpace(param) == "" {
		return nil, nil
	}
	chosen := chosenTools{}
	for _, g := range strings.Split(param, ",") {
		g = strings.TrimSpace(g)
		if g == toolsetAll {
			return nil, nil
		}
		if g == toolsetMeta {
			for _, n := range metaToolNames {
				chosen[n] = true
			}
			continue
		}
		tools, ok := toolsets[g]
		if !ok {
			return nil, fmt.Errorf("unknown toolset %q in ?tools=: choose among %s, or %s, or %s", g,
				strings.Join(toolsetNames(), ", "), toolsetAll, toolsetMeta)
		}
		for _, n := range tools {
			chosen[n] = true
		}
	}
	return chosen, nil
}

// has reports whether the connection's choice includes tool name.
func (c chosenTools) has(name string) bool { return c == nil || c[name] }

// chosenKey carries the request's chosenTools.
type chosenKey struct{}

func chosenFrom(ctx context.Context) chosenTools {
	c, _ := ctx.Value(chosenKey{}).(chosenTools)
	return c
}
