package releases

import (
	"encoding/json"
	"testing"
)

// FuzzParse reads arbitrary manifests: nothing panics; a manifest taken
// writes back (as JSON) into one that reads the same; and each channel's
// current release is one no other release of the channel is newer than.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"releases":[{"version":"1.2.0","channel":"stable","url":"https://x/y","sha256":"` + sha + `","publishedAt":"2026-01-01T00:00:00Z"},{"version":"1.10.0-rc.1","channel":"stable","url":"http://x/z","sha256":"` + sha + `","publishedAt":"2026-01-02T00:00:00+02:00"}]}`,
		`{"releases":[]}`, `{}`, `{"releases":null}`, `{"releases":[{"version":"01.0.0"}]}`, `{"releases":[],"x":1}`,
	} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, raw []byte, allowHTTP bool) {
		m, err := Parse(raw, allowHTTP)
		if err != nil {
			return
		}
		out, err := json.Marshal(map[string]any{"releases": m.Releases})
		if err != nil {
			t.Fatalf("%q taken but does not encode: %v", raw, err)
		}
		m2, err := Parse(out, allowHTTP)
		if err != nil || len(m2.Releases) != len(m.Releases) {
			t.Fatalf("%q taken, written as %s, refused: %v", raw, out, err)
		}
		for i := range m.Releases {
			a, b := m.Releases[i], m2.Releases[i]
			if a.Version != b.Version || a.Channel != b.Channel || a.URL != b.URL || a.SHA256 != b.SHA256 || !a.PublishedAt.Equal(b.PublishedAt) {
				t.Fatalf("%q: release %d read as %+v, written and read back as %+v", raw, i, a, b)
			}
		}
		for _, r := range m.Releases {
			cur, ok := m.Current(r.Channel)
			if !ok || Newer(r.Version, cur.Version) {
				t.Fatalf("%q: current of %s is %s, but %s is newer", raw, r.Channel, cur.Version, r.Version)
			}
		}
	})
}

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// FuzzNewer: version precedence is a strict order: never both ways, and
// transitive.
func FuzzNewer(f *testing.F) {
	for _, v := range [][3]string{{"1.0.0", "1.0.0-rc.1", "1.0.0-rc.0"}, {"1.0.0-a.1", "1.0.0-a.b", "1.0.0-a"}, {"1.0.0--5", "1.0.0-1", "1.0.0-01"},
		{"2.0.0", "10.0.0", "1.99.99"}, {"1.0.0-99999999999999999999", "1.0.0-5", "1.0.0-A"}} {
		f.Add(v[0], v[1], v[2])
	}
	f.Fuzz(func(t *testing.T, a, b, c string) {
		if Newer(a, b) && Newer(b, a) {
			t.Fatalf("%s and %s are each newer than the other", a, b)
		}
		if Newer(a, b) && Newer(b, c) && !Newer(a, c) {
			t.Fatalf("%s > %s > %s, but not %s > %s", a, b, c, a, c)
		}
		if Newer(a, a) {
			t.Fatalf("%s is newer than itself", a)
		}
	})
}
