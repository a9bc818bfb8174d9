package service

import (
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"phonefleet/internal/config"
	"phonefleet/testutil"
)

// TestGatewayEnrollmentThroughTheService enrolls a gateway through a
// whole local service configured with a releases manifest (an http URL is
// allowed in local mode) and reads its current release with the
// credential; the service's log never holds the code or the credential.
func TestGatewayEnrollmentThroughTheService(t *testing.T) {
	dir := t.TempDir()
	manifest := filepath.Join(dir, "releases.json")
	if err := os.WriteFile(manifest, []byte(`{"releases":[{"version":"9.0.0","channel":"stable","url":"http://127.0.0.1/dl/9.0.0",`+
		`"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","publishedAt":"2026-01-01T00:00:00Z"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	_, base := startAppLogging(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": filepath.Join(dir, "data"),
		"SERVICE_SIM_DEVICES": "0", "SERVICE_RELEASES_FILE": manifest, "SERVICE_LOG_LEVEL": "debug",
	}, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	call := func(method, path, bearer, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return resp.StatusCode, out
	}
	status, code := call("POST", "/v1/gateways/enrollment-codes", "", `{"name":"site"}`)
	if status != http.StatusCreated {
		t.Fatalf("create a code as the local operator: %d %v", status, code)
	}
	status, gw := call("POST", "/gateway/v1/enroll", "", `{"code":"`+code["code"].(string)+`"}`)
	if status != http.StatusCreated {
		t.Fatalf("enroll: %d %v", status, gw)
	}
	cred := gw["credential"].(string)
	if status, rel := call("GET", "/gateway/v1/releases/current", cred, ""); status != http.StatusOK || rel["version"] != "9.0.0" {
		t.Fatalf("current release: %d %v", status, rel)
	}
	if status, list := call("GET", "/v1/gateways", "", ""); status != http.StatusOK || len(list["gateways"].([]any)) != 1 {
		t.Fatalf("list: %d %v", status, list)
	}
	if !strings.Contains(logs.String(), "EnrollGateway") {
		t.Fatal("the service logged no EnrollGateway line at debug level")
	}
	for _, secret := range []string{code["code"].(string), cred} {
		if strings.Contains(logs.String(), secret) || strings.Contains(logs.String(), secret[len(secret)-33:]) {
			t.Errorf("a secret %.8s… is in the service's log", secret)
		}
	}
}

// TestAnInvalidReleasesManifestStopsTheStart checks the manifest is
// validated at start: an invalid one is one error naming the file.
func TestAnInvalidReleasesManifestStopsTheStart(t *testing.T) {
	dir := t.TempDir()
	manifest := filepath.Join(dir, "releases.json")
	if err := os.WriteFile(manifest, []byte(`{"releases":[{"version":"latest","channel":"stable"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(dir, "data"), "SERVICE_SIM_DEVICES": "0", "SERVICE_RELEASES_FILE": manifest}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg, err := config.Load(fs, nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(testutil.Context(t), cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		a.db.Close(testutil.Context(t))
		t.Fatal("the service started with an invalid releases manifest")
	}
	if !strings.Contains(err.Error(), manifest) || !strings.Contains(err.Error(), "latest") {
		t.Fatalf("error %q; want it to name the file and the entry", err)
	}
}
