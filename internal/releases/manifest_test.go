package releases

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func entry(version, channel, url string) string {
	return `{"version":"` + version + `","channel":"` + channel + `","url":"` + url + `","sha256":"` + sum + `","publishedAt":"2026-01-02T03:04:05Z"}`
}

func TestParseRefusesEveryMalformedEntry(t *testing.T) {
	for name, raw := range map[string]string{
		"no list":        `{}`,
		"unknown field":  `{"releases":[],"extra":1}`,
		"bad version":    `{"releases":[` + entry("1.2", "stable", "https://x.example/a") + `]}`,
		"leading zero":   `{"releases":[` + entry("1.02.0", "stable", "https://x.example/a") + `]}`,
		"bad channel":    `{"releases":[` + entry("1.2.0", "Stable", "https://x.example/a") + `]}`,
		"http in hosted": `{"releases":[` + entry("1.2.0", "stable", "http://x.example/a") + `]}`,
		"bad sha":        `{"releases":[{"version":"1.0.0","channel":"stable","url":"https://x.example/a","sha256":"abc","publishedAt":"2026-01-02T03:04:05Z"}]}`,
		"no publishedAt": `{"releases":[{"version":"1.0.0","channel":"stable","url":"https://x.example/a","sha256":"` + sum + `"}]}`,
		"twice":          `{"releases":[` + entry("1.2.0", "stable", "https://x.example/a") + `,` + entry("1.2.0", "stable", "https://x.example/b") + `]}`,
	} {
		if _, err := Parse([]byte(raw), false); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Parse([]byte(`{"releases":[`+entry("1.2.0", "stable", "http://x.example/a")+`]}`), true); err != nil {
		t.Errorf("http in local mode: %v", err)
	}
}

func TestCurrentIsTheHighestVersionOfTheChannel(t *testing.T) {
	m, err := Parse([]byte(`{"releases":[`+entry("1.10.0", "stable", "https://x.example/110")+`,`+
		entry("1.9.3", "stable", "https://x.example/193")+`,`+entry("2.0.0-rc.1", "stable", "https://x.example/rc")+`,`+
		entry("3.0.0", "beta", "https://x.example/beta")+`]}`), false)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := m.Current("stable")
	if !ok || r.Version != "2.0.0-rc.1" || r.URL != "https://x.example/rc" || r.SHA256 != sum ||
		!r.PublishedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("stable: %+v %v", r, ok)
	}
	if r, ok := m.Current("beta"); !ok || r.Version != "3.0.0" {
		t.Fatalf("beta: %+v %v", r, ok)
	}
	if _, ok := m.Current("nightly"); ok {
		t.Fatal("a channel without releases answered one")
	}
}

func TestNewerFollowsSemverPrecedence(t *testing.T) {
	ordered := []string{"1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.10.0", "2.0.0"}
	for i := 1; i < len(ordered); i++ {
		if !Newer(ordered[i], ordered[i-1]) || Newer(ordered[i-1], ordered[i]) {
			t.Errorf("%s vs %s", ordered[i], ordered[i-1])
		}
	}
	if Newer("junk", "1.0.0") || Newer("1.0.0", "1.0.0") {
		t.Error("malformed or equal counted as newer")
	}
}

func TestFileKeepsTheLastGoodManifestAndRereadsChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "releases.json")
	write := func(s string, mod time.Time) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	write(`{"releases":[`+entry("1.0.0", "stable", "https://x.example/1")+`]}`, base)
	f, err := Load(path, false)
	if err != nil {
		t.Fatal(err)
	}
	write(`{"releases":[`+entry("1.1.0", "stable", "https://x.example/2")+`]}`, base.Add(time.Minute))
	if r, ok, err := f.Current("stable"); err != nil || !ok || r.Version != "1.1.0" {
		t.Fatalf("after a change: %+v %v %v", r, ok, err)
	}
	write(`{"releases":[`, base.Add(2*time.Minute))
	if r, ok, err := f.Current("stable"); err == nil || !ok || r.Version != "1.1.0" {
		t.Fatalf("after a bad change: %+v %v %v", r, ok, err)
	}
	write(`not json`, base)
	if _, err := Load(path, false); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("an invalid manifest loaded: %v", err)
	}
}
