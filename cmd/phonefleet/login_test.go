package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/testutil"
)

func TestLoginCommandLine(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	ctx := context.Background()
	for _, args := range [][]string{
		{"login", "-scopes", "devices:everything"},
		{"login", "extra"},
		{"login", "-nope"},
		{"logout", "now"},
	} {
		if err := run(ctx, args, io.Discard); exitCode(err) != 2 {
			t.Errorf("phonefleet %v: got %v (exit %d); want a usage error (exit 2)", args, err, exitCode(err))
		}
	}
	if err := run(ctx, []string{"logout"}, io.Discard); err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "not signed in") {
		t.Errorf("logout without credentials: got %v; want exit 1 saying not signed in", err)
	}

	got, err := parseScopes(" devices:read, runs:start ")
	if err != nil || !slices.Equal(got, []domain.Scope{domain.ScopeDevicesRead, domain.ScopeRunsStart}) {
		t.Errorf("parseScopes: got %v %v", got, err)
	}
	if got, err := parseScopes(""); got != nil || err != nil {
		t.Errorf("parseScopes of nothing: got %v %v; want the service's default (nil)", got, err)
	}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if u := defaultServiceURL(getenv); u != "http://127.0.0.1:8080" {
		t.Errorf("default URL: got %s", u)
	}
	env["PHONEFLEET_URL"] = "https://fleet.example.com"
	if u := defaultServiceURL(getenv); u != "https://fleet.example.com" {
		t.Errorf("default URL with PHONEFLEET_URL: got %s", u)
	}
}

// TestLoginAndLogoutThePrograms runs `phonefleet serve` and then
// `phonefleet login` and `phonefleet logout` as a person would, approving
// the printed code through the console's route as the local operator.
func TestLoginAndLogoutThePrograms(t *testing.T) {
	dir := t.TempDir()
	p := start(t, "DATABASE_URL="+testutil.DatabaseURL(t), "SERVICE_DATA_DIR="+filepath.Join(dir, "data"), "SERVICE_SIM_DEVICES=0")
	base := "http://" + p.addr
	env := []string{"XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}

	login := command(env, "login", "-url", base, "-scopes", "devices:read,devices:lease")
	stdout, err := login.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { login.Process.Kill() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	codeRE := regexp.MustCompile(`approve the code  ([A-Z]{4}-[A-Z]{4})`)
	var code string
	var printed []string
	for code == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("login ended without printing a code:\n%s", strings.Join(printed, "\n"))
			}
			printed = append(printed, l)
			if m := codeRE.FindStringSubmatch(l); m != nil {
				code = m[1]
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("login printed no code within a minute:\n%s", strings.Join(printed, "\n"))
		}
	}
	if !slices.Contains(printed, "    "+base+"/#/cli?code="+code) {
		t.Errorf("login did not print the console page for the code:\n%s", strings.Join(printed, "\n"))
	}

	decode := func(resp *http.Response, err error) map[string]any {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return out
	}
	session := decode(http.Get(base + "/v1/cli-sessions/by-code/" + code))
	id, _ := session["sessionId"].(string)
	approved := decode(http.Post(base+"/v1/cli-sessions/"+id+"/approve", "application/json", strings.NewReader(`{"userCode":"`+code+`"}`)))
	if approved["state"] != "approved" {
		t.Fatalf("approve: got %v", approved)
	}
	for l := range lines {
		printed = append(printed, l)
	}
	if err := login.Wait(); err != nil {
		t.Fatalf("login: %v\n%s", err, strings.Join(printed, "\n"))
	}
	if last := printed[len(printed)-1]; !strings.HasPrefix(last, "Signed in: API key "+approved["keyId"].(string)) {
		t.Errorf("login's last line: got %q", last)
	}

	path := filepath.Join(dir, "config", "phonefleet", "credentials.json")
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credentials: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	raw, _ := os.ReadFile(path)
	var creds struct{ URL, Token, KeyID string }
	if err := json.Unmarshal(raw, &creds); err != nil || creds.URL != base || creds.KeyID != approved["keyId"] {
		t.Fatalf("credentials file: got %s (%v)", raw, err)
	}
	withKey := func() int {
		req, _ := http.NewRequest("GET", base+"/v1/api-keys/current", nil)
		req.Header.Set("Authorization", "Bearer "+creds.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status := withKey(); status != http.StatusOK {
		t.Fatalf("the stored key: got %d; want 200", status)
	}

	out, err := runCmd(t, env, "logout")
	if err != nil || !strings.Contains(out, "Revoked API key "+creds.KeyID) {
		t.Fatalf("logout: %v\n%s", err, out)
	}
	if status := withKey(); status != http.StatusUnauthorized {
		t.Fatalf("the key after logout: got %d; want 401", status)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("credentials after logout: %v; want the file removed", err)
	}
	p.stop(t)
}
