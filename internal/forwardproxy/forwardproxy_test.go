package forwardproxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

func start(t *testing.T, allowPrivate bool) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", Config{AllowPrivate: allowPrivate,
		Auth: func(_ context.Context, user, pass string) (string, bool, error) {
			return "prx_" + user, user == "alice" && pass == "secret", nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func client(s *Server, user, pass string, tr *http.Transport) *http.Client {
	if tr == nil {
		tr = &http.Transport{}
	}
	tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: s.Addr(), User: url.UserPassword(user, pass)})
	return &http.Client{Transport: tr}
}

// TestForwardsWithCredentialsOnly: plain HTTP is forwarded and HTTPS
// tunnelled (CONNECT) for the right credentials, each recorded with its
// proxy; wrong or missing credentials get 407 with a Basic challenge and
// nothing is forwarded.
func TestForwardsWithCredentialsOnly(t *testing.T) {
	s := start(t, true)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" {
			t.Error("the proxy passed its credentials on")
		}
		io.WriteString(w, "plain "+r.URL.Path)
	}))
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tls "+r.URL.Path) }))
	defer tlsSrv.Close()

	get := func(c *http.Client, u string) (int, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(client(s, "alice", "secret", nil), plain.URL+"/a"); code != 200 || body != "plain /a" {
		t.Fatalf("plain: %d %q", code, body)
	}
	tr := tlsSrv.Client().Transport.(*http.Transport).Clone()
	if code, body := get(client(s, "alice", "secret", tr), tlsSrv.URL+"/b"); code != 200 || body != "tls /b" {
		t.Fatalf("tunnel: %d %q", code, body)
	}
	resp, err := client(s, "alice", "wrong", nil).Get(plain.URL + "/c")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") == "" {
		t.Fatalf("wrong password: %d %v; want 407 with a challenge", resp.StatusCode, resp.Header)
	}
	if _, err := client(s, "bob", "secret", tlsSrv.Client().Transport.(*http.Transport).Clone()).Get(tlsSrv.URL + "/d"); err == nil {
		t.Fatal("a tunnel was opened for unknown credentials")
	}
	seen := s.Seen()
	if len(seen) != 2 || seen[0].ProxyID != "prx_alice" || seen[0].Target != plain.URL+"/a" || seen[1].Method != http.MethodConnect {
		t.Fatalf("seen %+v; want the plain request and the tunnel, as prx_alice", seen)
	}
}

// TestRefusesPrivateDestinationsUnlessAllowed: a hosted deployment's proxy
// is no way into its own network.
func TestRefusesPrivateDestinationsUnlessAllowed(t *testing.T) {
	s := start(t, false)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("reached a loopback server") }))
	defer plain.Close()
	resp, err := client(s, "alice", "secret", nil).Get(plain.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("loopback destination: %d; want 403", resp.StatusCode)
	}
}
