// Package forwardproxy is the managed proxies' default supplier's
// egress: an HTTP forward proxy (CONNECT tunnels and plain HTTP requests
// in absolute form) that admits a request only with the credentials of a
// live proxy (Proxy-Authorization Basic), checked by an Authenticator the
// service gives it. It records who used it for what (Seen), so an operator
// (and a test) can tell which proxy a request went through.
package forwardproxy

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"phonefleet/domain"
)

// Authenticator checks a username and password; it returns the proxy they
// belong to, ok false when they are no live proxy's.
type Authenticator func(ctx context.Context, username, password string) (proxyID string, ok bool, err error)

// Seen is one request the proxy forwarded.
type Seen struct {
	ProxyID  string
	Username string
	// Method is CONNECT or the forwarded request's method; Target its
	// host:port (CONNECT) or absolute URL.
	Method string
	Target string
	At     time.Time
}

// maxSeen bounds the log of requests kept.
const maxSeen = 1000

// Config configures a Server.
type Config struct {
	Auth Authenticator
	// AllowPrivate admits destinations on loopback and private addresses
	// (local mode: the phones' pages may be served on this machine); off,
	// such destinations are refused with 403, so the proxy is no way into
	// the deployment's own network.
	AllowPrivate bool
	// AdvertiseHost is the host devices reach the proxy at; empty means
	// the listener's own.
	AdvertiseHost string
	Logger        *slog.Logger
}

// Server is the forward proxy.
type Server struct {
	cfg    Config
	ln     net.Listener
	srv    *http.Server
	dialer net.Dialer

	mu   sync.Mutex
	seen []Seen
}

// Listen opens the proxy's listener on addr (host:port; port 0 picks one).
func Listen(addr string, cfg Config) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, ln: ln, dialer: net.Dialer{Timeout: 10 * time.Second}}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	return s, nil
}

// Addr is the address the proxy listens on (host:port).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
	}()
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.cfg.Logger.Error("forward proxy stopped", "err", err)
	}
}

// Seen returns the requests forwarded, oldest first (at most the last
// 1000).
func (s *Server) Seen() []Seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Seen(nil), s.seen...)
}

func (s *Server) record(v Seen) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen) == maxSeen {
		s.seen = s.seen[1:]
	}
	s.seen = append(s.seen, v)
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, pass, ok := basicProxyAuth(r.Header.Get("Proxy-Authorization"))
	var proxyID string
	if ok {
		var err error
		proxyID, ok, err = s.cfg.Auth(r.Context(), user, pass)
		if err != nil {
			s.cfg.Logger.Warn("forward proxy: credentials cannot be checked", "err", err)
			http.Error(w, "credentials cannot be checked now", http.StatusServiceUnavailable)
			return
		}
	}
	if !ok {
		w.Header().Set("Proxy-Authenticate", `Basic realm="phonefleet"`)
		http.Error(w, "proxy authentication required", http.StatusProxyAuthRequired)
		return
	}
	if r.Method == http.MethodConnect {
		s.tunnel(w, r, proxyID, user)
		return
	}
	if !r.URL.IsAbs() || r.URL.Host == "" || (r.URL.Scheme != "http") {
		http.Error(w, "a forward proxy request names an absolute http URL", http.StatusBadRequest)
		return
	}
	s.forward(w, r, proxyID, user)
}

// basicProxyAuth reads a Proxy-Authorization Basic header.
func basicProxyAuth(h string) (user, pass string, ok bool) {
	const prefix = "Basic "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(h[len(prefix):]))
	if err != nil {
		return "", "", false
	}
	user, pass, ok = strings.Cut(string(b), ":")
	return user, pass, ok && user != ""
}

// dial connects to hostport, refusing private destinations unless allowed.
func (s *Server) dial(ctx context.Context, hostport string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		if !s.cfg.AllowPrivate && (ip.IP.IsLoopback() || ip.IP.IsPrivate() || ip.IP.IsLinkLocalUnicast() || ip.IP.IsUnspecified()) {
			continue
		}
		return s.dialer.DialContext(ctx, "tcp", net.JoinHostPort(ip.IP.String(), port))
	}
	return nil, errRefused
}

var errRefused = errors.New("forward proxy: destination refused")

func (s *Server) tunnel(w http.ResponseWriter, r *http.Request, proxyID, user string) {
	up, err := s.dial(r.Context(), r.Host)
	if err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, errRefused) {
			status = http.StatusForbidden
		}
		http.Error(w, "cannot reach "+r.Host, status)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "tunnels are not supported here", http.StatusInternalServerError)
		return
	}
	s.record(Seen{ProxyID: proxyID, Username: user, Method: http.MethodConnect, Target: r.Host, At: time.Now()})
	conn, buf, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	_, _ = conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	go func() {
		if n := buf.Reader.Buffered(); n > 0 {
			b, _ := buf.Reader.Peek(n)
			_, _ = up.Write(b)
		}
		_, _ = io.Copy(up, conn)
		up.Close()
	}()
	_, _ = io.Copy(conn, up)
	conn.Close()
}

// hopHeaders are not forwarded (RFC 9110 7.6.1), with the proxy's own
// credentials.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (s *Server) forward(w http.ResponseWriter, r *http.Request, proxyID, user string) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	tr := &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return s.dial(ctx, addr) },
		DisableKeepAlives: true, ResponseHeaderTimeout: 30 * time.Second}
	s.record(Seen{ProxyID: proxyID, Username: user, Method: r.Method, Target: r.URL.String(), At: time.Now()})
	resp, err := tr.RoundTrip(out)
	if err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, errRefused) {
			status = http.StatusForbidden
		}
		http.Error(w, "cannot reach "+r.URL.Host, status)
		return
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// Issue implements the managed proxies' supplier port: every proxy of the
// local supplier is this listener, told apart by its credentials, which
// the Authenticator checks against the service's records (so nothing is
// kept here).
func (s *Server) Issue(_ context.Context, _ string, _ domain.ProxyProduct, _, _ string) (domain.ProxyEndpoint, error) {
	host, port, err := net.SplitHostPort(s.Addr())
	if err != nil {
		return domain.ProxyEndpoint{}, err
	}
	if s.cfg.AdvertiseHost != "" {
		host = s.cfg.AdvertiseHost
	}
	n, err := strconv.Atoi(port)
	return domain.ProxyEndpoint{Host: host, Port: n}, err
}

// Rotate implements the supplier port: the new credentials are checked
// from the service's records as soon as they are recorded.
func (s *Server) Rotate(context.Context, string, string, string) error { return nil }

// Revoke implements the supplier port: a revoked proxy's credentials stop
// matching an active proxy in the service's records.
func (s *Server) Revoke(context.Context, string) error { return nil }
