package httpapi

import (
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/apitest"
	"phonefleet/http/kernel"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// logBuffer is the access log of a test server: handlers on other
// goroutines write to it while the test reads it.
type logBuffer struct{ testutil.SyncBuffer }

// lines decodes every JSON log line written so far.
func (b *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(strings.NewReader(b.String()))
	for dec.More() {
		var line map[string]any
		if err := dec.Decode(&line); err != nil {
			t.Fatalf("log line is not JSON: %v", err)
		}
		out = append(out, line)
	}
	return out
}

// newTestServer builds a server whose access log goes to the returned buffer.
func newTestServer(t *testing.T, deps Deps) (*Server, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	deps.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	return New(deps), logs
}

// echoServer is a test server with one extra route, POST /v1/echo, that reads
// a JSON object; it serves the document extended by testdata/openapi/echo.yaml.
func echoServer(t *testing.T) (*Server, *logBuffer) {
	t.Helper()
	s, logs := newTestServer(t, Deps{})
	s.openapi = assembleWithTestdata(t)
	s.v1.Handle("/echo", kernel.HandlerFunc(echo)).Methods(http.MethodPost)
	return s, logs
}

func echo(w http.ResponseWriter, r *http.Request) error {
	var obj map[string]any
	if err := kernel.DecodeJSON(r, &obj); err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, map[string]int{"members": len(obj)})
}

// assembleWithTestdata assembles the embedded fragments plus the test-only
// fragments under testdata/openapi.
func assembleWithTestdata(t *testing.T) []byte {
	t.Helper()
	fsys := fstest.MapFS{}
	copyYAML := func(src fs.FS) {
		names, err := fs.Glob(src, "*.yaml")
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			data, err := fs.ReadFile(src, name)
			if err != nil {
				t.Fatal(err)
			}
			fsys[name] = &fstest.MapFile{Data: data}
		}
	}
	embedded, err := fs.Sub(openapiFragments, "openapi")
	if err != nil {
		t.Fatal(err)
	}
	copyYAML(embedded)
	copyYAML(os.DirFS("testdata/openapi"))
	doc, err := assembleOpenAPI(fsys)
	if err != nil {
		t.Fatalf("assemble: %v", err)
	}
	return doc
}

// errorBody decodes a control-surface error envelope.
type errorBody struct {
	Error map[string]any `json:"error"`
}

func decodeErrorBody(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body is not an error envelope: %v\n%s", err, body)
	}
	return e.Error
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// appOf is the application object over a fleet alone.
func appOf(f *fleet.Fleet) *commands.Application {
	app := commands.NewApplication(commands.Capabilities{Fleet: f})
	return &app
}

// testStore opens a pool of at most maxConns connections to the test
// database, closed when the test ends, and an event store over it that
// upcasts the domain's events.
func testStore(t *testing.T, maxConns int32) (*pgxpool.Pool, *eventstore.Store) {
	t.Helper()
	pool := testutil.SmallPool(t, maxConns)
	return pool, eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
}

// runProjections ensures projs on store and runs them (polling every
// 20 ms) until the test ends.
func runProjections(t *testing.T, store *eventstore.Store, projs ...projections.Projection) *projections.Runner {
	t.Helper()
	runner, err := projections.NewRunner(store, slog.New(slog.DiscardHandler), projs, projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Ensure(testutil.Context(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { runner.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return runner
}

// testPrincipals authenticates a test request as the principal its
// X-Test-Principal header names; a name not in the table is an invalid
// token.
type testPrincipals map[string]domain.Auth

func (p testPrincipals) Authenticate(r *http.Request) (domain.Auth, error) {
	a, ok := p[r.Header.Get("X-Test-Principal")]
	if !ok {
		return domain.Auth{}, domain.Errorf(domain.CodeUnauthorized, "no such test principal").With("reason", "invalid_token")
	}
	return a, nil
}

// call sends req to s as principal (named in X-Test-Principal; "" names
// none), checks the answer against the document v serves, and returns
// the response and its raw body.
func call(t *testing.T, s *Server, v *apitest.Validator, principal string, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	if principal != "" {
		req.Header.Set("X-Test-Principal", principal)
	}
	resp, raw := apitest.Do(t, s.Handler(), req)
	v.Check(t, req, resp, raw)
	return resp, raw
}

// jsonObject decodes raw, the answer to what, as a JSON object; anything
// else, an empty body included, fails the test.
func jsonObject(t *testing.T, what string, raw []byte) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: body is not JSON: %v\n%s", what, err, raw)
	}
	return out
}
