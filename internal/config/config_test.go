package config

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func load(env map[string]string, args ...string) (Config, error) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return Load(fs, args, func(k string) string { return env[k] })
}

func TestDefaults(t *testing.T) {
	c, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:8080" || c.Mode != "local" || c.DataDir != "./.phonefleet" || c.PublicURL != "http://127.0.0.1:8080" {
		t.Fatalf("got %+v; want the documented defaults", c)
	}
}

func TestIdentityWebhookSecret(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // 24 bytes, as providers show them
	c, err := load(map[string]string{"SERVICE_IDENTITY_WEBHOOK_SECRET": secret})
	if err != nil || c.IdentityWebhookSecret != secret {
		t.Fatalf("got %q (%v); want the secret as given", c.IdentityWebhookSecret, err)
	}
	if c, err := load(nil); err != nil || c.IdentityWebhookSecret != "" {
		t.Fatalf("got %q (%v); want unset by default", c.IdentityWebhookSecret, err)
	}
}

func TestCopilotSweepInterval(t *testing.T) {
	if c, err := load(nil); err != nil || c.CopilotSweepInterval != 10*time.Second {
		t.Fatalf("got %v (%v); want the default 10s", c.CopilotSweepInterval, err)
	}
	c, err := load(map[string]string{"SERVICE_COPILOT_SWEEP_INTERVAL": "90s"}, "-copilot-sweep-interval", "2m")
	if err != nil || c.CopilotSweepInterval != 2*time.Minute {
		t.Fatalf("got %v (%v); want the flag's 2m", c.CopilotSweepInterval, err)
	}
}

func TestNATSSecuritySettings(t *testing.T) {
	c, err := load(map[string]string{"SERVICE_NATS_URL": "tls://nats:4222", "SERVICE_NATS_NKEY_SEED": "/run/secrets/nkey",
		"SERVICE_NATS_TLS_CA": "/ca.pem", "SERVICE_NATS_TLS_CERT": "/c.pem", "SERVICE_NATS_TLS_KEY": "/c.key"}, "-nats-tls-ca", "/other-ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	if c.NATSNkeySeed != "/run/secrets/nkey" || c.NATSTLSCA != "/other-ca.pem" || c.NATSTLSCert != "/c.pem" || c.NATSTLSKey != "/c.key" || c.NATSCreds != "" {
		t.Fatalf("got %q %q %q %q %q; want the files as given, the flag's CA", c.NATSCreds, c.NATSNkeySeed, c.NATSTLSCA, c.NATSTLSCert, c.NATSTLSKey)
	}
}

func TestFlagsOverrideEnvironment(t *testing.T) {
	c, err := load(map[string]string{"SERVICE_ADDR": "127.0.0.1:9000"}, "-addr", "127.0.0.1:9001")
	if err != nil || c.Addr != "127.0.0.1:9001" {
		t.Fatalf("got %q (%v); want the flag's 127.0.0.1:9001", c.Addr, err)
	}
}

func TestInvalidSettingsNameThemselves(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"mode", map[string]string{"SERVICE_MODE": "cloud"}, "SERVICE_MODE"},
		{"local mode on a network address", map[string]string{"SERVICE_ADDR": "0.0.0.0:8080"}, "loopback only"},
		{"address without port", map[string]string{"SERVICE_ADDR": "localhost"}, "SERVICE_ADDR"},
		{"database url", map[string]string{"DATABASE_URL": "mysql://x"}, "DATABASE_URL"},
		{"public url", map[string]string{"SERVICE_PUBLIC_URL": "ftp://x"}, "SERVICE_PUBLIC_URL"},
		{"log level", map[string]string{"SERVICE_LOG_LEVEL": "loud"}, "SERVICE_LOG_LEVEL"},
		{"rotation grace", map[string]string{"SERVICE_KEY_ROTATION_GRACE": "a day"}, "SERVICE_KEY_ROTATION_GRACE"},
		{"copilot sweep interval", map[string]string{"SERVICE_COPILOT_SWEEP_INTERVAL": "often"}, "SERVICE_COPILOT_SWEEP_INTERVAL"},
		{"copilot sweep interval zero", map[string]string{"SERVICE_COPILOT_SWEEP_INTERVAL": "0s"}, "SERVICE_COPILOT_SWEEP_INTERVAL"},
		{"sim devices", map[string]string{"SERVICE_SIM_DEVICES": "-1"}, "SERVICE_SIM_DEVICES"},
		{"rate limit", map[string]string{"SERVICE_RATE_LIMIT_ANONYMOUS": "0"}, "SERVICE_RATE_LIMIT_ANONYMOUS"},
		{"hosted without oauth", map[string]string{"SERVICE_MODE": "hosted"}, "SERVICE_OAUTH_ISSUER"},
		{"first-party clients", map[string]string{"SERVICE_FIRST_PARTY_OAUTH_CLIENTS": "abc"}, "SERVICE_FIRST_PARTY_OAUTH_CLIENTS"},
		{"planner url", map[string]string{"SERVICE_PLANNER_URL": "ftp://x", "SERVICE_PLANNER_MODEL": "m"}, "SERVICE_PLANNER_URL"},
		{"planner without model", map[string]string{"SERVICE_PLANNER_URL": "https://api.example/v1"}, "SERVICE_PLANNER_MODEL"},
		{"identity webhook secret without prefix", map[string]string{"SERVICE_IDENTITY_WEBHOOK_SECRET": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "SERVICE_IDENTITY_WEBHOOK_SECRET"},
		{"identity webhook secret not base64", map[string]string{"SERVICE_IDENTITY_WEBHOOK_SECRET": "whsec_not base64!"}, "SERVICE_IDENTITY_WEBHOOK_SECRET"},
		{"nats credentials without nats", map[string]string{"SERVICE_NATS_CREDS": "/x.creds"}, "SERVICE_NATS_CREDS"},
		{"nats tls ca without nats", map[string]string{"SERVICE_NATS_TLS_CA": "/ca.pem"}, "SERVICE_NATS_TLS_CA"},
		{"nats creds and nkey", map[string]string{"SERVICE_NATS_URL": "nats://h:4222", "SERVICE_NATS_CREDS": "/x.creds", "SERVICE_NATS_NKEY_SEED": "/x.nk"}, "SERVICE_NATS_NKEY_SEED"},
		{"nats client cert without key", map[string]string{"SERVICE_NATS_URL": "nats://h:4222", "SERVICE_NATS_TLS_CERT": "/c.pem"}, "SERVICE_NATS_TLS_KEY"},
		{"identity webhook secret too short", map[string]string{"SERVICE_IDENTITY_WEBHOOK_SECRET": "whsec_c2hvcnQ="}, "SERVICE_IDENTITY_WEBHOOK_SECRET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v; want one line naming %s", err, tc.want)
			}
		})
	}
}

func TestHostedModeMayBindAnyAddress(t *testing.T) {
	if _, err := load(map[string]string{"SERVICE_MODE": "hosted", "SERVICE_ADDR": "0.0.0.0:8080",
		"SERVICE_OAUTH_ISSUER": "https://auth.example", "SERVICE_OAUTH_JWKS_URL": "https://auth.example/jwks"}); err != nil {
		t.Fatal(err)
	}
}
