package service

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"phonefleet/http/apitest"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/testutil"
)

// The contract sweep sends every operation of the served OpenAPI document
// to a running service the way a careless or unlucky client would, and
// checks each answer with the independent response validator: whatever
// the service answers, the document must describe it (status, headers,
// body). It covers what a client meets on any operation — an unknown
// resource or an empty body in local mode (where hosted-only operations
// answer 404), 413 for a body over 1 MiB, 401 without a credential and
// 429 over the rate limit in hosted mode.

// sweepIDs fills a path parameter with a well-shaped id of nothing.
var sweepIDs = map[string]string{
	"deviceId":       "dev_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b6",
	"frameId":        "frm_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b6",
	"runId":          "run_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b6",
	"scheduleId":     "sch_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b6",
	"webhookId":      "whk_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b6",
	"gatewayId":      "gw_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b6",
	"sessionId":      "cls_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b6",
	"userCode":       "ABCD-EFGH",
	"idempotencyKey": "no-such-key",
	"runToken":       "vrx_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b6_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// sweepPath turns a documented path into one naming nothing that exists.
func sweepPath(path string) string {
	return pathParam.ReplaceAllStringFunc(path, func(p string) string {
		name := p[1 : len(p)-1]
		if id, ok := sweepIDs[name]; ok {
			return id
		}
		switch {
		case strings.HasPrefix(path, "/v1/fulfilments/"):
			return "ful_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b6"
		case strings.HasPrefix(path, "/v1/api-keys/"):
			return "key_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b6"
		}
		return "x"
	})
}

// hasBody reports whether an operation's method carries a request body.
func hasBody(method string) bool {
	return method == http.MethodPost || method == http.MethodPatch || method == http.MethodPut
}

// sweep sends one request per documented operation, made by build, and
// checks every answer against the document; want, when set, is the status
// every answer must have (ops for which it returns false are skipped).
func sweep(t *testing.T, base string, v *apitest.Validator, build func(r apitest.Route) (*http.Request, bool), want int) {
	t.Helper()
	client := &http.Client{Timeout: 20 * time.Second}
	ops, swept := v.Operations(), 0
	defer func() {
		// A sweep that sends nothing proves nothing.
		t.Logf("swept %d of %d operations", swept, len(ops))
		if swept < len(ops)/2 {
			t.Errorf("swept %d of %d operations; want at least half", swept, len(ops))
		}
	}()
	for _, op := range ops {
		req, ok := build(op)
		if !ok {
			continue
		}
		swept++
		t.Run(op.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			req = req.WithContext(ctx)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			if want != 0 && resp.StatusCode != want {
				t.Errorf("got %d %.300s; want %d", resp.StatusCode, body, want)
			}
			// The validator sees the request as the document names it.
			doc, _ := http.NewRequest(req.Method, strings.TrimPrefix(req.URL.String(), base), nil)
			doc.Header = req.Header
			v.Check(t, doc, resp, body)
		})
	}
}

func request(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// TestEveryOperationAnswersAsDocumented is the sweep in local mode: an
// empty body or an unknown resource on every operation, and 413 on every
// operation that takes a body.
func TestEveryOperationAnswersAsDocumented(t *testing.T) {
	env := map[string]string{"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(t.TempDir(), "data"), "SERVICE_SIM_DEVICES": "1"}
	a, base := startApp(t, env)
	v := apitest.FromHandler(t, a.server.Handler())
	t.Run("nothing there", func(t *testing.T) {
		sweep(t, base, v, func(op apitest.Route) (*http.Request, bool) {
			var body io.Reader
			if hasBody(op.Method) {
				body = strings.NewReader(`{}`)
			}
			req := request(t, op.Method, base+sweepPath(op.Path), body)
			if op.Path == "/mcp" {
				req.Header.Set("Accept", "application/json, text/event-stream")
			}
			return req, true
		}, 0)
	})
	t.Run("over 1 MiB", func(t *testing.T) {
		// Refused on its declared length before any route is chosen, so
		// a GET carrying one is refused too.
		big := []byte(`{"blob":"` + strings.Repeat("a", 2<<20) + `"}`)
		sweep(t, base, v, func(op apitest.Route) (*http.Request, bool) {
			return request(t, op.Method, base+sweepPath(op.Path), bytes.NewReader(big)), true
		}, http.StatusRequestEntityTooLarge)
	})
}

// TestEveryOperationAnswersAsDocumentedHosted is the sweep in hosted
// mode: without a credential every operation that needs one answers 401,
// and over the anonymous rate limit every operation answers 429; both as
// the document says.
func TestEveryOperationAnswersAsDocumentedHosted(t *testing.T) {
	idp := identitytest.New(t)
	hosted := func(anonymousPerMinute string) (*App, string) {
		return startApp(t, map[string]string{
			"SERVICE_MODE": "hosted", "SERVICE_ADDR": "127.0.0.1:0", "DATABASE_URL": testutil.DatabaseURL(t),
			"SERVICE_DATA_DIR": t.TempDir(), "SERVICE_PUBLIC_URL": "http://sweep.test",
			"SERVICE_OAUTH_ISSUER": idp.Issuer, "SERVICE_OAUTH_JWKS_URL": idp.JWKSURL, "SERVICE_OAUTH_ROLE_URL": idp.RoleURL,
			"SERVICE_RATE_LIMIT_AUTHENTICATED": "100000", "SERVICE_RATE_LIMIT_ANONYMOUS": anonymousPerMinute,
			"SERVICE_SIM_DEVICES": "0",
		})
	}
	t.Run("no credential", func(t *testing.T) {
		a, base := hosted("100000")
		v := apitest.FromHandler(t, a.server.Handler())
		sweep(t, base, v, func(op apitest.Route) (*http.Request, bool) {
			if !v.NeedsCredential(op) {
				return nil, false
			}
			var body io.Reader
			if hasBody(op.Method) {
				body = strings.NewReader(`{}`)
			}
			return request(t, op.Method, base+sweepPath(op.Path), body), true
		}, http.StatusUnauthorized)
	})
	t.Run("over the rate limit", func(t *testing.T) {
		a, base := hosted("1")
		v := apitest.FromHandler(t, a.server.Handler())
		// The one request of the minute's budget.
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
		}
		sweep(t, base, v, func(op apitest.Route) (*http.Request, bool) {
			var body io.Reader
			if hasBody(op.Method) {
				body = strings.NewReader(`{}`)
			}
			return request(t, op.Method, base+sweepPath(op.Path), body), true
		}, http.StatusTooManyRequests)
	})
}
