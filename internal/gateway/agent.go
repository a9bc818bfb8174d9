// Package gateway holds both ends of a gateway's service to the control
// plane (issue 14). The agent (RunAgent) is the `phonefleet gateway`
// process at a site: it enrolls once, keeps an outbound tunnel
// (internal/tunnel) to a control-plane instance, and serves its devices,
// sim phones and adb phones, through it. The hub is the control plane's
// end of those tunnels.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coder/websocket"

	"phonefleet/internal/releases"
	"phonefleet/internal/tunnel"
)

// AgentConfig configures RunAgent.
type AgentConfig struct {
	// URLs are the control plane's instances (http(s)://host:port), tried
	// in turn.
	URLs []string
	// DataDir holds the credential (gateway.json) and the sims' states
	// (sims/<key>.state); it is created 0700.
	DataDir string
	// EnrollCode is the one-time code exchanged for a credential when
	// DataDir has none. It is never logged.
	EnrollCode string
	// Name names the gateway at enrollment (empty: the code's name).
	Name string
	// SimDevices is how many sim phones the gateway serves (sim-1…N).
	SimDevices int
	// ADBAddr is the adb server whose devices the gateway serves (empty:
	// none).
	ADBAddr string
	// Channel is the release channel followed (empty: stable).
	Channel string
	// SimLatency, when positive, delays every action on a sim phone: a
	// slow phone.
	SimLatency time.Duration
	// Version is this gateway's phonefleet version.
	Version string
	// Logger receives the agent's log (nil: slog.Default()). It never
	// sees the code or the credential.
	Logger *slog.Logger
	// HTTPClient makes enrollment, release and tunnel handshake requests
	// (nil: a client with a 30-second timeout).
	HTTPClient *http.Client
	// PingInterval and MissedPings are the tunnel's heartbeat at the
	// gateway's end (tunnel.Options; zero: the tunnel's defaults). A
	// half-open tunnel ends after about PingInterval × (MissedPings + 1)
	// and the gateway reconnects, to the next URL.
	PingInterval time.Duration
	MissedPings  int
}

// How often the agent looks again.
const (
	agentADBPoll        = 5 * time.Second
	agentReleasePoll    = 6 * time.Hour
	agentHelloTimeout   = time.Minute
	agentStableUptime   = time.Minute // a connection this old resets the backoff
	agentCredentialFile = "gateway.json"
)

// RunAgent runs the gateway until ctx ends (then it closes its tunnel with
// 1001 and returns nil) or it cannot go on: it has no credential and no
// code ("no credential: set GATEWAY_ENROLL_CODE"), the control plane
// refused the code ("enrollment code refused") or the credential ("gateway
// credential refused (revoked?)"), the credential file is readable by
// others, or a sim's saved state cannot be read. A tunnel that fails or
// ends is opened again, on the next URL, after a backoff (500 ms growing
// to 30 s, with jitter; back to 500 ms after a minute connected).
func RunAgent(ctx context.Context, cfg AgentConfig) error {
	if len(cfg.URLs) == 0 {
		return errors.New("gateway: no control plane URL")
	}
	if cfg.DataDir == "" {
		return errors.New("gateway: no data directory")
	}
	if cfg.Channel == "" {
		cfg.Channel = "stable"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("gateway: data directory: %w", err)
	}
	cred, err := loadOrEnroll(ctx, cfg)
	if err != nil || ctx.Err() != nil {
		return err
	}
	log := cfg.Logger.With("gatewayId", cred.GatewayID)
	devs, err := openAgentDevices(cfg, cred.GatewayID, log)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer devs.close()
	a := &agent{cfg: cfg, cred: cred, log: log, devs: devs}

	ctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	wg.Go(func() { a.watchReleases(ctx) })
	if cfg.ADBAddr != "" {
		devs.syncADB(ctx)
		wg.Go(func() { a.watchADB(ctx) })
	}
	return a.connect(ctx)
}

// agent is one running gateway.
type agent struct {
	cfg  AgentConfig
	cred agentCredential
	log  *slog.Logger
	devs *agentDevices

	mu sync.Mutex
	// peer is the tunnel in service (nil between connections); told is
	// the device list version the control plane has.
	peer *tunnel.Peer
	told int
}

// connect keeps a tunnel open until ctx ends or the credential is refused.
func (a *agent) connect(ctx context.Context) error {
	b := &backoff.ExponentialBackOff{InitialInterval: 500 * time.Millisecond, RandomizationFactor: 0.5,
		Multiplier: 1.5, MaxInterval: 30 * time.Second}
	b.Reset()
	for i := 0; ; i++ {
		u := a.cfg.URLs[i%len(a.cfg.URLs)]
		up, err := a.session(ctx, u)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, tunnel.ErrRefused) {
			return fmt.Errorf("gateway credential refused (revoked?): %w", err)
		}
		if up >= agentStableUptime {
			b.Reset()
		}
		wait := min(b.NextBackOff(), b.MaxInterval) // the jitter may exceed the cap
		a.log.Warn("gateway tunnel down; reconnecting", "url", u, "err", err, "retryIn", wait.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// session opens one tunnel to u, introduces the gateway and serves the
// control plane's calls until the tunnel ends; it returns how long the
// tunnel was in service and why it ended.
func (a *agent) session(ctx context.Context, u string) (time.Duration, error) {
	peer, err := tunnel.Dial(ctx, u, a.cred.Credential, a.devs.handle,
		tunnel.Options{Logger: a.log, HTTPClient: a.cfg.HTTPClient, PingInterval: a.cfg.PingInterval, MissedPings: a.cfg.MissedPings})
	if err != nil {
		return 0, err
	}
	devices, version := a.devs.list()
	hctx, cancel := context.WithTimeout(ctx, agentHelloTimeout)
	var welcome tunnel.Welcome
	err = peer.Call(hctx, tunnel.MethodHello, tunnel.Hello{Version: a.cfg.Version, Channel: a.cfg.Channel, Devices: devices}, &welcome)
	cancel()
	if err != nil {
		peer.Close(websocket.StatusNormalClosure, "hello failed")
		return 0, fmt.Errorf("gateway.hello: %w", err)
	}
	a.mu.Lock()
	a.peer, a.told = peer, version
	a.mu.Unlock()
	a.log.Info("gateway tunnel connected", "url", u, "devices", len(devices))
	a.tellDevices(ctx) // a change while the hello was on its way
	start := time.Now()
	err = peer.Serve(ctx)
	a.mu.Lock()
	a.peer = nil
	a.mu.Unlock()
	return time.Since(start), err
}

// tellDevices sends the device list to the control plane when it changed
// since the control plane last heard it. Unsent, it goes with the next
// hello.
func (a *agent) tellDevices(ctx context.Context) {
	devices, version := a.devs.list()
	a.mu.Lock()
	peer := a.peer
	stale := peer != nil && a.told != version
	a.mu.Unlock()
	if !stale {
		return
	}
	if err := peer.Notify(ctx, tunnel.MethodDevices, tunnel.DevicesChanged{Devices: devices}); err != nil {
		a.log.Debug("device list not sent", "err", err)
		return
	}
	a.mu.Lock()
	if a.peer == peer {
		a.told = version
	}
	a.mu.Unlock()
}

// watchADB lists the adb devices every agentADBPoll and tells the control
// plane of changes.
func (a *agent) watchADB(ctx context.Context) {
	t := time.NewTicker(agentADBPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if a.devs.syncADB(ctx) {
			a.tellDevices(ctx)
		}
	}
}

// watchReleases asks for the channel's current release at start and every
// agentReleasePoll, and logs one newer than this gateway.
func (a *agent) watchReleases(ctx context.Context) {
	for {
		a.checkRelease(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(agentReleasePoll):
		}
	}
}

func (a *agent) checkRelease(ctx context.Context) {
	for _, u := range a.cfg.URLs {
		rel, found, err := a.currentRelease(ctx, u)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Debug("release check failed", "url", u, "err", err)
			}
			continue
		}
		if !found {
			a.log.Debug("no release on the channel", "channel", a.cfg.Channel)
		} else if releases.Newer(rel.Version, a.cfg.Version) {
			a.log.Info("a newer phonefleet release exists", "version", rel.Version, "url", rel.URL, "sha256", rel.SHA256)
		}
		return
	}
	a.log.Warn("no control plane answered the release check")
}

// currentRelease asks base for the channel's current release: found false
// when it has none (404).
func (a *agent) currentRelease(ctx context.Context, base string) (rel releases.Release, found bool, err error) {
	u, err := controlPlaneURL(base, "/gateway/v1/releases/current")
	if err != nil {
		return rel, false, err
	}
	u += "?channel=" + url.QueryEscape(a.cfg.Channel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return rel, false, err
	}
	req.Header.Set("Authorization", "Bearer "+a.cred.Credential)
	status, err := sendJSON(a.cfg.HTTPClient, req, &rel)
	if status == http.StatusNotFound {
		return rel, false, nil
	}
	return rel, err == nil, err
}

// agentCredential is the gateway's identity, kept in
// <DataDir>/gateway.json.
type agentCredential struct {
	GatewayID  string `json:"gatewayId"`
	OrgID      string `json:"orgId"`
	Credential string `json:"credential"`
}

// loadOrEnroll reads the gateway's credential, or enrolls with the code and
// stores the one it gets.
func loadOrEnroll(ctx context.Context, cfg AgentConfig) (agentCredential, error) {
	path := filepath.Join(cfg.DataDir, agentCredentialFile)
	c, err := readCredential(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return c, err
	}
	if cfg.EnrollCode == "" {
		return c, errors.New("no credential: set GATEWAY_ENROLL_CODE")
	}
	c, err = enrollWithCode(ctx, cfg)
	if err != nil || ctx.Err() != nil {
		return c, err
	}
	raw, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return c, err
	}
	if err := saveFileAtomic(path, append(raw, '\n'), true); err != nil {
		return c, fmt.Errorf("gateway: storing the credential: %w", err)
	}
	cfg.Logger.Info("gateway enrolled", "gatewayId", c.GatewayID, "orgId", c.OrgID)
	return c, nil
}

// readCredential reads path, refusing a file others may read (the
// credential is a secret). A missing file answers an error wrapping
// fs.ErrNotExist.
func readCredential(path string) (agentCredential, error) {
	var c agentCredential
	st, err := os.Stat(path)
	if err != nil {
		return c, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return c, fmt.Errorf("gateway credential %s is readable by others (mode %v); chmod 600 it", path, st.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(raw, &c); err != nil || c.GatewayID == "" || c.Credential == "" {
		return agentCredential{}, fmt.Errorf("%s is not a gateway credential file", path)
	}
	return c, nil
}

// errEnrollCodeRefused is enrollment's error when the control plane refused the
// code.
var errEnrollCodeRefused = errors.New("enrollment code refused: it is unknown, used or expired; create a new one")

// enrollWithCode exchanges the code for a credential, trying the URLs in turn and
// again after a backoff while none answers. A refused code, or another
// refusal of the request, is final.
func enrollWithCode(ctx context.Context, cfg AgentConfig) (agentCredential, error) {
	body, err := json.Marshal(map[string]string{"code": cfg.EnrollCode, "name": cfg.Name, "version": cfg.Version})
	if err != nil {
		return agentCredential{}, err
	}
	b := backoff.NewExponentialBackOff()
	b.MaxInterval = 30 * time.Second
	for i := 0; ; i++ {
		base := cfg.URLs[i%len(cfg.URLs)]
		u, err := controlPlaneURL(base, "/gateway/v1/enroll")
		if err != nil {
			return agentCredential{}, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err != nil {
			return agentCredential{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		var c agentCredential
		status, err := sendJSON(cfg.HTTPClient, req, &c)
		switch {
		case err == nil && (c.GatewayID == "" || c.Credential == ""):
			return agentCredential{}, fmt.Errorf("enrollment at %s: the answer holds no credential", base)
		case err == nil:
			return c, nil
		case status == http.StatusUnauthorized:
			return agentCredential{}, errEnrollCodeRefused
		case status >= 400 && status < 500 && status != http.StatusTooManyRequests:
			return agentCredential{}, fmt.Errorf("enrollment at %s: %w", base, err)
		}
		wait := min(b.NextBackOff(), b.MaxInterval)
		cfg.Logger.Warn("enrollment failed; trying again", "url", base, "err", err, "retryIn", wait.String())
		select {
		case <-ctx.Done():
			return agentCredential{}, nil
		case <-time.After(wait):
		}
	}
}

// controlPlaneURL joins a control plane base URL and a path.
func controlPlaneURL(base, path string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("gateway: control plane URL %q must be http(s)://host[:port]", base)
	}
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u.String(), nil
}

// sendJSON sends req and decodes a 2xx JSON answer into out. Another answer
// is an error carrying the service's error code and message, with its
// status.
func sendJSON(c *http.Client, req *http.Request, out any) (int, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var env struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &env) == nil && env.Error.Code != "" {
			return resp.StatusCode, fmt.Errorf("HTTP %d %s: %s", resp.StatusCode, env.Error.Code, env.Error.Message)
		}
		return resp.StatusCode, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return resp.StatusCode, fmt.Errorf("HTTP %d: an unreadable answer: %w", resp.StatusCode, err)
	}
	return resp.StatusCode, nil
}

// saveFileAtomic writes data to path, mode 0600, through a temporary
// file in the same directory renamed into place, so that path never holds
// half a file or a wider mode. sync flushes the file to disk before the
// rename and the directory after it, so the new file survives a power
// cut once saveFileAtomic returns.
func saveFileAtomic(path string, data []byte, sync bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil || !sync {
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}
