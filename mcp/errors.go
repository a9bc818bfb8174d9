package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/domain"
	"phonefleet/http/kernel"
)

// The tool error envelope (spec 2.3, 7.1): a failed call is a result with
// isError set whose one text block is the JSON object
//
//	{"name": <tool>, "code": <one of the 18 MCP codes>, "message": …, "retryable": bool, …extra}
//
// The envelope is never put in structuredContent. Only the codes marked MCP
// in spec 7.2 (domain.MCPCodes) appear; a REST-only code is translated here,
// once, for every tool:
//
//   - not_found, receipt_not_found and wrong_state (a webhook, device or
//     receipt the argument names nothing of, a state the call cannot act in)
//     become invalid_argument with `reason` naming the REST code: the
//     argument does not name something the call can act on, and nothing
//     reached a device;
//   - every other REST-only code (service_unavailable when a capability is
//     not wired, …) becomes internal_error keeping its message and
//     retryable flag but no extra fields.
//
// Anything that is not a *domain.Error is internal_error with a generic
// message; its cause is logged, never rendered.

// annotated adds extra envelope fields to an error without changing the
// error itself (domain errors may be shared by callers).
type annotated struct {
	err   error
	extra map[string]any
	// over makes the fields replace the error's own of the same name.
	over bool
}

func (e *annotated) Error() string { return e.err.Error() }
func (e *annotated) Unwrap() error { return e.err }

// annotate returns err carrying the extra fields kv (key, value, …); they
// are added to the envelope where the error has no field of that name.
func annotate(err error, kv ...any) error { return annotateAs(false, err, kv...) }

// override is annotate whose fields replace the error's own: a composite
// call (a batch) speaks for itself over the step that failed.
func override(err error, kv ...any) error { return annotateAs(true, err, kv...) }

func annotateAs(over bool, err error, kv ...any) error {
	if err == nil {
		return nil
	}
	extra := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		if k, ok := kv[i].(string); ok {
			extra[k] = kv[i+1]
		}
	}
	return &annotated{err: err, extra: extra, over: over}
}

// defaultRetryable says, for an occurrence whose error did not decide,
// whether re-issuing the same call unchanged is meaningful.
var defaultRetryable = map[domain.Code]bool{
	domain.CodeDeviceBusy:         true,
	domain.CodeDeviceDisconnected: true,
}

// envelope is the tool error envelope of err for tool name, and whether err
// is a server fault (whose cause must be logged).
func envelope(name string, err error) (map[string]any, bool) {
	// Annotations nearer the surface win over deeper ones.
	extra, over := map[string]any{}, map[string]any{}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if an, ok := e.(*annotated); ok {
			dst := extra
			if an.over {
				dst = over
			}
			for k, v := range an.extra {
				if _, seen := dst[k]; !seen {
					dst[k] = v
				}
			}
		}
	}
	var de *domain.Error
	fault := !errors.As(err, &de)
	if fault {
		de = &domain.Error{Code: domain.CodeInternal, Message: "internal error"}
	}
	code, message, retryable := de.Code, de.Message, de.Retryable
	fields := maps.Clone(de.Extra)
	switch {
	case slices.Contains(domain.MCPCodes, code):
	case code == domain.CodeNotFound || code == domain.CodeReceiptNotFound || code == domain.CodeWrongState:
		if fields == nil {
			fields = map[string]any{}
		}
		if _, ok := fields["reason"]; !ok {
			fields["reason"] = string(code)
		}
		code = domain.CodeInvalidArgument
	default:
		code, fields = domain.CodeInternal, nil
	}
	if code == domain.CodeInternal && de.Err != nil {
		fault = true
	}
	out := map[string]any{}
	for k, v := range extra {
		out[k] = v
	}
	for k, v := range fields {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	r := defaultRetryable[code]
	if retryable != nil {
		r = *retryable
	}
	out["name"], out["code"], out["message"], out["retryable"] = name, string(code), message, r
	return out, fault
}

// failure renders err as the failed result of tool name and logs the cause
// of a server fault.
func (s *Server) failure(ctx context.Context, name string, err error) *mcpgo.CallToolResult {
	env, fault := envelope(name, err)
	if fault && !errors.Is(err, context.Canceled) {
		s.logger.ErrorContext(ctx, "tool failed", "tool", name, "err", err, "request_id", kernel.RequestID(ctx))
	}
	b, mErr := json.Marshal(env)
	if mErr != nil {
		b = []byte(`{"name":"` + name + `","code":"internal_error","message":"internal error","retryable":false}`)
	}
	return &mcpgo.CallToolResult{IsError: true, Content: []mcpgo.Content{mcpgo.NewTextContent(string(b))}}
}
