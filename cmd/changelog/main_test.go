package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	httpapi "phonefleet/http"
	"phonefleet/http/contract"
)

// TestChangelogIsCurrent is the CI check of spec 9.11: the service as
// built (its OpenAPI document's fingerprints and its tools') is the
// committed baseline, the baseline follows from the committed changelog,
// and every deprecation and meaning change of the registry is announced in
// it. A shape changed without running `make changelog` fails here, saying
// what moved and how to record it.
func TestChangelogIsCurrent(t *testing.T) {
	built, err := builtSurface()
	if err != nil {
		t.Fatal(err)
	}
	ev := contract.Current()
	if err := contract.Check(built, contract.Baseline(), ev.Changelog, ev.Registry); err != nil {
		t.Fatal(err)
	}
}

// TestChangelogCheckFailsOnAMovedShape moves a shape on purpose, in the
// real OpenAPI document (GET /v1/devices gets a required query parameter,
// a breaking change) and in the tools' fingerprints (observe's schema
// moves), and shows the check failing on each with what moved and how to
// regenerate; then runs the generator over copies of the committed files
// and shows the check passing on what it wrote: a dated "moved" entry
// holding the old and the new fingerprint, and the new baseline.
func TestChangelogCheckFailsOnAMovedShape(t *testing.T) {
	built, err := builtSurface()
	if err != nil {
		t.Fatal(err)
	}
	ev := contract.Current()
	doc, err := httpapi.OpenAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(doc, &root); err != nil {
		t.Fatal(err)
	}
	op := root["paths"].(map[string]any)["/v1/devices"].(map[string]any)["get"].(map[string]any)
	params, _ := op["parameters"].([]any)
	op["parameters"] = append(params, map[string]any{"name": "site", "in": "query", "required": true, "schema": map[string]any{"type": "string"}})
	movedDoc, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := httpapi.Fingerprints(movedDoc)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]string{}
	for k, v := range built.Tools {
		tools[k] = v
	}
	tools["observe"] = strings.Repeat("0", 64)

	for _, tc := range []struct {
		name  string
		moved contract.Surface
		what  string
	}{
		{"an operation's parameter", contract.Surface{Operations: ops, Tools: built.Tools}, "GET /v1/devices moved"},
		{"a tool's schema", contract.Surface{Operations: built.Operations, Tools: tools}, "tool observe moved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := contract.Check(tc.moved, contract.Baseline(), ev.Changelog, ev.Registry)
			if err == nil {
				t.Fatal("got no error from the check; want the moved shape refused")
			}
			t.Logf("the check says:\n%v", err)
			msg := err.Error()
			for _, want := range []string{tc.what, "has no entry for it", "Run make changelog (go run ./cmd/changelog)"} {
				if !strings.Contains(msg, want) {
					t.Errorf("got message %q; want it to mention %q", msg, want)
				}
			}
			if n := strings.Count(msg, "\n  - "); n != 1 {
				t.Errorf("got %d problems; want exactly the one moved shape", n)
			}

			dir := t.TempDir()
			for _, name := range []string{contract.BaselineFile, contract.ChangelogFile} {
				b, err := os.ReadFile(filepath.Join("..", "..", "http", "contract", name))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var out bytes.Buffer
			if err := generate(dir, tc.moved, ev.Registry, "2026-12-01", &out); err != nil {
				t.Fatal(err)
			}
			t.Logf("the generator says:\n%s", out.String())
			baseline, log, err := readFiles(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := contract.Check(tc.moved, baseline, log, ev.Registry); err != nil {
				t.Fatalf("after generating: %v", err)
			}
			last := log.Entries[len(log.Entries)-1]
			subject := last.Operation
			if last.Tool != "" {
				subject = "tool " + last.Tool
			}
			if last.Date != "2026-12-01" || last.Kind != contract.KindMoved || !strings.HasPrefix(tc.what, subject+" ") ||
				last.Previous == "" || last.Fingerprint == "" || last.Previous == last.Fingerprint {
				t.Fatalf("got last entry %+v; want %s dated 2026-12-01 with both fingerprints", last, tc.what)
			}
			if len(log.Entries) != len(ev.Changelog.Entries)+1 {
				t.Errorf("got %d entries; want one more than the %d committed", len(log.Entries), len(ev.Changelog.Entries))
			}
			// The committed files stay unchanged by a check of copies.
			if err := contract.Check(built, contract.Baseline(), ev.Changelog, ev.Registry); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCommandCheck runs the command's -check over the committed files.
func TestCommandCheck(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-check"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "accounts for the built service") {
		t.Fatalf("got %q", out.String())
	}
}
