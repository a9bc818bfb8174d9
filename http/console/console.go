// Package console serves the console: the signed-in person's web page to
// watch and drive the fleet, read receipts and runs, manage webhooks,
// keys and gateways, and approve a CLI sign-in. It is one HTML document and a few ES
// modules embedded in the binary (nothing is fetched from outside at run
// time); every page calls the same /v1 routes as any client, with the
// person's bearer token in hosted mode (kept in memory only) and none in
// local mode, where the service is the local operator.
package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// Config is what the page needs to know about its deployment.
type Config struct {
	// Mode is "local" or "hosted".
	Mode string
	// Issuer is the authorization server hosted mode signs people in with
	// (authorization code + PKCE); empty in local mode.
	Issuer string
	// ClientID is the console's public OAuth client id (hosted).
	ClientID string
	// Resource is the audience asked for: {base_url}/mcp.
	Resource string
}

// Console serves the page (GET /) and its assets (GET /console/…).
type Console struct {
	index  []byte
	files  fs.FS
	policy string
}

// New renders the page for cfg.
func New(cfg Config) (*Console, error) {
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	tmpl, err := template.ParseFS(files, "index.html")
	if err != nil {
		return nil, err
	}
	conf, err := json.Marshal(map[string]string{"mode": cfg.Mode, "issuer": cfg.Issuer, "clientId": cfg.ClientID, "resource": cfg.Resource})
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	// As template.JS the page reads the object itself, not a string of it;
	// json.Marshal escapes <, > and &, so it cannot end the script element.
	if err := tmpl.Execute(&b, map[string]any{"Config": template.JS(conf)}); err != nil {
		return nil, err
	}
	// The page talks to its own origin, and in hosted mode to the
	// authorization server (discovery and the token exchange).
	connect := "'self'"
	if cfg.Issuer != "" {
		// Its origin, not its URL: a source with a path allows that path
		// only, and discovery and the token endpoint are other paths.
		if u, err := url.Parse(cfg.Issuer); err == nil && u.Host != "" {
			connect += " " + u.Scheme + "://" + u.Host
		}
	}
	policy := "default-src 'self'; img-src 'self' blob: data:; style-src 'self'; script-src 'self'; connect-src " + connect +
		"; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
	return &Console{index: b.Bytes(), files: files, policy: policy}, nil
}

// ServeIndex answers GET /: the one document every page renders into.
func (c *Console) ServeIndex(w http.ResponseWriter, r *http.Request) {
	c.headers(w, "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(c.index)
}

// ServeAsset answers GET /console/<file>: a script, a style sheet or an
// icon. Anything else (a directory, the template, a missing file) is
// refused with notFound.
func (c *Console) ServeAsset(w http.ResponseWriter, r *http.Request, notFound func(http.ResponseWriter, *http.Request)) {
	name := strings.TrimPrefix(r.URL.Path, "/console/")
	clean := path.Clean(name)
	if name == "" || clean != name || strings.HasPrefix(clean, "../") || clean == "index.html" {
		notFound(w, r)
		return
	}
	b, err := fs.ReadFile(c.files, clean)
	if err != nil {
		notFound(w, r)
		return
	}
	ctype := mime.TypeByExtension(path.Ext(clean))
	switch path.Ext(clean) {
	case ".js":
		ctype = "text/javascript; charset=utf-8"
	case ".css":
		ctype = "text/css; charset=utf-8"
	}
	if ctype == "" {
		notFound(w, r)
		return
	}
	c.headers(w, ctype)
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

func (c *Console) headers(w http.ResponseWriter, ctype string) {
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Security-Policy", c.policy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}
