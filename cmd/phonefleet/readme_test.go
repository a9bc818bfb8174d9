package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlocks returns the ```sh blocks of the README section whose
// heading is title, in order.
func readmeBlocks(t *testing.T, title string) []string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "\n## "+title+"\n")
	if start < 0 {
		t.Fatalf("README has no section %q", title)
	}
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) == 0 {
		t.Fatalf("README section %q has no sh block", title)
	}
	return blocks
}

// TestREADMEWalkThrough runs the README's first minute as written, in its
// order, with the CLI in between: the service on its embedded database
// (the program `make run` starts), then each command of "Your first
// minute", the phone it drives, the receipts exported and verified, and
// the API key of "Connecting an MCP client". The only changes are the
// address (a free port for 127.0.0.1:8080) and `make run &`, which the
// test replaces by the program it starts. Every command must succeed, the
// answers must be the ones the README shows, the service must stay
// healthy on the same database server throughout, and none is left once
// it stops.
func TestREADMEWalkThrough(t *testing.T) {
	needServerBinaries(t)
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the README's commands need %s (make test installs it: scripts/ensure-walkthrough-tools.sh): %v", tool, err)
		}
	}
	env, dir := embeddedEnv(t)
	env = append(env, "SERVICE_SIM_DEVICES=3") // the README's local mode: three sim phones
	p := start(t, env...)
	svc := newService(t, p)
	pid := serverPID(t, dir)

	// ./bin/phonefleet, as `make build` leaves it, is this program.
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := "#!/bin/sh\nexport PHONEFLEET_E2E_MAIN=1\n"
	for _, kv := range env {
		wrapper += "export " + shellQuote(kv) + "\n"
	}
	wrapper += "exec " + shellQuote(os.Args[0]) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(work, "bin", "phonefleet"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}

	run := func(name, script string) string {
		t.Helper()
		script = strings.NewReplacer("127.0.0.1:8080", p.addr, "localhost:8080", p.addr).Replace(script)
		// As a user's shell runs them: a pipeline's status is its last
		// command's (no pipefail), so `curl … | head -c 300` is fine when
		// head closes the pipe on curl before it has written everything.
		cmd := exec.Command("bash", "-e", "-c", script)
		cmd.Dir = work
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\nscript:\n%s\nstdout:\n%s\nstderr:\n%s", name, err, script, out.String(), stderr.String())
		}
		if got := serverPID(t, dir); got != pid {
			t.Fatalf("after %s: got PostgreSQL pid %d; want the service's server (pid %d) never stopped", name, got, pid)
		}
		svc.mustBeHealthy(t, name)
		return out.String()
	}

	first := readmeBlocks(t, "Your first minute")
	if len(first) != 2 {
		t.Fatalf("got %d sh blocks in \"Your first minute\"; want 2 (the service and its CLI, then a phone)", len(first))
	}
	// Block 1, command by command after `make run &` (running already).
	lines := strings.Split(strings.TrimSpace(first[0]), "\n")
	if !strings.HasPrefix(lines[0], "make run &") {
		t.Fatalf("the first minute starts with %q; want make run &", lines[0])
	}
	var wantRefusal string // the answer the README shows, on the line after the command
	for _, line := range lines {
		if strings.HasPrefix(line, "# {") {
			wantRefusal = strings.TrimPrefix(line, "# ")
		}
	}
	for _, line := range lines[1:] {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out := run(line, line)
		switch {
		case strings.Contains(line, "/healthz"):
			var h struct {
				Status string `json:"status"`
			}
			if err := json.Unmarshal([]byte(out), &h); err != nil || h.Status != "ok" {
				t.Errorf("%s: got %q; want status ok", line, out)
			}
		case strings.Contains(line, "/v1/nothing"):
			if strings.TrimSpace(out) != wantRefusal {
				t.Errorf("%s: got %q; want the README's %q", line, out, wantRefusal)
			}
		case strings.Contains(line, "events tail"):
			if !strings.Contains(out, "organisation.created/") {
				t.Errorf("%s: got %q; want the feed from the organisation's creation", line, out)
			}
		case strings.Contains(line, "projections rebuild"):
			if !strings.Contains(out, "took over") {
				t.Errorf("%s: got %q; want the rebuilt version to take over", line, out)
			}
		case strings.TrimSpace(out) == "":
			t.Errorf("%s: printed nothing", line)
		}
	}

	// Block 2 as one script: it carries its variables from line to line.
	out := run("drive a phone", first[1])
	for _, key := range []string{"demo-1", "demo-2", "demo-3"} {
		status, body := svc.do(t, "GET", "/v1/receipts/"+key, "")
		var rc struct{ State string }
		if status != 200 || json.Unmarshal(body, &rc) != nil || rc.State != "committed" {
			t.Errorf("receipt %s: got %d %s; want committed", key, status, body)
		}
	}
	if png, err := os.ReadFile("/tmp/screen.png"); err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("/tmp/screen.png: got %d bytes, %v; want the phone's PNG", len(png), err)
	}
	// Three actions, each requested then committed: six entries, three
	// receipts, verified offline.
	if !regexp.MustCompile(`OK: 6 entries recording 3 receipts of organisation org_[0-9a-f]{32}; the chain is intact\n`).MatchString(out) {
		t.Errorf("receipts verify printed %q; want the chain of the three actions intact", lastLines(out, 3))
	}
	if !strings.Contains(out, "hello from phonefleet") {
		t.Errorf("the walk-through's answers do not show the typed text: %s", lastLines(out, 20))
	}

	// Connecting an MCP client: the narrowed key for an agent.
	mcp := readmeBlocks(t, "Connecting an MCP client")
	out = run("mint an agent's key", mcp[0])
	var minted struct {
		Token string `json:"token"`
		Key   struct {
			Scopes []string `json:"scopes"`
		} `json:"key"`
	}
	if err := json.Unmarshal([]byte(out), &minted); err != nil || !strings.HasPrefix(minted.Token, "pbk_") || len(minted.Key.Scopes) != 3 {
		t.Errorf("got %q (%v); want the key with its three scopes and its pbk_ token", out, err)
	}

	p.stop(t)
	waitNoServer(t, dir, "the service stopped")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
