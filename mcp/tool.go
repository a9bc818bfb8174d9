package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"phonefleet/domain"
	"phonefleet/http/contract"
	"phonefleet/http/kernel"
)

// tool is one tool of the surface: its published definition, what a
// credential needs to use it, its compiled input schema and what it does.
type tool struct {
	def mcpgo.Tool
	// scopes must all be held to use the tool.
	scopes []domain.Scope
	// deny, when set, refuses a credential whose scopes admit the tool but
	// whose kind may not use it (closedToApps, sessionOnly): the tool is
	// hidden from it and a call answers the refusal.
	deny   func(name string, a domain.Auth) error
	schema *jsonschema.Schema
	// run does the work; arguments have passed the input schema. It
	// returns the result, or an error the envelope renders.
	run func(ctx context.Context, a domain.Auth, args json.RawMessage) (*mcpgo.CallToolResult, error)
	// deprecation, when set, is the tool's entry in the contract's
	// deprecation registry: its results carry a warning (evolution.go).
	deprecation *contract.Deprecation
	// accepted are argument objects that passed the input schema lately.
	accepted acceptedArgs
}

// acceptedArgs remembers the last few argument objects of a tool that
// passed its input schema, byte for byte. An agent repeats the same
// arguments (observe the same device before each action, poll a run):
// those are known to pass without decoding and validating them again.
// Validation is a function of the schema and the bytes alone, so the
// verdict is the one validate would give. A refusal is never remembered.
type acceptedArgs struct {
	mu     sync.Mutex
	recent [acceptedArgsSize][]byte
	next   int
}

// acceptedArgsSize is how many argument objects a tool remembers (a few
// devices observed in turn); maxAcceptedArgs bounds the size of one, in
// bytes: a larger one is validated every time.
const (
	acceptedArgsSize = 8
	maxAcceptedArgs  = 1 << 10
)

// has reports whether args passed the schema lately.
func (a *acceptedArgs) has(args []byte) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.recent {
		if r != nil && bytes.Equal(r, args) {
			return true
		}
	}
	return false
}

// add remembers args, which just passed the schema.
func (a *acceptedArgs) add(args []byte) {
	if len(args) > maxAcceptedArgs {
		return
	}
	c := bytes.Clone(args)
	a.mu.Lock()
	a.recent[a.next] = c
	a.next = (a.next + 1) % acceptedArgsSize
	a.mu.Unlock()
}

// hints are a tool's behaviour annotations (MCP ToolAnnotation).
type hints struct {
	readOnly, destructive, idempotent, openWorld bool
}

// newTool defines a tool. schema is its JSON Schema (draft 2020-12) for the
// arguments object; title and description are what the agent reads.
func newTool(name, title, description, schema string, h hints, scopes ...domain.Scope) *tool {
	def := mcpgo.NewToolWithRawSchema(name, description, json.RawMessage(schema))
	def.Title = title
	// The title is stated once, in the definition: annotations.title
	// would repeat it in every tools/list. A hint is stated only where it
	// differs from the protocol's default (readOnlyHint false,
	// destructiveHint true, idempotentHint false, openWorldHint true), and
	// destructiveHint and idempotentHint only on a tool that is not
	// read-only (the protocol gives them meaning only there): a client
	// reads the same four answers from fewer bytes.
	if h.readOnly {
		def.Annotations.ReadOnlyHint = mcpgo.ToBoolPtr(true)
	} else {
		if !h.destructive {
			def.Annotations.DestructiveHint = mcpgo.ToBoolPtr(false)
		}
		if h.idempotent {
			def.Annotations.IdempotentHint = mcpgo.ToBoolPtr(true)
		}
	}
	if !h.openWorld {
		def.Annotations.OpenWorldHint = mcpgo.ToBoolPtr(false)
	}
	return &tool{def: def, scopes: scopes}
}

// compile compiles the tool's input schema.
func (t *tool) compile() error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.def.RawInputSchema))
	if err != nil {
		return fmt.Errorf("mcp: tool %s: input schema: %w", t.def.Name, err)
	}
	url := "mem:///phonefleet/tools/" + t.def.Name + ".json"
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(url, doc); err != nil {
		return fmt.Errorf("mcp: tool %s: input schema: %w", t.def.Name, err)
	}
	if t.schema, err = c.Compile(url); err != nil {
		return fmt.Errorf("mcp: tool %s: input schema: %w", t.def.Name, err)
	}
	return nil
}

// permit returns nil when a may use the tool, else the permission_denied
// that names what is missing: the first missing scope (in `scope`), or for
// a credential of a kind the tool is closed to, why (an OAuth app is told
// where to do it instead, in `where`).
func (t *tool) permit(a domain.Auth) error {
	if err := a.Require(t.scopes...); err != nil {
		return err
	}
	if t.deny != nil {
		return t.deny(t.def.Name, a)
	}
	return nil
}

// closedToApps is a deny rule: an OAuth app's token may not use the tool
// (spec 5.2), and is told where to do it instead.
func closedToApps(where string) func(string, domain.Auth) error {
	return func(name string, a domain.Auth) error { return a.DenyApp("the "+name+" tool", where) }
}

// sessionOnly is a deny rule: only a signed-in person (a console session
// or local mode's operator) may use the tool; an API key or an OAuth app
// may not.
func sessionOnly(what string) func(string, domain.Auth) error {
	return func(_ string, a domain.Auth) error { return a.RequireSession(what) }
}

// handle adapts a tool to mcp-go: the caller's credential, then the scope
// guard, then the input schema, then the work. Every refusal and failure is
// a tool result with isError, a panic included (internal_error, its value
// and stack logged); nothing here is a protocol error. A deprecated tool's
// results carry its deprecation, whatever the outcome.
func (s *Server) handle(t *tool) server.ToolHandlerFunc {
	h := s.handleCall(t)
	if t.deprecation != nil {
		return warnDeprecated(*t.deprecation, h)
	}
	return h
}

func (s *Server) handleCall(t *tool) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcpgo.CallToolRequest) (res *mcpgo.CallToolResult, _ error) {
		defer func() {
			if p := recover(); p != nil {
				res = s.failure(ctx, t.def.Name, fmt.Errorf("panic: %v\n%s", p, debug.Stack()))
			}
		}()
		a, ok := domain.AuthFrom(ctx)
		if !ok {
			return s.failure(ctx, t.def.Name, domain.Errorf(domain.CodeUnauthorized, "this call carried no credential")), nil
		}
		if err := t.permit(a); err != nil {
			return s.failure(ctx, t.def.Name, err), nil
		}
		args, err := argumentsOf(req)
		if err != nil {
			return invalidParams(t.def.Name, err.Error()), nil
		}
		if !t.accepted.has(args) {
			if msg := t.validate(args); msg != "" {
				return invalidParams(t.def.Name, msg), nil
			}
			t.accepted.add(args)
		}
		out, err := t.run(ctx, a, args)
		if err != nil {
			return s.failure(ctx, t.def.Name, err), nil
		}
		return out, nil
	}
}

// argumentsOf returns the call's arguments as a JSON object; absent
// arguments are the empty object.
func argumentsOf(req mcpgo.CallToolRequest) (json.RawMessage, error) {
	raw := req.Params.RawArguments
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		if req.Params.Arguments == nil {
			return json.RawMessage("{}"), nil
		}
		b, err := json.Marshal(req.Params.Arguments)
		if err != nil {
			return nil, fmt.Errorf("arguments are not JSON")
		}
		raw = b
	}
	return raw, nil
}

var englishPrinter = message.NewPrinter(language.English)

// validate checks args against the input schema and returns "" when they
// match, else one line naming every violation.
func (t *tool) validate(args json.RawMessage) string {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return "arguments are not valid JSON"
	}
	err = t.schema.Validate(inst)
	if err == nil {
		return ""
	}
	verr, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return err.Error()
	}
	var parts []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			at := "arguments"
			if len(e.InstanceLocation) > 0 {
				at = strings.Join(e.InstanceLocation, ".")
			}
			parts = append(parts, at+": "+e.ErrorKind.LocalizedString(englishPrinter))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(verr)
	return strings.Join(parts, "; ")
}

// invalidParams is a call refused because its arguments do not match the
// published input schema (spec 2.3): isError, and a plain sentence that
// begins with the protocol error number, not the JSON envelope.
func invalidParams(tool, detail string) *mcpgo.CallToolResult {
	return &mcpgo.CallToolResult{IsError: true, Content: []mcpgo.Content{
		mcpgo.NewTextContent(fmt.Sprintf("%d: invalid params: the arguments of %s do not match its input schema (%s).",
			mcpgo.INVALID_PARAMS, tool, detail)),
	}}
}

// decode reads validated arguments into v. JSON Schema's integer is any
// number with a zero fraction (2.0 and 2e0 are integers), which
// encoding/json refuses for an int field: such a number is written as an
// integer and read again, so arguments the input schema accepts are read.
// A refusal names the field and the JSON type it wants, never a Go type.
func decode(args json.RawMessage, v any) error {
	err := json.Unmarshal(args, v)
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) && strings.HasPrefix(typ.Value, "number") {
		if whole, ok := wholeNumbers(args); ok {
			err = json.Unmarshal(whole, v)
		}
	}
	if err == nil {
		return nil
	}
	if errors.As(err, &typ) && typ.Field != "" {
		return domain.Errorf(domain.CodeInvalidArgument, "arguments could not be read: %s must be %s, not %s",
			strconv.Quote(typ.Field), kernel.JSONKind(typ.Type), typ.Value)
	}
	return domain.Errorf(domain.CodeInvalidArgument, "arguments could not be read: they do not match the tool's input schema")
}

// smallExponent reports whether the number n has no exponent or one
// within ±64.
func smallExponent(n string) bool {
	i := strings.IndexAny(n, "eE")
	if i < 0 {
		return true
	}
	e, err := strconv.Atoi(n[i+1:])
	return err == nil && e >= -64 && e <= 64
}

// wholeNumbers rewrites every number of args with a zero fraction (2.0,
// 2e0, 1.5e1) as an integer; ok is false when there is none to rewrite.
func wholeNumbers(args json.RawMessage) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	changed := false
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		case json.Number:
			if !strings.ContainsAny(string(x), ".eE") {
				return x
			}
			if len(x) > 64 || !smallExponent(string(x)) {
				return x // no int64 is written so; and 1e99999999 would be costly to expand
			}
			r, ok := new(big.Rat).SetString(string(x))
			if ok && r.IsInt() && r.Num().BitLen() <= 64 {
				changed = true
				return json.Number(r.Num().String())
			}
		}
		return v
	}
	v = walk(v)
	if !changed {
		return nil, false
	}
	b, err := json.Marshal(v)
	return b, err == nil
}

// jsonResult is a successful result: v as compact JSON in one text block,
// and the same JSON as structuredContent (which the tool's outputSchema
// describes). Both are the one marshalled buffer, never copied: clients
// that read only text and those that read structuredContent see the same
// bytes.
func jsonResult(v any) (*mcpgo.CallToolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return structured(b, mcpgo.NewTextContent(ownedString(b))), nil
}

// structured is a successful result whose structuredContent is the JSON b
// and whose content is blocks.
func structured(b []byte, blocks ...mcpgo.Content) *mcpgo.CallToolResult {
	raw := json.RawMessage(b)
	return &mcpgo.CallToolResult{Content: blocks, StructuredContent: raw, RawStructuredContent: raw}
}

// imageResultOf is the result of a screen b (its JSON, a buffer the result
// then owns) with the picture data of mimeType (none when data is nil)
// before its text block. Served over HTTP, its parts are written straight
// into the response (splice.go).
func imageResultOf(ctx context.Context, data []byte, mimeType string, b []byte) (*mcpgo.CallToolResult, error) {
	png := data
	if sp := splicesFrom(ctx); sp != nil {
		if res, ok := sp.result(b, data, mimeType); ok {
			return res, nil
		}
	}
	text := mcpgo.NewTextContent(ownedString(b))
	if png == nil {
		return structured(b, text), nil
	}
	// The base64 text is written once, into a buffer the string then owns
	// (EncodeToString would copy it a second time).
	enc := make([]byte, base64.StdEncoding.EncodedLen(len(png)))
	base64.StdEncoding.Encode(enc, png)
	img := mcpgo.NewImageContent(ownedString(enc), mimeType)
	return structured(b, img, text), nil
}

// ownedString returns b as a string without copying it. b must be a fresh
// buffer nothing else holds or writes afterwards (as json.Marshal returns).
func ownedString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
