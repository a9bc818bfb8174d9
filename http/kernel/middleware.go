package kernel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// DefaultBodyLimit is the request body limit of every surface (spec 8: 1 MiB).
const DefaultBodyLimit int64 = 1 << 20

// Options configures Chain. Zero values take the documented defaults.
type Options struct {
	// Logger receives the access log; nil logs to slog.Default(), because
	// a service must never lose its access log to a missing option.
	Logger *slog.Logger
	// BodyLimit is the request body limit in bytes; zero or less means
	// DefaultBodyLimit.
	BodyLimit int64
	// Errors renders the failures of requests whose surface chose no
	// ErrorWriter (WithErrors) and the refusals made before routing; nil
	// means WriteError.
	Errors ErrorWriter
}

// Chain wraps h in the middleware every request passes, in this order on
// the wire:
//
//	request id → access log → panic recovery → body limit → h
//
// The request id comes first so every later line and event carries it; the
// access log wraps everything after it so it sees the final status, a
// recovered panic included; the body limit is innermost of the four so a
// refusal is logged and, like every answer, carries the request id.
// Surface-specific middleware (CORS, rate limits, authentication) goes
// inside, in h.
func Chain(h http.Handler, o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.BodyLimit <= 0 {
		o.BodyLimit = DefaultBodyLimit
	}
	h = limitBody(o.BodyLimit, h)
	h = recoverPanics(h)
	h = logRequests(o.Logger, o.Errors, h)
	return assignRequestID(h)
}

// requestIDHeader carries the request id in both directions.
const requestIDHeader = "X-Request-Id"

// maxRequestIDLen bounds an accepted incoming request id.
const maxRequestIDLen = 128

type requestIDKey struct{}

// RequestID returns the id of the request ctx belongs to, or "" outside one.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// assignRequestID accepts the caller's X-Request-Id when it is 1 to 128
// printable ASCII characters, so a caller can correlate its own logs, and
// mints req_<uuidv7> otherwise. The id is echoed on the response.
func assignRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(requestIDHeader)
		if !validRequestID(id) {
			id = domain.NewID(domain.PrefixRequest)
		}
		w.Header().Set(requestIDHeader, id)
		// The request is its events' request, correlation and cause;
		// authentication adds the actor.
		ctx := eventstore.WithMetadata(context.WithValue(r.Context(), requestIDKey{}, id), eventstore.Metadata{RequestID: id})
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// exchange wraps the ResponseWriter for the access log: it counts what was
// written, holds the cause of a server fault, which the error writers and
// the panic recovery hand it so the one log line can carry it, and holds
// the request's ErrorWriter, which a surface may set after routing and the
// panic recovery, outside the surface, must still find.
type exchange struct {
	http.ResponseWriter
	status int
	bytes  int64
	fault  error
	stack  []byte
	errors ErrorWriter
	// logPath, when set, is logged instead of the request's path.
	logPath string
}

type exchangeKey struct{}

// exchangeFrom returns the request's exchange; nil (whose methods are safe)
// when the request did not pass through the access log, as in unit tests of
// single handlers.
func exchangeFrom(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

func (ex *exchange) WriteHeader(status int) {
	if ex.status == 0 {
		ex.status = status
	}
	ex.ResponseWriter.WriteHeader(status)
}

func (ex *exchange) Write(p []byte) (int, error) {
	if ex.status == 0 {
		ex.status = http.StatusOK
	}
	n, err := ex.ResponseWriter.Write(p)
	ex.bytes += int64(n)
	return n, err
}

// Flush lets streaming handlers (and libraries that assert http.Flusher)
// flush through the wrapper.
func (ex *exchange) Flush() {
	if ex.status == 0 {
		ex.status = http.StatusOK
	}
	_ = http.NewResponseController(ex.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the underlying writer.
func (ex *exchange) Unwrap() http.ResponseWriter { return ex.ResponseWriter }

func (ex *exchange) started() bool { return ex != nil && ex.status != 0 }

func (ex *exchange) noteFault(err error) {
	if ex != nil && ex.fault == nil {
		ex.fault = err
	}
}

// NoteFault hands the access log the cause of a server-side failure that
// is not answered as an error — a dependency that failed while the request
// went on without it — so the request's one log line carries it at error
// level. Only the first fault of a request is kept.
func NoteFault(ctx context.Context, err error) {
	exchangeFrom(ctx).noteFault(err)
}

// LogPath makes the access log write path instead of the request's own:
// for a surface whose paths carry a credential (the device surface's run
// token), so the credential never reaches the log. Outside a Chain it does
// nothing.
func LogPath(ctx context.Context, path string) {
	if ex := exchangeFrom(ctx); ex != nil {
		ex.logPath = path
	}
}

// logRequests writes one structured line per request once it is answered:
// method, path (never the query string, which may carry cursors or secrets),
// status, duration, bytes and request id; a server fault adds its cause, and a
// panic its stack. Client errors (4xx) log no cause: they are the caller's.
func logRequests(logger *slog.Logger, ew ErrorWriter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ex := &exchange{ResponseWriter: w, errors: ew}
		next.ServeHTTP(ex, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex)))

		status := ex.status
		if status == 0 {
			status = http.StatusOK
		}
		path := r.URL.Path
		if ex.logPath != "" {
			path = ex.logPath
		}
		attrs := []slog.Attr{
			slog.String("method", r.Method),
			slog.String("path", path),
			slog.Int("status", status),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
			slog.Int64("bytes", ex.bytes),
			slog.String("request_id", RequestID(r.Context())),
		}
		level := slog.LevelInfo
		// A fault is only ever noted for a server-side failure, including one
		// that struck after the response had started (then status is 2xx).
		if status >= http.StatusInternalServerError || ex.fault != nil {
			level = slog.LevelError
		}
		if ex.fault != nil {
			attrs = append(attrs, slog.String("error", ex.fault.Error()))
		}
		if ex.stack != nil {
			attrs = append(attrs, slog.String("stack", string(ex.stack)))
		}
		logger.LogAttrs(r.Context(), level, "request", attrs...)
	})
}

// recoverPanics turns a handler panic into 500 internal_error and gives the
// access log the panic value and stack. http.ErrAbortHandler is re-raised:
// it is net/http's way to abort a response on purpose.
func recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			if ex := exchangeFrom(r.Context()); ex != nil {
				ex.stack = debug.Stack()
			}
			Error(w, r, fmt.Errorf("panic: %v", p))
		}()
		next.ServeHTTP(w, r)
	})
}

// limitBody enforces the request body limit on every surface (spec 8): a
// declared Content-Length over the limit is refused at once, before anything
// reads the body; any other body (chunked, or lying about its length) is
// wrapped so reading past the limit fails with *http.MaxBytesError, which the
// decode helpers answer as the same 413.
func limitBody(limit int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			Error(w, r, PayloadTooLarge(limit))
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		next.ServeHTTP(w, r)
	})
}

// PayloadTooLarge is the one 413 answer; its message names the limit in bytes
// as spec 2.3 requires.
func PayloadTooLarge(limit int64) *domain.Error {
	return domain.Errorf(domain.CodePayloadTooLarge, "request body exceeds the limit of %d bytes", limit)
}

// AsPayloadTooLarge reports whether err comes from reading past the body
// limit and, if so, returns the 413 answer for it. A surface that reads a
// body itself uses it to answer the same 413 as the decode helpers.
func AsPayloadTooLarge(err error) (*domain.Error, bool) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return PayloadTooLarge(mbe.Limit), true
	}
	return nil, false
}
