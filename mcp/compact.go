package mcp

import (
	"encoding/json"
	"slices"
)

// What tools/list publishes is kept small (issue 29): an agent pays for
// every byte of it before it does anything, on every connection. Each
// tool's words are in one place, its description; the conventions every
// tool shares (ids, leaseId, observedFrame, idempotencyKey, paging,
// errors) are stated once, in the server's instructions.
//
// The schemas written here (outputs.go, the tool files) and the
// contract's components stay the full truth, with their prose; the REST
// document publishes the components in full. What a tool declares is
// compacted from them:
//
//   - its input schema loses its prose (description, title) and nothing
//     else: every argument is validated exactly as before;
//   - its output schema says the result is an object and names the
//     members every answer carries (required). What the members hold is
//     the REST contract's component of the same name (or the shape in
//     outputs.go). Every answer the full schema accepts, the compact one
//     accepts.

// prose are the schema keywords that carry words for people, not shape.
var prose = []string{"description", "title", "examples", "example", "$comment"}

// compactInput returns the input schema raw without its prose.
func compactInput(raw json.RawMessage) (json.RawMessage, error) {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	return json.Marshal(dropProse(doc))
}

// dropProse removes the prose keywords from every schema in v. A property
// named like a keyword (an argument called "description") is kept: only
// keywords whose value is a string are prose.
func dropProse(v any) any {
	switch n := v.(type) {
	case map[string]any:
		for k, sub := range n {
			if _, isString := sub.(string); isString && slices.Contains(prose, k) {
				delete(n, k)
				continue
			}
			n[k] = dropProse(sub)
		}
	case []any:
		for i, sub := range n {
			n[i] = dropProse(sub)
		}
	}
	return v
}

// compactOutput returns the output schema raw as tools/list publishes it:
// an object and the members every answer carries (required).
func compactOutput(raw json.RawMessage) (json.RawMessage, error) {
	var root struct {
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(raw, &root); err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		Type     string   `json:"type"`
		Required []string `json:"required,omitempty"`
	}{"object", root.Required})
}
