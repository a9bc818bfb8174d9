package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"
)

const testBase = `
openapi: 3.1.0
info: {title: t, version: "1"}
paths: {}
components:
  schemas:
    Error: {type: object}
`

func TestAssembleOpenAPI(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		wantErr string // substring; empty means success
	}{
		{
			name: "fragments merge",
			files: map[string]string{
				"base.yaml": testBase,
				"a.yaml": `
paths:
  /a: {get: {responses: {200: {description: ok}}}}
components:
  schemas:
    A: {type: string}
`,
				"b.yaml": `
paths:
  /b: {get: {responses: {'200': {description: ok}}}}
components:
  responses:
    B: {description: b}
`,
			},
		},
		{
			name:    "base missing",
			files:   map[string]string{"a.yaml": "paths: {}"},
			wantErr: "base.yaml is missing",
		},
		{
			name: "duplicate path",
			files: map[string]string{
				"base.yaml": testBase,
				"a.yaml":    "paths:\n  /x: {get: {responses: {200: {description: ok}}}}\n",
				"b.yaml":    "paths:\n  /x: {post: {responses: {200: {description: ok}}}}\n",
			},
			wantErr: "path /x is defined in both a.yaml and b.yaml",
		},
		{
			name: "duplicate component of the base",
			files: map[string]string{
				"base.yaml": testBase,
				"a.yaml":    "components:\n  schemas:\n    Error: {type: string}\n",
			},
			wantErr: "component schemas/Error is defined in both base.yaml and a.yaml",
		},
		{
			name: "duplicate component across areas",
			files: map[string]string{
				"base.yaml": testBase,
				"a.yaml":    "components:\n  headers:\n    H: {schema: {type: string}}\n",
				"b.yaml":    "components:\n  headers:\n    H: {schema: {type: integer}}\n",
			},
			wantErr: "component headers/H is defined in both a.yaml and b.yaml",
		},
		{
			name: "same name in different component kinds is fine",
			files: map[string]string{
				"base.yaml": testBase,
				"a.yaml":    "components:\n  responses:\n    Error: {description: e}\n",
			},
		},
		{
			name: "area fragment with other top-level keys",
			files: map[string]string{
				"base.yaml": testBase,
				"a.yaml":    "info: {title: other}\npaths: {}\n",
			},
			wantErr: `may hold only paths and components, not "info"`,
		},
		{
			name: "malformed YAML",
			files: map[string]string{
				"base.yaml": testBase,
				"a.yaml":    "paths: [\n",
			},
			wantErr: "a.yaml",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for name, data := range tt.files {
				fsys[name] = &fstest.MapFile{Data: []byte(data)}
			}
			doc, err := assembleOpenAPI(fsys)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v; want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v; want none", err)
			}
			var d map[string]any
			if err := json.Unmarshal(doc, &d); err != nil {
				t.Fatalf("assembled document is not JSON: %v", err)
			}
			if d["openapi"] != "3.1.0" {
				t.Errorf("got openapi %v; want 3.1.0", d["openapi"])
			}
		})
	}
}

// TestAssembleOpenAPIKeepsEveryPiece checks the merged document holds each
// fragment's paths and components, with YAML integer keys as strings.
func TestAssembleOpenAPIKeepsEveryPiece(t *testing.T) {
	fsys := fstest.MapFS{
		"base.yaml": {Data: []byte(testBase)},
		"a.yaml":    {Data: []byte("paths:\n  /a: {get: {responses: {200: {description: ok}}}}\ncomponents:\n  schemas:\n    A: {type: string}\n")},
	}
	doc, err := assembleOpenAPI(fsys)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"/a":{"get":{"responses":{"200":{"description":"ok"}}}}`, `"A":{"type":"string"}`, `"Error":{"type":"object"}`} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("got document %s; want it to contain %s", doc, want)
		}
	}
}

func TestEmbeddedOpenAPIAssembles(t *testing.T) {
	if _, err := embeddedOpenAPI(); err != nil {
		t.Fatalf("got %v; want the embedded fragments to assemble", err)
	}
}
