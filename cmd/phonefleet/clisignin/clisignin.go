// Package clisignin is the client side of CLI sign-in (/v1/cli-sessions):
// `phonefleet login` starts a session with a fresh X25519 key pair, shows
// the person the code and the console page that approves it, polls until
// the session is decided, opens the key token sealed to its key pair and
// stores it, with the service's URL and the key's id, in a file only the
// user may read; `phonefleet logout` revokes that key and removes the
// file. The private key lives in memory for the one session only.
package clisignin

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"phonefleet/domain"
	"phonefleet/http/wire"
)

// Credentials are what login stores: the service, the key's token and the
// key's id.
type Credentials struct {
	URL   string `json:"url"`
	Token string `json:"token"`
	KeyID string `json:"keyId"`
}

// credentialsFile is the file's name under the configuration directory.
const credentialsFile = "credentials.json"

// CredentialsPath returns where the credentials are kept:
// $XDG_CONFIG_HOME/phonefleet/credentials.json, with XDG_CONFIG_HOME
// defaulting to ~/.config (the XDG base directory specification). getenv
// reads the environment (os.Getenv).
func CredentialsPath(getenv func(string) string) (string, error) {
	dir := getenv("XDG_CONFIG_HOME")
	if dir == "" || !filepath.IsAbs(dir) {
		home := getenv("HOME")
		if home == "" {
			var err error
			if home, err = os.UserHomeDir(); err != nil {
				return "", fmt.Errorf("no configuration directory: set XDG_CONFIG_HOME or HOME")
			}
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "phonefleet", credentialsFile), nil
}

// Save writes c to path, readable and writable by the user only (0600),
// in a directory only the user may enter (0700). It writes a temporary
// file and renames it into place, so the file is never seen half written
// or with a wider mode.
func Save(path string, c Credentials) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, credentialsFile+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// ErrNotSignedIn is returned by Load when there is no credentials file.
var ErrNotSignedIn = errors.New("not signed in")

// Load reads the credentials at path. A file others may read is refused:
// the token is a secret.
func Load(path string) (Credentials, error) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return Credentials{}, fmt.Errorf("%w: no credentials at %s; run phonefleet login", ErrNotSignedIn, path)
	}
	if err != nil {
		return Credentials{}, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return Credentials{}, fmt.Errorf("%s: readable by others (mode %v); make it 0600", path, st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Credentials{}, err
	}
	var c Credentials
	if err := json.Unmarshal(data, &c); err != nil || c.URL == "" || c.Token == "" {
		return Credentials{}, fmt.Errorf("%s: not a phonefleet credentials file", path)
	}
	return c, nil
}

// Options configure Login.
type Options struct {
	// URL is the service's base URL ({base_url}).
	URL string
	// Scopes are the scopes asked for; nil asks for the service's default
	// (the device and run scopes).
	Scopes []domain.Scope
	// ClientName names the program in the console ("phonefleet CLI 1.2").
	ClientName string
	// Host names this computer in the console and in the key's name
	// ("CLI on <host>"); empty means os.Hostname.
	Host string
	// Path is where the credentials are stored (CredentialsPath).
	Path string
	// Out receives what the person reads: the code, the page, the outcome.
	Out io.Writer
	// HTTP is the client (nil: a client with a 30-second timeout).
	HTTP *http.Client
	// Interval, when not zero, replaces the interval the service asks the
	// CLI to poll at (tests).
	Interval time.Duration
}

func (o *Options) client() *http.Client {
	if o.HTTP == nil {
		return &http.Client{Timeout: 30 * time.Second}
	}
	return o.HTTP
}

// apiError is a non-2xx answer of the service, read from its envelope.
type apiError struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is the Retry-After header, when the service sent one.
	RetryAfter time.Duration
}

func (e *apiError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("the service answered HTTP %d", e.Status)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// call sends one request and decodes a 2xx JSON answer into out (nil:
// none); any other answer is an *apiError.
func call(ctx context.Context, c *http.Client, method, url string, headers map[string]string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
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
		e := &apiError{Status: resp.StatusCode}
		var env struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(raw, &env) == nil {
			e.Code, e.Message = env.Error.Code, env.Error.Message
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		}
		return resp.StatusCode, e
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("the service's answer is not what this CLI expects: %w", err)
		}
	}
	return resp.StatusCode, nil
}

// pollTokenHeader carries the poll token (httpapi.PollTokenHeader).
const pollTokenHeader = "X-Poll-Token"

// Login signs the CLI in: it starts a session, tells the person where to
// approve it, waits for the decision and stores the key. It returns the
// stored credentials, or why there are none (denied, expired, the service
// unreachable until the code expired, the context cancelled).
func Login(ctx context.Context, o Options) (Credentials, error) {
	base := strings.TrimRight(o.URL, "/")
	if base == "" || o.Path == "" || o.Out == nil {
		return Credentials{}, errors.New("clisignin: Login needs a URL, a credentials path and an output")
	}
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return Credentials{}, err
	}
	host := o.Host
	if host == "" {
		host, _ = os.Hostname()
	}
	c := o.client()
	var started wire.StartedCLISession
	req := map[string]any{"publicKey": base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes()),
		"clientName": o.ClientName, "host": host}
	if o.Scopes != nil {
		req["scopes"] = o.Scopes
	}
	if _, err := call(ctx, c, http.MethodPost, base+"/v1/cli-sessions", nil, req, &started); err != nil {
		return Credentials{}, fmt.Errorf("start the sign-in at %s: %w", base, err)
	}
	expires, _ := time.Parse(time.RFC3339Nano, started.ExpiresAt)
	fmt.Fprintf(o.Out, "To sign in, open this page in a browser where you are signed in to phonefleet:\n\n    %s\n\n"+
		"and approve the code  %s\n\nWaiting for approval (the code expires at %s)...\n",
		started.VerificationURL, started.UserCode, expires.Local().Format("15:04:05"))

	interval := time.Duration(started.Interval) * time.Second
	if o.Interval > 0 {
		interval = o.Interval
	}
	wait := interval
	for {
		select {
		case <-ctx.Done():
			return Credentials{}, ctx.Err()
		case <-time.After(wait):
		}
		wait = interval
		var p wire.CLISessionPoll
		_, err := call(ctx, c, http.MethodGet, base+"/v1/cli-sessions/"+started.SessionID,
			map[string]string{pollTokenHeader: started.PollToken}, nil, &p)
		var ae *apiError
		switch {
		case errors.As(err, &ae) && (ae.Status == http.StatusTooManyRequests || ae.Status >= 500):
			// Over budget or briefly unavailable: wait as told, keep polling.
			wait = max(interval, ae.RetryAfter)
			continue
		case err != nil && !errors.As(err, &ae) && ctx.Err() == nil && (expires.IsZero() || time.Now().Before(expires)):
			// The connection failed (the service restarting?): try again.
			continue
		case err != nil:
			return Credentials{}, fmt.Errorf("poll the sign-in: %w", err)
		}
		switch p.State {
		case domain.CLIStatePending:
			continue
		case domain.CLIStateApproved:
			return finish(ctx, c, o, base, started.SessionID, priv, p)
		case domain.CLIStateDenied:
			return Credentials{}, errors.New("the sign-in was denied in the console")
		case domain.CLIStateExpired:
			return Credentials{}, errors.New("the code expired before it was approved; run phonefleet login again")
		case domain.CLIStateConsumed:
			return Credentials{}, errors.New("this sign-in's key was already handed to another poll; run phonefleet login again, " +
				"and revoke in the console any \"CLI on\" key you do not recognise")
		default:
			return Credentials{}, fmt.Errorf("the service reports the sign-in as %q, which this CLI does not know", p.State)
		}
	}
}

// finish opens the approved key, stores it and says so. A key that cannot
// be stored is revoked again, so no working key is left behind unsaved.
func finish(ctx context.Context, c *http.Client, o Options, base, sessionID string, priv *ecdh.PrivateKey, p wire.CLISessionPoll) (Credentials, error) {
	if p.SealedToken == nil {
		return Credentials{}, errors.New("the service approved the sign-in but sent no key")
	}
	token, err := domain.OpenCLIToken(priv, sessionID, *p.SealedToken)
	if err != nil {
		return Credentials{}, fmt.Errorf("open the approved key: %w", err)
	}
	creds := Credentials{URL: base, Token: token, KeyID: p.KeyID}
	if err := Save(o.Path, creds); err != nil {
		if rerr := revoke(context.WithoutCancel(ctx), c, creds); rerr != nil {
			return Credentials{}, fmt.Errorf("store the key in %s: %w (and revoking it failed too: %v; revoke %s in the console)", o.Path, err, rerr, p.KeyID)
		}
		return Credentials{}, fmt.Errorf("store the key in %s: %w (the key was revoked again)", o.Path, err)
	}
	scopes := make([]string, len(p.Scopes))
	for i, s := range p.Scopes {
		scopes[i] = string(s)
	}
	fmt.Fprintf(o.Out, "Signed in: API key %s (%s), stored in %s\n", p.KeyID, strings.Join(scopes, ", "), o.Path)
	return creds, nil
}

func revoke(ctx context.Context, c *http.Client, creds Credentials) error {
	_, err := call(ctx, c, http.MethodDelete, creds.URL+"/v1/api-keys/current", map[string]string{"Authorization": "Bearer " + creds.Token}, nil, nil)
	return err
}

// LogoutOptions configure Logout.
type LogoutOptions struct {
	// Path is where the credentials are stored (CredentialsPath).
	Path string
	// Out receives what the person reads.
	Out io.Writer
	// HTTP is the client (nil: a client with a 30-second timeout).
	HTTP *http.Client
}

// Logout revokes the stored key (DELETE /v1/api-keys/current with it) and
// removes the credentials file. A key the service no longer accepts
// (revoked, expired, unknown: 401) is as good as revoked: the file is
// removed. When the service cannot be asked, the file is kept, so the
// logout can be tried again.
func Logout(ctx context.Context, o LogoutOptions) error {
	creds, err := Load(o.Path)
	if err != nil {
		return err
	}
	lo := Options{HTTP: o.HTTP}
	err = revoke(ctx, lo.client(), creds)
	var ae *apiError
	switch {
	case err == nil:
		fmt.Fprintf(o.Out, "Revoked API key %s.\n", creds.KeyID)
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		fmt.Fprintf(o.Out, "API key %s no longer works (%s); nothing to revoke.\n", creds.KeyID, ae.Message)
	default:
		return fmt.Errorf("revoke API key %s at %s: %w; the credentials are kept in %s so you can try again", creds.KeyID, creds.URL, err, o.Path)
	}
	if err := os.Remove(o.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	fmt.Fprintf(o.Out, "Removed %s.\n", o.Path)
	return nil
}
