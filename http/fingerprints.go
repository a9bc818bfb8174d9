package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/gorilla/mux"

	"phonefleet/http/contract"
	"phonefleet/http/kernel"
)

// Contract fingerprints (spec 9.7): every operation of the served OpenAPI
// document gets a digest over its shape — parameters, request body,
// response status set and schemas, response header names, security and
// extensions — with prose (descriptions, summaries, titles, examples)
// excluded and every $ref resolved, so a digest moves exactly when the
// operation's shape moves, including through a shared component.

// fingerprintsDoc is the published file.
type fingerprintsDoc struct {
	Algorithm  string            `json:"algorithm"`
	Operations map[string]string `json:"operations"`
}

// contractFingerprints computes the digests of document doc (JSON).
func contractFingerprints(doc []byte) ([]byte, error) {
	var root map[string]any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	paths, _ := root["paths"].(map[string]any)
	global := root["security"]
	out := fingerprintsDoc{Algorithm: "sha256 over canonical JSON of the operation's shape", Operations: map[string]string{}}
	for path, item := range paths {
		ops, _ := item.(map[string]any)
		shared := ops["parameters"]
		for method, op := range ops {
			o, ok := op.(map[string]any)
			if !ok || !isHTTPMethod(method) {
				continue
			}
			shape := map[string]any{
				"pathParameters": shared,
				"parameters":     o["parameters"],
				"requestBody":    o["requestBody"],
				"responses":      o["responses"],
				"security":       o["security"],
			}
			if shape["security"] == nil {
				shape["security"] = global
			}
			for k, v := range o {
				if strings.HasPrefix(k, "x-") {
					shape[k] = v
				}
			}
			resolved, err := resolve(root, shape, map[string]bool{})
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", strings.ToUpper(method), path, err)
			}
			canon, err := json.Marshal(resolved) // map keys are sorted: canonical
			if err != nil {
				return nil, err
			}
			sum := sha256.Sum256(canon)
			out.Operations[strings.ToUpper(method)+" "+path] = hex.EncodeToString(sum[:])
		}
	}
	return json.Marshal(out)
}

func isHTTPMethod(m string) bool {
	switch m {
	case "get", "put", "post", "delete", "options", "head", "patch", "trace":
		return true
	}
	return false
}

// resolve returns v with prose removed (contract.Prose: a member that is a
// keyword, not a name in a contract.NameMap such as a schema's properties,
// so a property called "description" stays in the shape), response headers
// reduced to their names, and local $refs replaced by what they name. A
// reference met again inside its own expansion (a recursive schema such as
// an element tree) stays a reference: its shape is already in the digest
// once.
func resolve(root map[string]any, v any, expanding map[string]bool) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		if ref, ok := t["$ref"].(string); ok {
			if expanding[ref] {
				return map[string]any{"$ref": ref}, nil
			}
			target, err := lookupRef(root, ref)
			if err != nil {
				return nil, err
			}
			expanding[ref] = true
			defer delete(expanding, ref)
			return resolve(root, target, expanding)
		}
		out := map[string]any{}
		for k, x := range t {
			if contract.Prose(k) {
				continue
			}
			if names, ok := x.(map[string]any); ok && contract.NameMap(k) {
				m := make(map[string]any, len(names))
				for name, y := range names {
					r, err := resolve(root, y, expanding)
					if err != nil {
						return nil, err
					}
					m[name] = r
				}
				out[k] = m
				continue
			}
			if k == "headers" {
				if hs, ok := x.(map[string]any); ok {
					names := make([]string, 0, len(hs))
					for name := range hs {
						names = append(names, strings.ToLower(name))
					}
					sort.Strings(names)
					out[k] = names
					continue
				}
			}
			r, err := resolve(root, x, expanding)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			r, err := resolve(root, x, expanding)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

func lookupRef(root map[string]any, ref string) (any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("external $ref %q", ref)
	}
	var cur any = root
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("$ref %q names nothing", ref)
		}
		if cur, ok = m[part]; !ok {
			return nil, fmt.Errorf("$ref %q names nothing", ref)
		}
	}
	return cur, nil
}

// Fingerprints returns the contract fingerprints of doc, an OpenAPI
// document (JSON), keyed "METHOD /path" as in the published file:
// cmd/changelog compares them with the committed baseline.
func Fingerprints(doc []byte) (map[string]string, error) {
	raw, err := contractFingerprints(doc)
	if err != nil {
		return nil, err
	}
	var out fingerprintsDoc
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out.Operations, nil
}

// OpenAPIDocument returns the OpenAPI document as built from its fragments,
// before the deprecation registry marks anything in it (which moves no
// fingerprint).
func OpenAPIDocument() ([]byte, error) {
	doc, err := embeddedOpenAPI()
	return slices.Clone(doc), err
}

// registerContractRoutes serves the fingerprints and the changelog (spec
// 9.7, 9.11) without a credential.
func (s *Server) registerContractRoutes(r *mux.Router) {
	r.Handle("/api/contract-fingerprints.json", kernel.HandlerFunc(s.getFingerprints)).Methods(http.MethodGet)
	r.Handle("/api/changelog.json", kernel.HandlerFunc(s.getChangelog)).Methods(http.MethodGet)
}

func (s *Server) getFingerprints(w http.ResponseWriter, _ *http.Request) error {
	kernel.WriteBody(w, http.StatusOK, s.fingerprints)
	return nil
}

func (s *Server) getChangelog(w http.ResponseWriter, _ *http.Request) error {
	kernel.WriteBody(w, http.StatusOK, s.changelog)
	return nil
}
