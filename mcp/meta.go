package mcp

import (
	"context"
	"encoding/json"
	"slices"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/domain"
)

// The small mode (issue 29): a client with a tight budget connects to
// /mcp?tools=meta and sees three tools instead of forty. list_tools names
// the tools the credential can use with their descriptions, describe_tool
// answers one tool's definition (its schemas included) and call_tool calls
// a tool by name. A call through call_tool is the tool's own call: the
// same scope guard, input schema, result and error, so nothing is
// reachable this way that is not reachable directly.
//
// On a meta connection the other tools are not listed and calling one
// directly is -32601; on any other connection the meta tools do not exist.

// toolsetMeta is the tools parameter that chooses the small mode.
const toolsetMeta = "meta"

// metaToolNames are the tools of the small mode.
var metaToolNames = []string{"list_tools", "describe_tool", "call_tool"}

// metaOutputSchemas are their output schemas. call_tool answers whatever
// the tool it called answers: an object, each tool's own.
var metaOutputSchemas = map[string]string{
	"list_tools":    `{"type":"object","required":["tools"]}`,
	"describe_tool": `{"type":"object","required":["name","title","description","inputSchema","outputSchema","annotations"]}`,
	"call_tool":     `{"type":"object"}`,
}

// metaTools defines the three meta tools. They need no scope: what they
// show and run is what the credential may use.
func (s *Server) metaTools() []*tool {
	list := newTool("list_tools", "List tools",
		"The tools you can use, with their descriptions; optionally of one toolset.",
		object(nil, prop{"toolset", `{"type":"string","enum":["devices","leases","observe","act","receipts","webhooks","runs"]}`}),
		hints{readOnly: true})
	list.run = func(ctx context.Context, a domain.Auth, raw json.RawMessage) (*mcpgo.CallToolResult, error) {
		var args struct {
			Toolset string `json:"toolset"`
		}
		if err := decode(raw, &args); err != nil {
			return nil, err
		}
		type entry struct {
			Name        string `json:"name"`
			Toolset     string `json:"toolset"`
			Description string `json:"description"`
		}
		out := []entry{}
		for _, g := range toolsetNames() {
			if args.Toolset != "" && g != args.Toolset {
				continue
			}
			names := slices.Sorted(slices.Values(toolsets[g]))
			for _, n := range names {
				if t := s.tools[n]; t.permit(a) == nil {
					out = append(out, entry{Name: n, Toolset: g, Description: t.def.Description})
				}
			}
		}
		return jsonResult(map[string]any{"tools": out})
	}

	describe := newTool("describe_tool", "Describe a tool",
		"One tool's definition: description, inputSchema for call_tool's arguments, annotations.",
		object([]string{"name"}, prop{"name", `{"type":"string","pattern":"^[a-z_]{1,64}$"}`}),
		hints{readOnly: true})
	describe.run = func(ctx context.Context, a domain.Auth, raw json.RawMessage) (*mcpgo.CallToolResult, error) {
		t, err := s.usableTool(a, raw)
		if err != nil {
			return nil, err
		}
		return jsonResult(map[string]any{"name": t.def.Name, "title": t.def.Title, "description": t.def.Description,
			"inputSchema": t.def.RawInputSchema, "outputSchema": t.def.RawOutputSchema, "annotations": t.def.Annotations})
	}

	call := newTool("call_tool", "Call a tool",
		"Call a tool by name with its arguments; the answer is that tool's own.",
		object([]string{"name"}, prop{"name", `{"type":"string","pattern":"^[a-z_]{1,64}$"}`}, prop{"arguments", `{"type":"object"}`}),
		hints{destructive: true, openWorld: true})
	call.run = func(ctx context.Context, a domain.Auth, raw json.RawMessage) (*mcpgo.CallToolResult, error) {
		var args struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := decode(raw, &args); err != nil {
			return nil, err
		}
		if _, ok := s.tools[args.Name]; !ok {
			return nil, unknownTool(args.Name)
		}
		req := mcpgo.CallToolRequest{}
		req.Params.Name = args.Name
		req.Params.RawArguments = args.Arguments
		return s.handlers[args.Name](ctx, req)
	}
	return []*tool{list, describe, call}
}

// usableTool reads {name} and returns that tool if the credential may use
// it, else the refusal a direct call would answer.
func (s *Server) usableTool(a domain.Auth, raw json.RawMessage) (*tool, error) {
	var args struct {
		Name string `json:"name"`
	}
	if err := decode(raw, &args); err != nil {
		return nil, err
	}
	t, ok := s.tools[args.Name]
	if !ok {
		return nil, unknownTool(args.Name)
	}
	if err := t.permit(a); err != nil {
		return nil, err
	}
	return t, nil
}

// unknownTool is the answer for a name that is no tool, inside a meta
// tool's arguments (a direct call would be -32601).
func unknownTool(name string) error {
	return annotate(domain.Errorf(domain.CodeInvalidArgument, "%q is no tool; list_tools names them", name), "reason", "unknown_tool")
}
