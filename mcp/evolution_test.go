package mcp

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"phonefleet/http/contract"
)

// TestNoToolIsDeprecatedToday: spec 9.5. With the production registry no
// tool's description carries a deprecation notice or an @since note, no
// definition carries deprecation _meta, and serverInfo reports the version
// the committed changelog implies.
func TestNoToolIsDeprecatedToday(t *testing.T) {
	s := newTestServer(t)
	for _, name := range s.ToolNames() {
		tl := s.tools[name]
		if strings.Contains(tl.def.Description, "Deprecated since") || strings.Contains(tl.def.Description, "@since") || tl.def.Meta != nil || tl.deprecation != nil {
			t.Errorf("%s: got a deprecation or @since note: %q", name, tl.def.Description)
		}
	}
	if want := contract.Current().Changelog.ToolSurfaceVersion(); ToolSurfaceVersion != want {
		t.Errorf("got ToolSurfaceVersion %s; want %s, derived from the changelog", ToolSurfaceVersion, want)
	}
}

// TestDeprecatedToolDefinitions gives the surface a registry of the test's
// own: the deprecated tool's description begins with the notice and its
// definition carries the deprecation in _meta; the tool with a meaning
// change ends with its @since line; nothing else changes, and no
// fingerprint moves. A registry naming no tool is refused.
func TestDeprecatedToolDefinitions(t *testing.T) {
	plain := newTestServer(t)
	reg := contract.Registry{
		Deprecations: []contract.Deprecation{{Tool: "list_leases", Since: "2026-12-01", Sunset: "2027-03-01",
			Replacement: "get_device", Note: "A device names its lease."}},
		Meanings: []contract.Meaning{{Tool: "observe", Since: "2026-12-02", Note: "elements defaults to interactive."}},
	}
	s, err := New(Deps{Contract: &contract.Evolution{Registry: reg}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	notice := "Deprecated since 2026-12-01: The tool list_leases stops being served on 2027-03-01. Use get_device instead. A device names its lease."
	if got, want := s.tools["list_leases"].def.Description, notice+"\n\n"+plain.tools["list_leases"].def.Description; got != want {
		t.Errorf("got description %q; want %q", got, want)
	}
	meta := s.tools["list_leases"].def.Meta
	if meta == nil || meta.AdditionalFields[DeprecationMeta] == nil {
		t.Fatalf("got _meta %+v; want %s", meta, DeprecationMeta)
	}
	b, _ := json.Marshal(meta)
	if want := `{"phonefleet/deprecation":{"notice":"` + notice + `","replacement":"get_device","since":"2026-12-01","sunset":"2027-03-01"}}`; string(b) != want {
		t.Errorf("got _meta %s; want %s", b, want)
	}
	if got := s.tools["observe"].def.Description; !strings.HasSuffix(got, "\n\n@since 2026-12-02: elements defaults to interactive.") {
		t.Errorf("got description %q; want the @since line last", got)
	}
	for _, name := range s.ToolNames() {
		if name != "list_leases" && name != "observe" && s.tools[name].def.Description != plain.tools[name].def.Description {
			t.Errorf("%s: got its description changed", name)
		}
	}
	a, err := plain.ToolFingerprints()
	if err != nil {
		t.Fatal(err)
	}
	b2, err := s.ToolFingerprints()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(a, b2) {
		t.Error("got fingerprints moved by notes; want only shapes to move them")
	}

	_, err = New(Deps{Contract: &contract.Evolution{Registry: contract.Registry{Deprecations: []contract.Deprecation{
		{Tool: "no_such_tool", Since: "2026-12-01", Sunset: "2027-01-01", Note: "n"}}}}})
	if err == nil || !strings.Contains(err.Error(), "no_such_tool") {
		t.Errorf("got %v; want the unknown tool refused", err)
	}
}

// TestToolFingerprintsMoveWithShapeNotProse: a tool's fingerprint covers
// its input and output schemas, without their prose.
func TestToolFingerprintsMoveWithShapeNotProse(t *testing.T) {
	s := newTestServer(t)
	base, err := s.ToolFingerprints()
	if err != nil {
		t.Fatal(err)
	}
	if len(base) != len(s.ToolNames()) {
		t.Fatalf("got %d fingerprints for %d tools", len(base), len(s.ToolNames()))
	}
	def := s.tools["get_device"].def
	tests := []struct {
		name  string
		edit  func(in, out string) (string, string)
		moves bool
	}{
		{"the description changes", func(in, out string) (string, string) { return in, out }, false},
		{"a schema's description changes", func(in, out string) (string, string) {
			return strings.Replace(in, `"description":"`, `"description":"Reworded. `, 1), out
		}, false},
		{"an argument is added", func(in, out string) (string, string) {
			return strings.Replace(in, `"properties":{`, `"properties":{"verbose":{"type":"boolean"},`, 1), out
		}, true},
		{"the output schema changes", func(in, out string) (string, string) {
			return in, strings.Replace(out, `"type":"object"`, `"type":"object","minProperties":1`, 1)
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := def
			d.Description = "something else entirely"
			in, out := tt.edit(string(def.RawInputSchema), string(def.RawOutputSchema))
			d.RawInputSchema, d.RawOutputSchema = json.RawMessage(in), json.RawMessage(out)
			got, err := toolFingerprint(d)
			if err != nil {
				t.Fatal(err)
			}
			if (got != base["get_device"]) != tt.moves {
				t.Fatalf("fingerprint moved: %v; want %v", got != base["get_device"], tt.moves)
			}
		})
	}
}
