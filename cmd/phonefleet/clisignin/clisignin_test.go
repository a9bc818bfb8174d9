package clisignin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCredentialsPath(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"XDG_CONFIG_HOME", map[string]string{"XDG_CONFIG_HOME": "/x/config", "HOME": "/home/ann"}, "/x/config/phonefleet/credentials.json"},
		{"HOME's .config", map[string]string{"HOME": "/home/ann"}, "/home/ann/.config/phonefleet/credentials.json"},
		// The XDG specification: a relative path is invalid and ignored.
		{"a relative XDG_CONFIG_HOME", map[string]string{"XDG_CONFIG_HOME": "config", "HOME": "/home/ann"}, "/home/ann/.config/phonefleet/credentials.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CredentialsPath(func(k string) string { return tt.env[k] })
			if err != nil || got != tt.want {
				t.Fatalf("got %s %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestSaveAndLoad(t *testing.T) {
	dir := t.TempDir()
	// A directory that exists with a wider mode is narrowed to 0700.
	if err := os.MkdirAll(filepath.Join(dir, "phonefleet"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "phonefleet", "credentials.json")
	want := Credentials{URL: "https://fleet.example.com", Token: "pbk_x_y", KeyID: "key_1"}
	if err := Save(path, want); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: got mode %v (%v); want %v", p, st.Mode().Perm(), err, mode)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "phonefleet", "*.tmp-*")); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
	got, err := Load(path)
	if err != nil || got != want {
		t.Fatalf("Load: got %+v %v; want %+v", got, err, want)
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Errorf("Load of a 0644 file: got %v; want it refused", err)
	}
	if _, err := Load(filepath.Join(dir, "none.json")); !errors.Is(err, ErrNotSignedIn) {
		t.Errorf("Load of no file: got %v; want ErrNotSignedIn", err)
	}
	if err := os.WriteFile(path, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil { // WriteFile keeps an existing file's mode
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "not a phonefleet credentials file") {
		t.Errorf("Load of an empty object: got %v", err)
	}
}
