package mcp

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/domain"
)

// FuzzToolArguments calls every tool with arbitrary arguments, as an
// agent can: nothing escapes as a protocol error; arguments the published
// input schema refuses answer invalid params in one line; and arguments it
// accepts are a JSON object that the tool's typed arguments always read —
// the schema and the Go types agree, so no accepted call is refused with
// "arguments could not be read".
func FuzzToolArguments(f *testing.F) {
	s, err := New(Deps{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range s.tools {
			if !yield(n) {
				return
			}
		}
	})
	for i, n := range names {
		for _, a := range []string{`{}`, `null`, `[]`, `{"deviceId":"dev_0190a1b2c3d4e5f60718293a4b5c6d7e"}`, `{"deviceId":1}`,
			`{"limit":1e400}`, `{"limit":2.0}`, `{"leaseId":"","idempotencyKey":"k","action":"tap","arguments":{"x":1,"y":2}}`} {
			f.Add(uint16(i), []byte(a))
		}
		_ = n
	}
	auth := domain.LocalOperator("org_1")
	f.Fuzz(func(t *testing.T, which uint16, args []byte) {
		name := names[int(which)%len(names)]
		tl := s.tools[name]
		if msg := tl.validate(args); msg != "" {
			if strings.ContainsAny(msg, "\r\n") {
				t.Fatalf("%s %q: refusal is not one line: %q", name, args, msg)
			}
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(args, &obj); err != nil {
			t.Fatalf("%s: the schema accepts %q, which is not a JSON object", name, args)
		}
		ctx, cancel := context.WithTimeout(domain.WithAuth(context.Background(), auth), 50*time.Millisecond)
		defer cancel()
		req := mcpgo.CallToolRequest{}
		req.Params.Name = name
		req.Params.RawArguments = json.RawMessage(args)
		res, err := s.handle(tl)(ctx, req)
		if err != nil || res == nil {
			t.Fatalf("%s %q: got a protocol error %v; want a tool result", name, args, err)
		}
		for _, c := range res.Content {
			if tc, ok := c.(mcpgo.TextContent); ok && strings.Contains(tc.Text, "arguments could not be read") {
				t.Fatalf("%s: the schema accepts %q, the tool's arguments do not read it: %s", name, args, tc.Text)
			}
		}
	})
}

// FuzzParseToolsets: ?tools= is refused, or chooses every tool (nil), or
// only tools that exist, each in a group the parameter named.
func FuzzParseToolsets(f *testing.F) {
	for _, s := range []string{"", "all", "meta", "observe,act", " observe , leases ", "observe,,", "nope", "observe,all", "META"} {
		f.Add(s)
	}
	s, err := New(Deps{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	f.Fuzz(func(t *testing.T, param string) {
		chosen, err := parseToolsets(param)
		if err != nil || chosen == nil {
			return
		}
		for name := range chosen {
			if _, ok := s.tools[name]; !ok && !slices.Contains(metaToolNames, name) {
				t.Fatalf("%q chose %s, which is no tool", param, name)
			}
			named := false
			for _, g := range strings.Split(param, ",") {
				g = strings.TrimSpace(g)
				named = named || slices.Contains(toolsets[g], name) || (g == toolsetMeta && slices.Contains(metaToolNames, name))
			}
			if !named {
				t.Fatalf("%q chose %s, in no group it names", param, name)
			}
		}
	})
}

// TestDecodeWholeNumbers: an integer argument written with a zero
// fraction or an exponent is read (JSON Schema's integer); one with a
// fraction, or too large, is refused naming the field in JSON's words.
func TestDecodeWholeNumbers(t *testing.T) {
	type args struct {
		Limit int `json:"limit"`
	}
	for _, tt := range []struct {
		in   string
		want int
		err  string
	}{
		{`{"limit":2}`, 2, ""}, {`{"limit":2.0}`, 2, ""}, {`{"limit":2e0}`, 2, ""}, {`{"limit":1.5e1}`, 15, ""},
		{`{"limit":2.5}`, 0, `"limit" must be an integer`}, {`{"limit":1e400}`, 0, `"limit" must be an integer`},
		{`{"limit":1e99999999}`, 0, `"limit" must be an integer`}, {`{"limit":"2"}`, 0, `"limit" must be an integer, not string`},
	} {
		t.Run(tt.in, func(t *testing.T) {
			var a args
			err := decode(json.RawMessage(tt.in), &a)
			if tt.err == "" {
				if err != nil || a.Limit != tt.want {
					t.Fatalf("got %d, %v; want %d", a.Limit, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "Go ") {
				t.Fatalf("got %v; want a refusal saying %s", err, tt.err)
			}
		})
	}
}
