// Package releases reads the releases manifest the operator configures
// (SERVICE_RELEASES_FILE) and answers the current release of a channel
// (GET /gateway/v1/releases/current).
//
// The manifest is JSON:
//
//	{"releases": [{"version": "1.2.0", "channel": "stable",
//	  "url": "https://…", "sha256": "<64 hex>", "publishedAt": "2026-01-01T00:00:00Z"}]}
//
// It is validated whole when loaded: a version that is not semantic
// (MAJOR.MINOR.PATCH with an optional -prerelease), a channel outside
// ^[a-z0-9-]{1,32}$, a URL that is not https (http is allowed in local
// mode), a sha256 that is not 64 hex digits, or one version listed twice
// on a channel is an error naming the entry. The current release of a
// channel is its highest version.
package releases

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Release is one release of phonefleet as the manifest lists it.
type Release struct {
	Version     string    `json:"version"`
	Channel     string    `json:"channel"`
	URL         string    `json:"url"`
	SHA256      string    `json:"sha256"`
	PublishedAt time.Time `json:"publishedAt"`
}

// Manifest is a validated releases manifest.
type Manifest struct {
	Releases []Release
}

var (
	channelRe = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)
	sha256Re  = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidChannel reports whether channel is a well-formed channel name.
func ValidChannel(channel string) bool { return channelRe.MatchString(channel) }

// Parse validates raw as a manifest; allowHTTP admits http:// URLs.
func Parse(raw []byte, allowHTTP bool) (*Manifest, error) {
	var doc struct {
		Releases *[]Release `json:"releases"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("not a releases manifest: %w", err)
	}
	if doc.Releases == nil {
		return nil, errors.New(`not a releases manifest: no "releases" list`)
	}
	seen := map[string]bool{}
	for i, r := range *doc.Releases {
		if _, ok := parseVersion(r.Version); !ok {
			return nil, fmt.Errorf("release %d: version %q is not MAJOR.MINOR.PATCH[-prerelease]", i, r.Version)
		}
		if !ValidChannel(r.Channel) {
			return nil, fmt.Errorf("release %d (%s): channel %q must match ^[a-z0-9-]{1,32}$", i, r.Version, r.Channel)
		}
		u, err := url.Parse(r.URL)
		if err != nil || u.Host == "" || !(u.Scheme == "https" || allowHTTP && u.Scheme == "http") {
			want := "an https URL"
			if allowHTTP {
				want = "an http or https URL"
			}
			return nil, fmt.Errorf("release %d (%s): url %q must be %s", i, r.Version, r.URL, want)
		}
		if !sha256Re.MatchString(r.SHA256) {
			return nil, fmt.Errorf("release %d (%s): sha256 must be 64 lower-case hex digits", i, r.Version)
		}
		if r.PublishedAt.IsZero() {
			return nil, fmt.Errorf("release %d (%s): publishedAt is required", i, r.Version)
		}
		key := r.Channel + " " + r.Version
		if seen[key] {
			return nil, fmt.Errorf("release %d: version %s is listed twice on channel %s", i, r.Version, r.Channel)
		}
		seen[key] = true
	}
	return &Manifest{Releases: *doc.Releases}, nil
}

// Current returns the highest version on channel.
func (m *Manifest) Current(channel string) (Release, bool) {
	var best Release
	var bestV version
	found := false
	for _, r := range m.Releases {
		if r.Channel != channel {
			continue
		}
		v, _ := parseVersion(r.Version)
		if !found || compare(v, bestV) > 0 {
			best, bestV, found = r, v, true
		}
	}
	return best, found
}

// File is a manifest read from a file and read again when the file's
// modification time or size changes. A changed file that does not validate
// is not taken: the manifest last loaded keeps being served and Current
// returns the error alongside it, so a bad edit never empties the channel.
type File struct {
	path      string
	allowHTTP bool

	mu      sync.Mutex
	mod     time.Time
	size    int64
	current *Manifest
}

// Load reads and validates the manifest at path (at start-up: an invalid
// manifest stops the service).
func Load(path string, allowHTTP bool) (*File, error) {
	f := &File{path: path, allowHTTP: allowHTTP}
	if err := f.reload(); err != nil {
		return nil, fmt.Errorf("releases manifest %s: %w", path, err)
	}
	return f, nil
}

func (f *File) reload() error {
	st, err := os.Stat(f.path)
	if err != nil {
		return err
	}
	if f.current != nil && st.ModTime().Equal(f.mod) && st.Size() == f.size {
		return nil
	}
	raw, err := os.ReadFile(f.path)
	if err != nil {
		return err
	}
	m, err := Parse(raw, f.allowHTTP)
	if err != nil {
		return err
	}
	f.current, f.mod, f.size = m, st.ModTime(), st.Size()
	return nil
}

// Current returns the current release of channel from the manifest, read
// again first if the file changed. err reports a changed file that could
// not be taken (the previous manifest answered).
func (f *File) Current(channel string) (r Release, ok bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err = f.reload(); err != nil {
		err = fmt.Errorf("releases manifest %s: %w", f.path, err)
	}
	r, ok = f.current.Current(channel)
	return r, ok, err
}

// version is a parsed semantic version.
type version struct {
	major, minor, patch int
	pre                 []string
}

func parseVersion(s string) (version, bool) {
	core, pre, hasPre := strings.Cut(s, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return version{}, false
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || p == "" || len(p) > 1 && p[0] == '0' || strings.ContainsAny(p, "+-") {
			return version{}, false
		}
		n[i] = v
	}
	v := version{major: n[0], minor: n[1], patch: n[2]}
	if hasPre {
		if pre == "" {
			return version{}, false
		}
		for _, id := range strings.Split(pre, ".") {
			if id == "" || strings.Trim(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-") != "" {
				return version{}, false
			}
		}
		v.pre = strings.Split(pre, ".")
	}
	return v, true
}

// Newer reports whether version a is higher than b (both semantic
// versions; a malformed one is never newer).
func Newer(a, b string) bool {
	va, ok1 := parseVersion(a)
	vb, ok2 := parseVersion(b)
	return ok1 && ok2 && compare(va, vb) > 0
}

// compare orders versions by semantic versioning's precedence.
func compare(a, b version) int {
	for _, d := range [3]int{a.major - b.major, a.minor - b.minor, a.patch - b.patch} {
		if d != 0 {
			if d > 0 {
				return 1
			}
			return -1
		}
	}
	switch {
	case len(a.pre) == 0 && len(b.pre) == 0:
		return 0
	case len(a.pre) == 0:
		return 1
	case len(b.pre) == 0:
		return -1
	}
	for i := 0; i < len(a.pre) && i < len(b.pre); i++ {
		x, y := a.pre[i], b.pre[i]
		xn, xerr := strconv.Atoi(x)
		yn, yerr := strconv.Atoi(y)
		switch {
		case xerr == nil && yerr == nil:
			if xn != yn {
				if xn > yn {
					return 1
				}
				return -1
			}
		case xerr == nil:
			return -1
		case yerr == nil:
			return 1
		case x != y:
			if x > y {
				return 1
			}
			return -1
		}
	}
	switch {
	case len(a.pre) > len(b.pre):
		return 1
	case len(a.pre) < len(b.pre):
		return -1
	}
	return 0
}
