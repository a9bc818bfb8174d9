package service

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"phonefleet/cmd/phonefleet/clisignin"
	"phonefleet/domain"
	"phonefleet/testutil"
)

// TestCLILoginEndToEnd runs the whole service in local mode and the CLI's
// sign-in against it: login prints a code and the console page; the local
// operator approves the code through the HTTP routes the console page
// calls; login stores the key 0600 in a 0700 directory; the stored key
// works (read-only, as asked); logout revokes it, and its next request is
// 401 revoked_key.
func TestCLILoginEndToEnd(t *testing.T) {
	dir := t.TempDir()
	_, base := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": filepath.Join(dir, "data"),
		"SERVICE_SIM_DEVICES": "1",
	})
	path, err := clisignin.CredentialsPath(func(k string) string {
		return map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "config"), "HOME": dir}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "config", "phonefleet", "credentials.json"); path != want {
		t.Fatalf("got credentials path %s; want %s", path, want)
	}

	call := func(method, path, token, body string, want int) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: got %d %s; want %d", method, path, resp.StatusCode, raw, want)
		}
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return out
	}

	out := &testutil.SyncBuffer{}
	type result struct {
		creds clisignin.Credentials
		err   error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		c, err := clisignin.Login(ctx, clisignin.Options{URL: base, Scopes: []domain.Scope{domain.ScopeDevicesRead}, ClientName: "phonefleet CLI test",
			Host: "e2e-box", Path: path, Out: out, Interval: 50 * time.Millisecond})
		done <- result{c, err}
	}()

	// The person reads the code and the page from the CLI's output.
	shown := regexp.MustCompile(`(?s)(http://\S+/#/cli\?code=([A-Z]{4}-[A-Z]{4})).*approve the code  ([A-Z]{4}-[A-Z]{4})`)
	var m []string
	for deadline := time.Now().Add(30 * time.Second); m == nil; time.Sleep(20 * time.Millisecond) {
		if m = shown.FindStringSubmatch(out.String()); m != nil {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("login ended before printing a code and page: %v\n%s", r.err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("login printed no code and page:\n%s", out)
		}
	}
	page, code := m[1], m[3]
	if m[2] != code || !strings.HasPrefix(page, base+"/#/cli?code=") {
		t.Fatalf("got page %s and code %s; want this service's console page for the code", page, code)
	}

	// The console page's calls, as the local operator.
	session := call("GET", "/v1/cli-sessions/by-code/"+code, "", "", http.StatusOK)
	if session["state"] != "pending" || session["keyName"] != "CLI on e2e-box" || session["clientName"] != "phonefleet CLI test" {
		t.Fatalf("by code: got %v", session)
	}
	id := session["sessionId"].(string)
	approved := call("POST", "/v1/cli-sessions/"+id+"/approve", "", `{"userCode":"`+code+`"}`, http.StatusOK)
	if approved["state"] != "approved" {
		t.Fatalf("approve: got %v", approved)
	}

	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatalf("login did not finish after the approval:\n%s", out)
	}
	if res.err != nil {
		t.Fatalf("login: %v\n%s", res.err, out)
	}
	creds := res.creds
	if creds.URL != base || creds.KeyID != approved["keyId"] || !strings.HasPrefix(creds.Token, "pbk_") {
		t.Fatalf("got credentials %+v; want this service and the approved key", creds)
	}
	if !strings.Contains(out.String(), "Signed in: API key "+creds.KeyID) {
		t.Errorf("login's output does not say it signed in:\n%s", out)
	}

	// The file holds exactly the credentials, readable by the user only.
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	if dst, err := os.Stat(filepath.Dir(path)); err != nil || dst.Mode().Perm() != 0o700 {
		t.Fatalf("credentials directory: %v, mode %v; want 0700", err, dst.Mode().Perm())
	}
	stored, err := clisignin.Load(path)
	if err != nil || stored != creds {
		t.Fatalf("stored: got %+v %v; want %+v", stored, err, creds)
	}

	// The stored key works, with the scope asked for and nothing more.
	current := call("GET", "/v1/api-keys/current", creds.Token, "", http.StatusOK)
	if current["id"] != creds.KeyID || current["name"] != "CLI on e2e-box" {
		t.Fatalf("the key's own record: got %v", current)
	}
	if scopes, _ := current["scopes"].([]any); len(scopes) != 1 || scopes[0] != "devices:read" {
		t.Fatalf("the key's scopes: got %v; want [devices:read]", current["scopes"])
	}
	call("GET", "/v1/devices", creds.Token, "", http.StatusOK)
	call("POST", "/v1/runs", creds.Token, `{"goal":"open settings"}`, http.StatusForbidden)
	// The session is consumed: its id and code are of no further use.
	if again := call("GET", "/v1/cli-sessions/by-code/"+code, "", "", http.StatusOK); again["state"] != "consumed" {
		t.Errorf("by code after the hand-over: got %v; want consumed", again)
	}

	// Logout revokes the key and removes the file.
	logout := &testutil.SyncBuffer{}
	if err := clisignin.Logout(context.Background(), clisignin.LogoutOptions{Path: path, Out: logout}); err != nil {
		t.Fatalf("logout: %v\n%s", err, logout)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the credentials file is still there after logout: %v", err)
	}
	refused := call("GET", "/v1/api-keys/current", creds.Token, "", http.StatusUnauthorized)
	if e, _ := refused["error"].(map[string]any); e["reason"] != "revoked_key" {
		t.Fatalf("the logged-out key: got %v; want 401 revoked_key", refused)
	}
	// A second logout has nothing to do.
	if err := clisignin.Logout(context.Background(), clisignin.LogoutOptions{Path: path, Out: logout}); err == nil || !strings.Contains(err.Error(), "not signed in") {
		t.Errorf("logout without credentials: got %v; want not signed in", err)
	}
}

// TestCLILoginDenied: a code the person denies ends the login with an
// error and stores nothing.
func TestCLILoginDenied(t *testing.T) {
	dir := t.TempDir()
	_, base := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": filepath.Join(dir, "data"),
		"SERVICE_SIM_DEVICES": "0",
	})
	path := filepath.Join(dir, "config", "phonefleet", "credentials.json")
	out := &testutil.SyncBuffer{}
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		_, err := clisignin.Login(ctx, clisignin.Options{URL: base, Host: "e2e-box", Path: path, Out: out, Interval: 50 * time.Millisecond})
		done <- err
	}()
	shown := regexp.MustCompile(`approve the code  ([A-Z]{4}-[A-Z]{4})`)
	var m []string
	for deadline := time.Now().Add(30 * time.Second); m == nil; time.Sleep(20 * time.Millisecond) {
		if m = shown.FindStringSubmatch(out.String()); m == nil && time.Now().After(deadline) {
			t.Fatalf("login printed no code:\n%s", out)
		}
	}
	resp, err := http.Get(base + "/v1/cli-sessions/by-code/" + m[1])
	if err != nil {
		t.Fatal(err)
	}
	var session struct {
		SessionID string `json:"sessionId"`
	}
	json.NewDecoder(resp.Body).Decode(&session)
	resp.Body.Close()
	resp, err = http.Post(base+"/v1/cli-sessions/"+session.SessionID+"/deny", "application/json", strings.NewReader(`{"userCode":"`+m[1]+`"}`))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("deny: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "denied") {
			t.Fatalf("login after a denial: got %v; want an error saying it was denied", err)
		}
	case <-ctx.Done():
		t.Fatal("login did not finish after the denial")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a denied login stored credentials: %v", err)
	}
}
