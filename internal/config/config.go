// Package config reads phonefleet's settings from environment variables, with
// command-line flags of the same meaning overriding them. An invalid setting
// stops start-up with one line naming it.
package config

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"phonefleet/domain"
)

// Config is the service's configuration.
type Config struct {
	// Addr is the listen address (SERVICE_ADDR).
	Addr string
	// DatabaseURL names PostgreSQL; empty runs the service's own cluster
	// under DataDir (DATABASE_URL).
	DatabaseURL string
	// Mode is "local" or "hosted" (SERVICE_MODE).
	Mode string
	// DataDir holds the embedded cluster and server keys (SERVICE_DATA_DIR).
	DataDir string
	// DevToken, when set in local mode, is the exact bearer required (SERVICE_DEV_TOKEN).
	DevToken string
	// PublicURL is {base_url} (SERVICE_PUBLIC_URL); default http://<Addr>.
	PublicURL string
	// LogLevel is debug, info, warn or error (SERVICE_LOG_LEVEL).
	LogLevel string
	// DocsURL is {docs_url}, where the contract files are served (SERVICE_DOCS_URL); default PublicURL.
	DocsURL string

	// OAuthIssuer is the authorization server, the tokens' iss (SERVICE_OAUTH_ISSUER; hosted: required).
	OAuthIssuer string
	// OAuthJWKSURL is where its keys are published (SERVICE_OAUTH_JWKS_URL; hosted: required).
	OAuthJWKSURL string
	// OAuthRoleURL is the identity-provider endpoint asked for an app token's role (SERVICE_OAUTH_ROLE_URL).
	OAuthRoleURL string
	// FirstPartyOAuthClients lists client_id@issuer pairs whose tokens get the console's surface.
	FirstPartyOAuthClients string
	// KeyRotationGrace is how long a rotated API key's old secret keeps working (SERVICE_KEY_ROTATION_GRACE).
	KeyRotationGrace time.Duration
	// CheckpointEvery and CheckpointInterval say when an organisation's
	// receipt chain is signed: once that many entries were added since
	// its last checkpoint, or once that long passed since it with at
	// least one added (SERVICE_RECEIPT_CHECKPOINT_EVERY, _INTERVAL).
	CheckpointEvery    int
	CheckpointInterval time.Duration
	// TunnelPingInterval and TunnelPingMisses are the gateway tunnels'
	// heartbeat at this end: a ping every interval, the tunnel dropped
	// after that many in a row go unanswered (SERVICE_TUNNEL_PING_INTERVAL,
	// _MISSES). A half-open tunnel thus frees its gateway within about
	// interval × (misses + 1).
	TunnelPingInterval time.Duration
	TunnelPingMisses   int
	// RateLimitAuthenticated and RateLimitAnonymous are the per-minute request budgets (hosted only).
	RateLimitAuthenticated int
	RateLimitAnonymous     int
	// CORSOrigins lists the browser origins allowed to call the service (SERVICE_CORS_ORIGINS, comma separated).
	CORSOrigins string
	// IdentityWebhookSecret is the Standard Webhooks secret (whsec_<base64>) the identity provider
	// signs POST /webhooks/identity with (SERVICE_IDENTITY_WEBHOOK_SECRET); empty: that route answers 404.
	IdentityWebhookSecret string

	// ReleasesFile is the releases manifest gateways read their current release from
	// (SERVICE_RELEASES_FILE); empty: no releases are published.
	ReleasesFile string

	// NATSURL is the NATS server that carries device calls between the
	// instances sharing one database (SERVICE_NATS_URL; a comma-separated
	// list names several servers of one NATS cluster); empty: one
	// instance, and a device another process drives answers offline.
	NATSURL string
	// NATSCreds is a NATS credentials file (user JWT and NKEY seed) this
	// instance authenticates to the NATS server with (SERVICE_NATS_CREDS).
	NATSCreds string
	// NATSNkeySeed is a file holding the NKEY user seed (SU…) this
	// instance authenticates with instead (SERVICE_NATS_NKEY_SEED).
	NATSNkeySeed string
	// NATSTLSCA is a CA bundle the NATS server's certificate is checked
	// against; set, the connection is TLS (SERVICE_NATS_TLS_CA).
	NATSTLSCA string
	// NATSTLSCert and NATSTLSKey are this instance's TLS certificate and
	// key for a NATS server that verifies clients (SERVICE_NATS_TLS_CERT,
	// SERVICE_NATS_TLS_KEY).
	NATSTLSCert, NATSTLSKey string

	// SimDevices is how many sim phones local mode starts with (SERVICE_SIM_DEVICES).
	SimDevices int

	// ADBAddr is the adb server the adb backend talks to (SERVICE_ADB_ADDR).
	ADBAddr string
	// ADBDiscover registers every device the adb server reports in the local
	// organisation and records them going offline and online (SERVICE_ADB_DISCOVER).
	ADBDiscover bool
	// ADBSimDevices is how many adb-reachable sim phones local mode starts:
	// device-side adb daemons over sim phones, connected to the adb server
	// at ADBAddr (started when none runs), so the fleet has adb devices
	// without a real phone (SERVICE_ADB_SIM_DEVICES).
	ADBSimDevices int

	// WebhookCAFile is an extra CA bundle trusted for webhook receivers, local mode (SERVICE_WEBHOOK_CA_FILE).
	WebhookCAFile string

	// PlannerURL is the base URL of an OpenAI-compatible chat-completions
	// API for the built-in run agent, e.g. https://api.openai.com/v1
	// (SERVICE_PLANNER_URL); empty: built-in runs use the scripted planner only.
	PlannerURL string
	// PlannerAPIKey is the bearer sent to it (SERVICE_PLANNER_API_KEY).
	PlannerAPIKey string
	// PlannerModel is the model asked (SERVICE_PLANNER_MODEL).
	PlannerModel string
	// CopilotURL, CopilotAPIKey and CopilotModel are the copilot's
	// OpenAI-compatible provider (SERVICE_COPILOT_URL, _API_KEY, _MODEL);
	// unset, the copilot uses the planner's (SERVICE_PLANNER_*). Empty
	// after that: the deployment serves no copilot chat.
	CopilotURL    string
	CopilotAPIKey string
	CopilotModel  string
	// CopilotApprove is the deployment's approval policy
	// (SERVICE_COPILOT_APPROVE): a comma-separated list of install,
	// sensitive and payment, or none; see domain.ParseCopilotPolicy.
	CopilotApprove string
	// CopilotSweepInterval is how often the copilot's sweep looks for
	// approvals past their time and lost turns
	// (SERVICE_COPILOT_SWEEP_INTERVAL).
	CopilotSweepInterval time.Duration

	// ConsoleClientID is the console's public OAuth client id, used for the
	// authorization code + PKCE sign-in in hosted mode (SERVICE_CONSOLE_CLIENT_ID).
	ConsoleClientID string

	// StripeSecretKey is the payment provider's secret API key
	// (SERVICE_STRIPE_SECRET_KEY); empty: no payment provider, checkout
	// answers 503 checkout_unavailable.
	StripeSecretKey string
	// StripeAPIBase is the provider API's base URL (SERVICE_STRIPE_API_BASE);
	// empty is Stripe's real API. Point it at stripe-mock in tests and development.
	StripeAPIBase string
	// StripeWebhookSecret is the whsec_ secret Stripe signs POST /webhooks/stripe
	// with (SERVICE_STRIPE_WEBHOOK_SECRET).
	StripeWebhookSecret string
	// CatalogFile is the price list, JSON (SERVICE_CATALOG_FILE); empty: the embedded default.
	CatalogFile string
	// AppCatalogFile is the app store's catalog, JSON
	// (SERVICE_APP_CATALOG_FILE); empty: the embedded default.
	AppCatalogFile string
	// RequireReverification makes checkout and managed-proxy financial actions
	// need a recent identity check (SERVICE_REQUIRE_REVERIFICATION).
	RequireReverification bool
	// ProxyAddr is where the managed proxies' forward proxy listens
	// (SERVICE_PROXY_ADDR); empty: the host of Addr, a free port.
	ProxyAddr string
	// RefuseOutOfStock refuses, with 409 out_of_stock, a purchase that cannot
	// be fulfilled immediately instead of accepting it as awaiting provisioning
	// (SERVICE_REFUSE_OUT_OF_STOCK).
	RefuseOutOfStock bool
	// PAYGDeviceLimit is how many devices a pay-as-you-go organisation may
	// hold at once (SERVICE_PAYG_DEVICE_LIMIT).
	PAYGDeviceLimit int

	// SMTPURL is the SMTP server notifications are e-mailed through
	// (SERVICE_SMTP_URL: smtp://[user:password@]host[:port]?from=addr,
	// smtp+starttls://… or smtps://…); empty: notifications reach the
	// console only.
	SMTPURL string

	raw raw
}

// Setting describes one configuration variable, for flags, docs and errors.
// raw holds settings parsed from strings after the flags are read.
type raw struct {
	keyRotationGrace, rateAuth, rateAnon, simDevices, adbDiscover, adbSimDevices string
	copilotSweepInterval                                                         string
	requireReverification, refuseOutOfStock, paygDeviceLimit                     string
	checkpointEvery, checkpointInterval                                          string
	tunnelPingInterval, tunnelPingMisses                                         string
}

// Settings lists every setting: its environment variable, its flag, its
// default and what it means (the CLI's help prints them).
func Settings() []Setting { return (&Config{}).settings() }

// Setting is one setting of the configuration.
type Setting struct {
	Env, Flag, Default, Usage string
	target                    *string
}

func (c *Config) settings() []Setting {
	return []Setting{
		{"SERVICE_ADDR", "addr", "127.0.0.1:8080", "listen address", &c.Addr},
		{"DATABASE_URL", "database-url", "", "PostgreSQL URL; unset runs an embedded cluster under the data directory", &c.DatabaseURL},
		{"SERVICE_MODE", "mode", "local", "deployment mode: local or hosted", &c.Mode},
		{"SERVICE_DATA_DIR", "data-dir", "./.phonefleet", "data directory (embedded database, server keys)", &c.DataDir},
		{"SERVICE_DEV_TOKEN", "dev-token", "", "local mode: exact bearer token required when set", &c.DevToken},
		{"SERVICE_PUBLIC_URL", "public-url", "", "public base URL; default http://<addr>", &c.PublicURL},
		{"SERVICE_LOG_LEVEL", "log-level", "info", "log level: debug, info, warn or error", &c.LogLevel},
		{"SERVICE_DOCS_URL", "docs-url", "", "where the OpenAPI document and contract fingerprints are served; default the public URL", &c.DocsURL},
		{"SERVICE_OAUTH_ISSUER", "oauth-issuer", "", "OAuth authorization server (token iss); hosted: required", &c.OAuthIssuer},
		{"SERVICE_OAUTH_JWKS_URL", "oauth-jwks-url", "", "the authorization server's published keys; hosted: required", &c.OAuthJWKSURL},
		{"SERVICE_OAUTH_ROLE_URL", "oauth-role-url", "", "identity-provider endpoint asked for an OAuth app token's role", &c.OAuthRoleURL},
		{"SERVICE_FIRST_PARTY_OAUTH_CLIENTS", "first-party-oauth-clients", "", "client_id@issuer list (comma separated) treated as the console", &c.FirstPartyOAuthClients},
		{"SERVICE_KEY_ROTATION_GRACE", "key-rotation-grace", "24h", "how long a rotated API key's old secret keeps working", &c.raw.keyRotationGrace},
		{"SERVICE_RATE_LIMIT_AUTHENTICATED", "rate-limit-authenticated", "600", "hosted: requests per minute for a caller that sent Authorization", &c.raw.rateAuth},
		{"SERVICE_RATE_LIMIT_ANONYMOUS", "rate-limit-anonymous", "60", "hosted: requests per minute for a caller that sent no Authorization", &c.raw.rateAnon},
		{"SERVICE_CORS_ORIGINS", "cors-origins", "", "browser origins allowed to call the service (comma separated)", &c.CORSOrigins},
		{"SERVICE_IDENTITY_WEBHOOK_SECRET", "identity-webhook-secret", "", "whsec_ secret the identity provider signs POST /webhooks/identity with; unset: that route answers 404", &c.IdentityWebhookSecret},
		{"SERVICE_RELEASES_FILE", "releases-file", "", "releases manifest (JSON) for GET /gateway/v1/releases/current, validated at start; unset: no releases", &c.ReleasesFile},
		{"SERVICE_NATS_URL", "nats-url", "", "NATS server (nats://host:port, comma separated for several) carrying device calls between instances that share the database; unset: one instance", &c.NATSURL},
		{"SERVICE_NATS_CREDS", "nats-creds", "", "NATS credentials file (user JWT and NKEY seed) to authenticate to the NATS server with", &c.NATSCreds},
		{"SERVICE_NATS_NKEY_SEED", "nats-nkey-seed", "", "file holding the NKEY user seed (SU…) to authenticate to the NATS server with; not with SERVICE_NATS_CREDS", &c.NATSNkeySeed},
		{"SERVICE_NATS_TLS_CA", "nats-tls-ca", "", "CA bundle (PEM) the NATS server's certificate is checked against; set, the connection is TLS", &c.NATSTLSCA},
		{"SERVICE_NATS_TLS_CERT", "nats-tls-cert", "", "this instance's TLS client certificate (PEM) for a NATS server that verifies clients", &c.NATSTLSCert},
		{"SERVICE_NATS_TLS_KEY", "nats-tls-key", "", "the key (PEM) of SERVICE_NATS_TLS_CERT", &c.NATSTLSKey},
		{"SERVICE_SIM_DEVICES", "sim-devices", "3", "local mode: sim phones to start with", &c.raw.simDevices},
		{"SERVICE_ADB_ADDR", "adb-addr", "127.0.0.1:5037", "adb server (host:port) that drives the adb devices", &c.ADBAddr},
		{"SERVICE_ADB_DISCOVER", "adb-discover", "false", "local mode: register every device the adb server reports, and track it going offline and online", &c.raw.adbDiscover},
		{"SERVICE_ADB_SIM_DEVICES", "adb-sim-devices", "0", "local mode: sim phones to serve over adb (device-side adb daemons connected to the adb server), to try the adb backend without a phone", &c.raw.adbSimDevices},
		{"SERVICE_WEBHOOK_CA_FILE", "webhook-ca-file", "", "local mode: extra CA bundle trusted for webhook receivers", &c.WebhookCAFile},
		{"SERVICE_PLANNER_URL", "planner-url", "", "OpenAI-compatible chat-completions base URL for the built-in run agent; unset: scripted planner only", &c.PlannerURL},
		{"SERVICE_PLANNER_API_KEY", "planner-api-key", "", "bearer token for the planner endpoint", &c.PlannerAPIKey},
		{"SERVICE_PLANNER_MODEL", "planner-model", "", "model the planner endpoint is asked for", &c.PlannerModel},
		{"SERVICE_COPILOT_URL", "copilot-url", "", "OpenAI-compatible chat-completions base URL for the copilot; unset: the planner's", &c.CopilotURL},
		{"SERVICE_COPILOT_API_KEY", "copilot-api-key", "", "bearer token for the copilot endpoint; unset with SERVICE_COPILOT_URL: the planner's", &c.CopilotAPIKey},
		{"SERVICE_COPILOT_MODEL", "copilot-model", "", "model the copilot endpoint is asked for; unset with SERVICE_COPILOT_URL: the planner's", &c.CopilotModel},
		{"SERVICE_COPILOT_APPROVE", "copilot-approve", "install,sensitive,payment", "copilot actions that wait for the person's yes: install (an app), sensitive (typing into a password field), payment (anything after a payment screen), comma-separated, or none", &c.CopilotApprove},
		{"SERVICE_COPILOT_SWEEP_INTERVAL", "copilot-sweep-interval", "10s", "how often the copilot's sweep records approvals past their time and ends lost turns (giving back their leases)", &c.raw.copilotSweepInterval},
		{"SERVICE_CONSOLE_CLIENT_ID", "console-client-id", "", "the console's public OAuth client id (hosted: authorization code + PKCE sign-in)", &c.ConsoleClientID},
		{"SERVICE_STRIPE_SECRET_KEY", "stripe-secret-key", "", "payment provider (Stripe) secret API key; unset: checkout answers 503 checkout_unavailable", &c.StripeSecretKey},
		{"SERVICE_STRIPE_API_BASE", "stripe-api-base", "", "payment provider API base URL (stripe-mock in tests and development); unset: Stripe's real API", &c.StripeAPIBase},
		{"SERVICE_STRIPE_WEBHOOK_SECRET", "stripe-webhook-secret", "", "whsec_ secret Stripe signs POST /webhooks/stripe with", &c.StripeWebhookSecret},
		{"SERVICE_CATALOG_FILE", "catalog-file", "", "price list (JSON); unset: the embedded default", &c.CatalogFile},
		{"SERVICE_APP_CATALOG_FILE", "app-catalog-file", "", "app store catalog (JSON: apps, versions, APK location and SHA-256); unset: the embedded default", &c.AppCatalogFile},
		{"SERVICE_REQUIRE_REVERIFICATION", "require-reverification", "false", "checkout and managed-proxy financial actions need an identity check within the last 10 minutes (header x-service-step-up)", &c.raw.requireReverification},
		{"SERVICE_PROXY_ADDR", "proxy-addr", "", "host:port the managed proxies' forward proxy listens on; unset: the host of SERVICE_ADDR, a free port", &c.ProxyAddr},
		{"SERVICE_REFUSE_OUT_OF_STOCK", "refuse-out-of-stock", "false", "refuse with 409 out_of_stock a purchase that cannot be fulfilled now, instead of accepting it as awaiting provisioning", &c.raw.refuseOutOfStock},
		{"SERVICE_SMTP_URL", "smtp-url", "", "SMTP server notifications are e-mailed through: smtp://[user:password@]host[:port]?from=sender@example.com (or smtp+starttls://, smtps://); unset: notifications reach the console only", &c.SMTPURL},
		{"SERVICE_PAYG_DEVICE_LIMIT", "payg-device-limit", "2", "devices a pay-as-you-go organisation may hold at once", &c.raw.paygDeviceLimit},
		{"SERVICE_RECEIPT_CHECKPOINT_EVERY", "receipt-checkpoint-every", "100", "sign an organisation's receipt chain once this many entries were added since its last checkpoint", &c.raw.checkpointEvery},
		{"SERVICE_TUNNEL_PING_INTERVAL", "tunnel-ping-interval", "2s", "gateway tunnels: how often this end pings the gateway (each ping waits as long for its pong)", &c.raw.tunnelPingInterval},
		{"SERVICE_TUNNEL_PING_MISSES", "tunnel-ping-misses", "3", "gateway tunnels: unanswered pings in a row after which a tunnel is dropped and its gateway freed for another instance", &c.raw.tunnelPingMisses},
		{"SERVICE_RECEIPT_CHECKPOINT_INTERVAL", "receipt-checkpoint-interval", "5m", "sign an organisation's receipt chain once this long passed since its last checkpoint, if an entry was added", &c.raw.checkpointInterval},
	}
}

// Load reads the environment (getenv) and then args as flags of fs.
func Load(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	var c Config
	for _, s := range c.settings() {
		def := s.Default
		if v, ok := lookup(getenv, s.Env); ok {
			def = v
		}
		fs.StringVar(s.target, s.Flag, def, s.Usage+" ("+s.Env+")")
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	return c, c.validate()
}

// validateNATS refuses message bus settings that cannot be meant: any of
// them without the bus, two ways to authenticate, half a client
// certificate. Whether the files hold what they should is checked when
// the service connects (cluster.Credentials.Options).
func (c *Config) validateNATS() error {
	set := func(env, v string) string {
		if v != "" {
			return env
		}
		return ""
	}
	for _, name := range []string{set("SERVICE_NATS_CREDS", c.NATSCreds), set("SERVICE_NATS_NKEY_SEED", c.NATSNkeySeed),
		set("SERVICE_NATS_TLS_CA", c.NATSTLSCA), set("SERVICE_NATS_TLS_CERT", c.NATSTLSCert), set("SERVICE_NATS_TLS_KEY", c.NATSTLSKey)} {
		if name != "" && c.NATSURL == "" {
			return fmt.Errorf("invalid %s: set without SERVICE_NATS_URL", name)
		}
	}
	if c.NATSCreds != "" && c.NATSNkeySeed != "" {
		return errors.New("invalid SERVICE_NATS_NKEY_SEED: SERVICE_NATS_CREDS is set too; the NATS server takes one")
	}
	if (c.NATSTLSCert == "") != (c.NATSTLSKey == "") {
		return errors.New("invalid SERVICE_NATS_TLS_CERT, SERVICE_NATS_TLS_KEY: set both or neither")
	}
	return nil
}

func lookup(getenv func(string) string, key string) (string, bool) {
	if getenv == nil {
		return os.LookupEnv(key)
	}
	v := getenv(key)
	return v, v != ""
}

func (c *Config) validate() error {
	switch c.Mode {
	case "local", "hosted":
	default:
		return fmt.Errorf("invalid SERVICE_MODE %q: want local or hosted", c.Mode)
	}
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return fmt.Errorf("invalid SERVICE_ADDR %q: want host:port (%v)", c.Addr, err)
	}
	if c.Mode == "local" && !IsLoopback(host) {
		return fmt.Errorf("invalid SERVICE_ADDR %q: local mode binds loopback only (127.0.0.1, ::1 or localhost); set SERVICE_MODE=hosted to serve a network", c.Addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("invalid SERVICE_ADDR %q: bad port", c.Addr)
	}
	if c.DatabaseURL != "" {
		if _, err := url.Parse(c.DatabaseURL); err != nil || !strings.HasPrefix(c.DatabaseURL, "postgres") {
			return fmt.Errorf("invalid DATABASE_URL: want postgres://… or postgresql://…")
		}
	}
	if c.DataDir == "" {
		return fmt.Errorf("invalid SERVICE_DATA_DIR: empty")
	}
	if c.PublicURL == "" {
		c.PublicURL = "http://" + c.Addr
	}
	if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid SERVICE_PUBLIC_URL %q: want an http(s) URL", c.PublicURL)
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("invalid SERVICE_LOG_LEVEL %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.DocsURL == "" {
		c.DocsURL = c.PublicURL
	}
	c.DocsURL = strings.TrimRight(c.DocsURL, "/")
	if err := c.validateNATS(); err != nil {
		return err
	}
	var err2 error
	if c.KeyRotationGrace, err2 = time.ParseDuration(c.raw.keyRotationGrace); err2 != nil || c.KeyRotationGrace < 0 {
		return fmt.Errorf("invalid SERVICE_KEY_ROTATION_GRACE %q: want a duration such as 24h", c.raw.keyRotationGrace)
	}
	if c.CopilotSweepInterval, err2 = time.ParseDuration(c.raw.copilotSweepInterval); err2 != nil || c.CopilotSweepInterval <= 0 {
		return fmt.Errorf("invalid SERVICE_COPILOT_SWEEP_INTERVAL %q: want a positive duration such as 10s", c.raw.copilotSweepInterval)
	}
	if c.CheckpointInterval, err2 = time.ParseDuration(c.raw.checkpointInterval); err2 != nil || c.CheckpointInterval < time.Second {
		return fmt.Errorf("invalid SERVICE_RECEIPT_CHECKPOINT_INTERVAL %q: want a duration of a second or more, such as 5m", c.raw.checkpointInterval)
	}
	if c.TunnelPingInterval, err2 = time.ParseDuration(c.raw.tunnelPingInterval); err2 != nil || c.TunnelPingInterval < 100*time.Millisecond {
		return fmt.Errorf("invalid SERVICE_TUNNEL_PING_INTERVAL %q: want a duration of 100ms or more, such as 2s", c.raw.tunnelPingInterval)
	}
	for _, n := range []struct {
		env string
		raw string
		dst *int
		min int
	}{
		{"SERVICE_RATE_LIMIT_AUTHENTICATED", c.raw.rateAuth, &c.RateLimitAuthenticated, 1},
		{"SERVICE_RATE_LIMIT_ANONYMOUS", c.raw.rateAnon, &c.RateLimitAnonymous, 1},
		{"SERVICE_SIM_DEVICES", c.raw.simDevices, &c.SimDevices, 0},
		{"SERVICE_ADB_SIM_DEVICES", c.raw.adbSimDevices, &c.ADBSimDevices, 0},
		{"SERVICE_PAYG_DEVICE_LIMIT", c.raw.paygDeviceLimit, &c.PAYGDeviceLimit, 1},
		{"SERVICE_RECEIPT_CHECKPOINT_EVERY", c.raw.checkpointEvery, &c.CheckpointEvery, 1},
		{"SERVICE_TUNNEL_PING_MISSES", c.raw.tunnelPingMisses, &c.TunnelPingMisses, 1},
	} {
		v, err := strconv.Atoi(n.raw)
		if err != nil || v < n.min || v > 1_000_000 {
			return fmt.Errorf("invalid %s %q: want a whole number from %d", n.env, n.raw, n.min)
		}
		*n.dst = v
	}
	if _, _, err := net.SplitHostPort(c.ADBAddr); err != nil {
		return fmt.Errorf("invalid SERVICE_ADB_ADDR %q: want host:port (%v)", c.ADBAddr, err)
	}
	if c.ADBDiscover, err2 = strconv.ParseBool(c.raw.adbDiscover); err2 != nil {
		return fmt.Errorf("invalid SERVICE_ADB_DISCOVER %q: want true or false", c.raw.adbDiscover)
	}
	if c.RequireReverification, err2 = strconv.ParseBool(c.raw.requireReverification); err2 != nil {
		return fmt.Errorf("invalid SERVICE_REQUIRE_REVERIFICATION %q: want true or false", c.raw.requireReverification)
	}
	if c.RefuseOutOfStock, err2 = strconv.ParseBool(c.raw.refuseOutOfStock); err2 != nil {
		return fmt.Errorf("invalid SERVICE_REFUSE_OUT_OF_STOCK %q: want true or false", c.raw.refuseOutOfStock)
	}
	if c.StripeAPIBase != "" {
		if u, err := url.Parse(c.StripeAPIBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("invalid SERVICE_STRIPE_API_BASE %q: want an http(s) URL", c.StripeAPIBase)
		}
		c.StripeAPIBase = strings.TrimRight(c.StripeAPIBase, "/")
	}
	if c.Mode == "hosted" && c.ADBSimDevices > 0 {
		return fmt.Errorf("invalid SERVICE_ADB_SIM_DEVICES %d: sim phones over adb are for local mode only", c.ADBSimDevices)
	}
	if c.Mode == "hosted" && (c.OAuthIssuer == "" || c.OAuthJWKSURL == "") {
		return fmt.Errorf("invalid configuration: hosted mode needs SERVICE_OAUTH_ISSUER and SERVICE_OAUTH_JWKS_URL")
	}
	if c.PlannerURL != "" {
		if u, err := url.Parse(c.PlannerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("invalid SERVICE_PLANNER_URL %q: want an http(s) URL", c.PlannerURL)
		}
		if c.PlannerModel == "" {
			return fmt.Errorf("invalid configuration: SERVICE_PLANNER_URL needs SERVICE_PLANNER_MODEL")
		}
		c.PlannerURL = strings.TrimRight(c.PlannerURL, "/")
	}
	if c.CopilotURL == "" {
		c.CopilotURL, c.CopilotAPIKey, c.CopilotModel = c.PlannerURL, c.PlannerAPIKey, c.PlannerModel
	}
	if c.CopilotURL != "" {
		if u, err := url.Parse(c.CopilotURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("invalid SERVICE_COPILOT_URL %q: want an http(s) URL", c.CopilotURL)
		}
		if c.CopilotModel == "" {
			return fmt.Errorf("invalid configuration: SERVICE_COPILOT_URL needs SERVICE_COPILOT_MODEL")
		}
		c.CopilotURL = strings.TrimRight(c.CopilotURL, "/")
	}
	if _, err := domain.ParseCopilotPolicy(c.CopilotApprove); err != nil {
		return fmt.Errorf("invalid SERVICE_COPILOT_APPROVE: %v", err)
	}
	if c.IdentityWebhookSecret != "" {
		// Standard Webhooks: whsec_ and the base64 of a 24 to 64 byte key.
		rest, ok := strings.CutPrefix(c.IdentityWebhookSecret, "whsec_")
		key, err := base64.StdEncoding.DecodeString(rest)
		if !ok || err != nil || len(key) < 24 || len(key) > 64 {
			return fmt.Errorf("invalid SERVICE_IDENTITY_WEBHOOK_SECRET: want whsec_ followed by the base64 of a 24 to 64 byte key, as the identity provider shows it")
		}
	}
	for _, pair := range splitList(c.FirstPartyOAuthClients) {
		if id, iss, ok := strings.Cut(pair, "@"); !ok || id == "" || iss == "" {
			return fmt.Errorf("invalid SERVICE_FIRST_PARTY_OAUTH_CLIENTS entry %q: want client_id@issuer", pair)
		}
	}
	return nil
}

// splitList splits a comma-separated setting, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// FirstPartyClients returns the client_id@issuer pairs of SERVICE_FIRST_PARTY_OAUTH_CLIENTS.
func (c Config) FirstPartyClients() []string { return splitList(c.FirstPartyOAuthClients) }

// Origins returns the allowed browser origins of SERVICE_CORS_ORIGINS.
func (c Config) Origins() []string { return splitList(c.CORSOrigins) }

// IsLoopback reports whether host is a loopback address or "localhost".
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
