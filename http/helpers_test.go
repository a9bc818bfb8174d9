package httpapi

import (
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"phonefleet/commands"
	"phonefleet/http/kernel"
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
func appOf(f *commands.Fleet) *commands.Application {
	app := commands.NewApplication(commands.AppDeps{Fleet: f})
	return &app
}
