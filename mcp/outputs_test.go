package mcp

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite openapi_components.json from ../http/openapi/*.yaml (go generate ./mcp)")

// contractComponents reads every components.schemas of the contract's
// fragments, refs rewritten from #/components/schemas/ to #/$defs/.
func contractComponents(t *testing.T) map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "http", "openapi", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("got fragments %v, %v; want the contract's YAML", files, err)
	}
	out := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Components struct {
				Schemas map[string]any `yaml:"schemas"`
			} `yaml:"components"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for name, s := range doc.Components.Schemas {
			out[name] = rewriteRefs(s)
		}
	}
	return out
}

// rewriteRefs returns v with every "#/components/schemas/X" ref as "#/$defs/X".
func rewriteRefs(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			if s, ok := x.(string); ok && k == "$ref" {
				m[k] = strings.Replace(s, "#/components/schemas/", "#/$defs/", 1)
				continue
			}
			m[k] = rewriteRefs(x)
		}
		return m
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = rewriteRefs(x)
		}
		return out
	}
	return v
}

// TestOpenAPIComponentsAreCurrent checks that openapi_components.json is
// exactly the closure of the contract's components the output schemas
// name, as the YAML says now: the tools and the REST routes answer the one
// shape. With -update (go generate ./mcp) it rewrites the file instead.
func TestOpenAPIComponentsAreCurrent(t *testing.T) {
	all := contractComponents(t)
	raw := components{}
	for name, s := range all {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		raw[name] = b
	}
	var roots []string
	for _, r := range outputSchemas {
		roots = append(roots, r)
	}
	names, missing := raw.closure(roots...)
	if len(missing) > 0 {
		t.Fatalf("the output schemas name %v, which no fragment of http/openapi defines", missing)
	}
	want := map[string]any{}
	for _, n := range names {
		want[n] = all[n]
	}
	b, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	if *update {
		if err := os.WriteFile("openapi_components.json", b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(b, openapiComponents) {
		t.Error("openapi_components.json differs from the contract (http/openapi/*.yaml): run go generate ./mcp")
	}
}

// TestOutputSchemas checks every declared output schema: an object schema
// that compiles (draft 2020-12), and one per tool.
func TestOutputSchemas(t *testing.T) {
	s := newTestServer(t)
	if got, want := len(outputSchemas), len(s.ToolNames()); got != want {
		t.Errorf("got %d output schemas for %d tools; want one each", got, want)
	}
	for _, name := range s.ToolNames() {
		t.Run(name, func(t *testing.T) {
			raw := s.tools[name].def.RawOutputSchema
			var head struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal(raw, &head); err != nil || head.Type != "object" {
				t.Fatalf("got output schema %s; want an object schema", raw)
			}
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			c := jsonschema.NewCompiler()
			c.DefaultDraft(jsonschema.Draft2020)
			if err := c.AddResource("mem:///out.json", doc); err != nil {
				t.Fatal(err)
			}
			sch, err := c.Compile("mem:///out.json")
			if err != nil {
				t.Fatalf("got %v compiling the output schema", err)
			}
			// Not vacuous: an empty answer is refused (every answer has
			// required fields).
			if err := sch.Validate(map[string]any{}); err == nil {
				t.Error("got {} valid; want the output schema to require the answer's fields")
			}
		})
	}
}

// jsonFields lists the JSON names of a struct type's fields (embedded
// structs flattened).
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// schemaProps lists the property names of an object schema at path (a
// property path inside it, e.g. "elements.items").
func schemaProps(t *testing.T, schema string, path ...string) []string {
	t.Helper()
	var node map[string]any
	if err := json.Unmarshal([]byte(schema), &node); err != nil {
		t.Fatal(err)
	}
	for _, p := range path {
		if p == "items" {
			node = node["items"].(map[string]any)
			continue
		}
		node = node["properties"].(map[string]any)[p].(map[string]any)
	}
	var out []string
	for k := range node["properties"].(map[string]any) {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestMCPShapesMatchTheirGoTypes checks that the schemas written in
// outputs.go name exactly the JSON fields of the Go types the tools answer,
// so a field added to one is not forgotten in the other.
func TestMCPShapesMatchTheirGoTypes(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		path   []string
		typ    any
	}{
		{"screen", oScreen, nil, screen{}},
		{"screen image", oScreen, []string{"image"}, imageSize{}},
		{"element", oElement, nil, element{}},
		{"action", oAction, nil, actionResult{}},
		{"batch step", oBatch, []string{"steps", "items"}, stepReport{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, want := schemaProps(t, tt.schema, tt.path...), jsonFields(reflect.TypeOf(tt.typ))
			if !slices.Equal(got, want) {
				t.Errorf("got schema properties %v; want the Go type's JSON fields %v (mcp/outputs.go)", got, want)
			}
		})
	}
}
