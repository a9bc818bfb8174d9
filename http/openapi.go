package httpapi

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"sort"
	"sync"

	"github.com/gorilla/mux"
	"go.yaml.in/yaml/v3"

	"phonefleet/http/kernel"
)

// The OpenAPI 3.1 document is written as fragments: base.yaml holds the
// document's head and the shared components (the error envelopes, standard
// responses, the bearer scheme); every other file is one area's `paths:` and
// `components:`. They are merged into one document at start-up.
//
//go:embed openapi/*.yaml
var openapiFragments embed.FS

// baseFragment is the fragment that holds everything but the areas.
const baseFragment = "base.yaml"

// embeddedOpenAPI assembles the embedded fragments once per process.
var embeddedOpenAPI = sync.OnceValues(func() ([]byte, error) {
	sub, err := fs.Sub(openapiFragments, "openapi")
	if err != nil {
		return nil, err
	}
	return assembleOpenAPI(sub)
})

// assembleOpenAPI merges base.yaml and every other *.yaml of fsys (in name
// order) into one JSON document. An area fragment may hold only `paths` and
// `components`; a path or component name defined twice is an error naming
// both fragments, so two areas can never silently replace each other's
// contract. The document's validity as OpenAPI 3.1 is proved by the tests
// (package apitest loads it with kin-openapi), not at every start-up.
func assembleOpenAPI(fsys fs.FS) ([]byte, error) {
	names, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	if !slices.Contains(names, baseFragment) {
		return nil, fmt.Errorf("openapi: %s is missing", baseFragment)
	}
	doc, err := readFragment(fsys, baseFragment)
	if err != nil {
		return nil, err
	}
	m := merger{doc: doc, origin: map[string]string{}}
	if err := m.claimAll(baseFragment, doc); err != nil {
		return nil, err
	}
	sort.Strings(names)
	for _, name := range names {
		if name == baseFragment {
			continue
		}
		frag, err := readFragment(fsys, name)
		if err != nil {
			return nil, err
		}
		if err := m.merge(name, frag); err != nil {
			return nil, err
		}
	}
	return json.Marshal(m.doc)
}

// merger accumulates fragments into doc and remembers which fragment
// defined each path and component, for duplicate errors.
type merger struct {
	doc    map[string]any
	origin map[string]string // "path <path>" or "component <kind>/<name>" → fragment
}

// claimAll records the base fragment's own paths and components.
func (m *merger) claimAll(name string, frag map[string]any) error {
	for _, key := range []string{"paths", "components"} {
		if obj, _ := frag[key].(map[string]any); obj == nil {
			m.doc[key] = map[string]any{}
		}
	}
	return m.walk(name, frag, func(string, string, string, any) {})
}

func (m *merger) merge(name string, frag map[string]any) error {
	for key := range frag {
		if key != "paths" && key != "components" {
			return fmt.Errorf("openapi: %s: an area fragment may hold only paths and components, not %q", name, key)
		}
	}
	return m.walk(name, frag, func(section, kind, key string, value any) {
		dst := m.doc[section].(map[string]any)
		if kind != "" {
			sub, ok := dst[kind].(map[string]any)
			if !ok {
				sub = map[string]any{}
				dst[kind] = sub
			}
			dst = sub
		}
		dst[key] = value
	})
}

// walk visits every path and component of frag, claims it for the fragment
// name (failing on a name already claimed), and hands it to add.
func (m *merger) walk(name string, frag map[string]any, add func(section, kind, key string, value any)) error {
	paths, err := asObject(frag["paths"], name, "paths")
	if err != nil {
		return err
	}
	for _, p := range sortedKeys(paths) {
		if err := m.claim(name, "path "+p); err != nil {
			return err
		}
		add("paths", "", p, paths[p])
	}
	components, err := asObject(frag["components"], name, "components")
	if err != nil {
		return err
	}
	for _, kind := range sortedKeys(components) {
		entries, err := asObject(components[kind], name, "components/"+kind)
		if err != nil {
			return err
		}
		for _, key := range sortedKeys(entries) {
			if err := m.claim(name, "component "+kind+"/"+key); err != nil {
				return err
			}
			add("components", kind, key, entries[key])
		}
	}
	return nil
}

func (m *merger) claim(fragment, key string) error {
	if first, ok := m.origin[key]; ok {
		return fmt.Errorf("openapi: %s is defined in both %s and %s", key, first, fragment)
	}
	m.origin[key] = fragment
	return nil
}

func asObject(v any, fragment, where string) (map[string]any, error) {
	if v == nil {
		return map[string]any{}, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("openapi: %s: %s must be a mapping", fragment, where)
	}
	return obj, nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// readFragment decodes one YAML fragment into JSON-shaped values.
func readFragment(fsys fs.FS, name string) (map[string]any, error) {
	raw, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("openapi: %s: %w", name, err)
	}
	obj, ok := jsonShaped(v).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("openapi: %s: the document must be a mapping", name)
	}
	return obj, nil
}

// jsonShaped turns YAML mappings with non-string keys (an unquoted response
// status such as 200) into JSON objects with string keys.
func jsonShaped(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = jsonShaped(e)
		}
		return t
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[fmt.Sprint(k)] = jsonShaped(e)
		}
		return out
	case []any:
		for i, e := range t {
			t[i] = jsonShaped(e)
		}
		return t
	default:
		return v
	}
}

func (s *Server) registerOpenAPIRoutes(r *mux.Router) {
	r.Handle("/openapi.json", kernel.HandlerFunc(s.getOpenAPI)).Methods(http.MethodGet)
}

func (s *Server) getOpenAPI(w http.ResponseWriter, _ *http.Request) error {
	kernel.WriteBody(w, http.StatusOK, s.openapi)
	return nil
}
