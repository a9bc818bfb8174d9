package config

import (
	"flag"
	"io"
	"testing"
)

// FuzzLoad reads arbitrary values of the settings most often written by
// hand: nothing panics, and a configuration taken is one that validates
// again (Load never returns a configuration it would refuse).
func FuzzLoad(f *testing.F) {
	f.Add("local", "127.0.0.1:8080", "", "", "install,payment")
	f.Add("hosted", "[::1]:0", "https://a.example, http://b.example", "cli,console", "none")
	f.Add("x", "8080", "*", ",", "all")
	f.Fuzz(func(t *testing.T, mode, addr, origins, clients, approve string) {
		env := map[string]string{
			"SERVICE_MODE": mode, "SERVICE_ADDR": addr, "SERVICE_CORS_ORIGINS": origins,
			"SERVICE_FIRST_PARTY_OAUTH_CLIENTS": clients, "SERVICE_COPILOT_APPROVE": approve,
		}
		fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c, err := Load(fs, nil, func(k string) string { return env[k] })
		if err != nil {
			return
		}
		if err := c.validate(); err != nil {
			t.Fatalf("%+v taken, then refused: %v", env, err)
		}
		for _, o := range c.Origins() {
			if o == "" {
				t.Fatalf("%q: an empty origin", origins)
			}
		}
	})
}
