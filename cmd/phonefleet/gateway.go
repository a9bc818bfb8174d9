package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/internal/gateway"
	"phonefleet/internal/releases"
)

const gatewayUsage = `usage: phonefleet gateway

Runs a gateway: serves this computer's phones (sim phones, and the
devices of an adb server) to the control plane through an outbound
tunnel. The first start enrolls with a one-time code an organisation
admin created; the credential it gets is kept in the data directory.
SIGINT or SIGTERM closes the tunnel and exits 0; a revoked credential
exits 1. Settings come from the environment only:

  GATEWAY_URL          control plane URLs, comma-separated, tried in turn (required)
  GATEWAY_DATA_DIR     credential and sim states (default ./.phonefleet-gateway)
  GATEWAY_ENROLL_CODE  the one-time enrollment code (needed on the first start only)
  GATEWAY_NAME         the gateway's name (default: the code's)
  GATEWAY_SIM_DEVICES  sim phones to serve (default 1)
  GATEWAY_ADB_ADDR     adb server host:port whose devices to serve (unset: none)
  GATEWAY_CHANNEL      release channel to watch (default stable)
  GATEWAY_SIM_LATENCY  delay before each sim action, a Go duration (default 0)
  GATEWAY_PING_INTERVAL  tunnel heartbeat: how often to ping the control plane (default 2s)
  GATEWAY_PING_MISSES  unanswered pings in a row after which the tunnel is dropped and
                       the gateway reconnects (default 3)
  SERVICE_LOG_LEVEL    debug, info, warn or error (default info)`

// gatewaySettings reads the gateway's settings from the environment, and
// the log level. The enrollment code is read from there only, never from
// the command line, where ps shows it.
func gatewaySettings(getenv func(string) string) (cfg gateway.AgentConfig, logLevel string, err error) {
	for _, u := range strings.Split(getenv("GATEWAY_URL"), ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || p.Host == "" || p.Scheme != "http" && p.Scheme != "https" {
			return cfg, "", fmt.Errorf("invalid GATEWAY_URL entry %q: want http(s)://host[:port]", u)
		}
		cfg.URLs = append(cfg.URLs, u)
	}
	if len(cfg.URLs) == 0 {
		return cfg, "", fmt.Errorf("GATEWAY_URL is required: the control plane's URL (several, comma-separated)")
	}
	cfg.DataDir = envOr(getenv("GATEWAY_DATA_DIR"), "./.phonefleet-gateway")
	cfg.EnrollCode = strings.TrimSpace(getenv("GATEWAY_ENROLL_CODE"))
	cfg.Name = strings.TrimSpace(getenv("GATEWAY_NAME"))
	cfg.SimDevices = 1
	if v := getenv("GATEWAY_SIM_DEVICES"); v != "" {
		if cfg.SimDevices, err = strconv.Atoi(v); err != nil || cfg.SimDevices < 0 {
			return cfg, "", fmt.Errorf("invalid GATEWAY_SIM_DEVICES %q: want a whole number, 0 or more", v)
		}
	}
	if cfg.ADBAddr = getenv("GATEWAY_ADB_ADDR"); cfg.ADBAddr != "" {
		if _, _, err := net.SplitHostPort(cfg.ADBAddr); err != nil {
			return cfg, "", fmt.Errorf("invalid GATEWAY_ADB_ADDR %q: want host:port", cfg.ADBAddr)
		}
	}
	if cfg.Channel = envOr(getenv("GATEWAY_CHANNEL"), "stable"); !releases.ValidChannel(cfg.Channel) {
		return cfg, "", fmt.Errorf("invalid GATEWAY_CHANNEL %q: want ^[a-z0-9-]{1,32}$", cfg.Channel)
	}
	if v := getenv("GATEWAY_SIM_LATENCY"); v != "" {
		if cfg.SimLatency, err = time.ParseDuration(v); err != nil || cfg.SimLatency < 0 {
			return cfg, "", fmt.Errorf("invalid GATEWAY_SIM_LATENCY %q: want a duration such as 2s", v)
		}
	}
	if v := getenv("GATEWAY_PING_INTERVAL"); v != "" {
		if cfg.PingInterval, err = time.ParseDuration(v); err != nil || cfg.PingInterval < 100*time.Millisecond {
			return cfg, "", fmt.Errorf("invalid GATEWAY_PING_INTERVAL %q: want a duration of 100ms or more, such as 2s", v)
		}
	}
	if v := getenv("GATEWAY_PING_MISSES"); v != "" {
		if cfg.MissedPings, err = strconv.Atoi(v); err != nil || cfg.MissedPings < 1 || cfg.MissedPings > 1000 {
			return cfg, "", fmt.Errorf("invalid GATEWAY_PING_MISSES %q: want a whole number from 1", v)
		}
	}
	switch logLevel = envOr(getenv("SERVICE_LOG_LEVEL"), "info"); logLevel {
	case "debug", "info", "warn", "error":
	default:
		return cfg, "", fmt.Errorf("invalid SERVICE_LOG_LEVEL %q: want debug, info, warn or error", logLevel)
	}
	return cfg, logLevel, nil
}

func envOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// gatewayCmd runs `phonefleet gateway`.
func gatewayCmd(ctx context.Context, c cliCommand, args []string, _ io.Writer) error {
	if len(args) > 0 {
		return usageError{c.help}
	}
	cfg, level, err := gatewaySettings(os.Getenv)
	if err != nil {
		return err
	}
	logger := newLogger(level)
	slog.SetDefault(logger)
	cfg.Logger = logger
	cfg.Version = service.Version
	cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	logger.Info("phonefleet gateway starting", "version", service.Version, "urls", cfg.URLs, "dataDir", cfg.DataDir,
		"simDevices", cfg.SimDevices, "adb", cfg.ADBAddr, "channel", cfg.Channel)
	return gateway.RunAgent(ctx, cfg)
}
