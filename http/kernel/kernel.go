// Package kernel is the thin HTTP layer every surface of phonefleet stands
// on: the REST control surface /v1, the agent tool surface /mcp, and the
// surfaces still to come (the device surface /vrx, the console, the
// payment-provider webhook). Each surface is its own package and only
// translates requests into application calls; what every surface must do
// the same way lives here, once:
//
//   - the handler adapter: a handler is a HandlerFunc that writes its
//     success itself and returns its failure, which the adapter renders
//     (tailscale tsweb), so no handler logs or writes an error body;
//   - error rendering: the one code→status map (StatusOf) and the
//     control-surface envelope (WriteError, RESTErrors); a surface with its
//     own envelope supplies an ErrorWriter instead (WithErrors), and the
//     adapter, the panic recovery and the body limit render through it;
//   - the middleware chain (Chain): request id and event metadata on the
//     context, one JSON access-log line per request noting server faults,
//     panic recovery, and the request body limit answered 413 before
//     anything parses the body;
//   - JSON decoding and encoding (DecodeJSON, WriteJSON, ReadBody).
//
// What differs between surfaces (routes, authentication, CORS, rate
// limits, envelopes) stays in the surfaces.
package kernel

import (
	"context"
	"net/http"
)

// HandlerFunc is the shape of every handler of every surface: it writes a
// success itself and returns any failure, which ServeHTTP renders through
// the request's ErrorWriter. Handlers never log and never write an error
// body, so a failure is rendered, and a server fault logged, exactly once.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// ServeHTTP is the one adapter from HandlerFunc to http.Handler.
func (h HandlerFunc) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h(w, r); err != nil {
		Error(w, r, err)
	}
}

// ErrorWriter renders a failure as one surface's error envelope with the
// status of its code. An implementation calls BeginError first, so a server
// fault reaches the access log and a response already started is not
// written twice. WriteError is the control surface's.
type ErrorWriter func(w http.ResponseWriter, r *http.Request, err error)

type errorsKey struct{}

// Error renders err with the request's ErrorWriter: the one a surface chose
// with WithErrors, else the chain's default (Options.Errors), else
// WriteError. Everything that answers a failure — the adapter, the panic
// recovery, the body limit, a surface's own middleware — calls it, so a
// surface's failures all wear the same envelope.
func Error(w http.ResponseWriter, r *http.Request, err error) {
	errorWriterOf(r)(w, r, err)
}

func errorWriterOf(r *http.Request) ErrorWriter {
	// The exchange first: it is shared with the middleware outside the
	// surface (the panic recovery), which cannot see context values the
	// surface added.
	if ex := exchangeFrom(r.Context()); ex != nil && ex.errors != nil {
		return ex.errors
	}
	if ew, ok := r.Context().Value(errorsKey{}).(ErrorWriter); ok {
		return ew
	}
	return WriteError
}

// WithErrors is the middleware a surface mounts on its router (for
// gorilla/mux, router.Use(kernel.WithErrors(ew))) to answer every failure
// of its routes with ew: failures its handlers return, their panics, and
// its own middleware's refusals. Refusals made before routing (the body
// limit on a declared Content-Length, a server's CORS and rate limits)
// cannot know the surface and use the chain's default.
func WithErrors(ew ErrorWriter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ex := exchangeFrom(r.Context()); ex != nil {
				ex.errors = ew
				next.ServeHTTP(w, r)
				return
			}
			// Outside a Chain (a handler under test) the context carries it.
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), errorsKey{}, ew)))
		})
	}
}
