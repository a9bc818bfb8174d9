// Package config reads phonefleet's settings from environment variables, with
// command-line flags of the same meaning overriding them. An invalid setting
// stops start-up with one line naming it.
package config

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
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
}

// Setting describes one configuration variable, for flags, docs and errors.
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
	}
}

// Settings lists every variable with its flag and default.
func Settings() []Setting { return (&Config{}).settings() }

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
	return nil
}

// IsLoopback reports whether host is a loopback address or "localhost".
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
