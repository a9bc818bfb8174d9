package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"phonefleet/http/contract"
)

// The contract's evolution on the tool surface (spec 9.8, 9.9; package
// contract). A tool of the deprecation registry is still served until its
// sunset, and says so where both kinds of client look:
//
//   - its description begins with the deprecation notice, and its
//     definition's _meta carries the deprecation as data under
//     DeprecationMeta, so an agent choosing a tool reads it before using it;
//   - every result of it carries the same data in the result's _meta, and a
//     successful result begins with a text block holding the notice. The
//     model reads the content of a result, not its _meta, so the notice
//     must be content to be seen; it goes first, so the JSON text block
//     stays the last block as on every result (observe answers the image,
//     then the JSON). A failure keeps the error envelope as its one text
//     block (spec 2.3) and carries the deprecation in _meta only.
//
// A meaning change of a tool (spec 9.8b) adds an "@since DATE: note" line
// to its description. The tool surface version in serverInfo is derived
// from the changelog (server.go). The production registry is empty: no
// tool carries any of this today (spec 9.5).

// DeprecationMeta is the _meta key of a deprecated tool's definition and
// results: {"since", "sunset", "replacement", "notice"}.
const DeprecationMeta = "phonefleet/deprecation"

// markEvolution applies the registry to the tools' definitions and records
// each deprecated tool's deprecation for its results. It fails when the
// registry names a tool the surface does not have.
func (s *Server) markEvolution(reg contract.Registry) error {
	for _, d := range reg.Deprecations {
		if d.Tool == "" {
			continue
		}
		t, ok := s.tools[d.Tool]
		if !ok {
			return fmt.Errorf("mcp: the contract registry deprecates tool %s, which does not exist", d.Tool)
		}
		t.deprecation = &d
		t.def.Description = d.Notice() + "\n\n" + t.def.Description
		fields := map[string]any{DeprecationMeta: deprecationMeta(d)}
		if t.def.Meta != nil {
			maps.Copy(fields, t.def.Meta.AdditionalFields)
		}
		t.def.Meta = mcpgo.NewMetaFromMap(fields)
	}
	for _, m := range reg.Meanings {
		if m.Tool == "" {
			continue
		}
		t, ok := s.tools[m.Tool]
		if !ok {
			return fmt.Errorf("mcp: the contract registry notes a meaning change of tool %s, which does not exist", m.Tool)
		}
		t.def.Description = strings.TrimRight(t.def.Description, "\n") + "\n\n" + m.SinceLine()
	}
	return nil
}

func deprecationMeta(d contract.Deprecation) map[string]any {
	m := map[string]any{"since": d.Since, "sunset": d.Sunset, "notice": d.Notice()}
	if d.Replacement != "" {
		m["replacement"] = d.Replacement
	}
	return m
}

// warnDeprecated wraps a deprecated tool's handler so every result it
// answers carries the deprecation (see the comment at the top).
func warnDeprecated(d contract.Deprecation, h server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		res, err := h(ctx, req)
		if res == nil {
			return res, err
		}
		fields := map[string]any{}
		if res.Meta != nil {
			maps.Copy(fields, res.Meta.AdditionalFields)
		}
		fields[DeprecationMeta] = deprecationMeta(d)
		meta := mcpgo.NewMetaFromMap(fields)
		if res.Meta != nil {
			meta.ProgressToken = res.Meta.ProgressToken
		}
		res.Meta = meta
		if !res.IsError {
			res.Content = append([]mcpgo.Content{mcpgo.NewTextContent(d.Notice())}, res.Content...)
		}
		return res, err
	}
}

// toolFingerprint is the digest of a tool's shape: its input and output
// schemas without their prose (contract.ShapeOf), as cmd/changelog records
// it in the baseline. Titles, descriptions and annotations are not shape.
func toolFingerprint(def mcpgo.Tool) (string, error) {
	var in, out any
	if err := json.Unmarshal(def.RawInputSchema, &in); err != nil {
		return "", fmt.Errorf("mcp: tool %s: input schema: %w", def.Name, err)
	}
	if len(def.RawOutputSchema) > 0 {
		if err := json.Unmarshal(def.RawOutputSchema, &out); err != nil {
			return "", fmt.Errorf("mcp: tool %s: output schema: %w", def.Name, err)
		}
	}
	return contract.Fingerprint(contract.ShapeOf(map[string]any{"input": in, "output": out}))
}

// ToolFingerprints returns each tool's fingerprint, by name: the tool half
// of the surface cmd/changelog compares with the committed baseline.
func (s *Server) ToolFingerprints() (map[string]string, error) {
	out := make(map[string]string, len(s.tools))
	for name, t := range s.tools {
		fp, err := toolFingerprint(t.def)
		if err != nil {
			return nil, err
		}
		out[name] = fp
	}
	return out, nil
}
