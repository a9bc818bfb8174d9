package contract

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fp is a made-up fingerprint: 64 hex digits from one.
func fp(c string) string { return strings.Repeat(c, 64) }

// recorded is a changelog whose fingerprints were recorded on 2026-11-27
// with surface s, as Generate writes it.
func recorded(t *testing.T, s Surface) Changelog {
	t.Helper()
	g, err := Generate(s, Surface{}, Changelog{Entries: []Entry{
		{Date: "2026-09-25", Kind: KindBaseline, Note: "launch"},
		{Date: "2026-10-05", Kind: KindRemoved, Tool: "install_app", Note: "retired before fingerprints"},
	}}, Registry{}, "2026-11-27")
	if err != nil {
		t.Fatal(err)
	}
	if len(g.New) != 1 || g.New[0].Kind != KindBaseline || g.New[0].Fingerprint != s.Digest() {
		t.Fatalf("got new entries %+v; want one recording baseline holding the surface's digest", g.New)
	}
	return g.Changelog
}

func surface() Surface {
	return Surface{
		Operations: map[string]string{"GET /v1/devices": fp("a"), "POST /v1/leases": fp("b"), "GET /healthz": fp("c")},
		Tools:      map[string]string{"list_devices": fp("d"), "observe": fp("e")},
	}
}

// problems returns the problems of a *CheckError, failing on any other
// error.
func problems(t *testing.T, err error) []string {
	t.Helper()
	var ce *CheckError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v; want a *CheckError", err)
	}
	if !strings.Contains(err.Error(), "make changelog") {
		t.Errorf("got message %q; want it to say how to regenerate", err)
	}
	return ce.Problems
}

func mentions(got []string, want string) bool {
	for _, p := range got {
		if strings.Contains(p, want) {
			return true
		}
	}
	return false
}

// TestCommittedFilesAreConsistent checks the embedded baseline and
// changelog against each other and the production registry (the built
// service is compared in cmd/changelog's TestChangelogIsCurrent).
func TestCommittedFilesAreConsistent(t *testing.T) {
	base := Baseline()
	if len(base.Operations) == 0 || len(base.Tools) == 0 {
		t.Fatalf("got a baseline of %d operations and %d tools; want both recorded", len(base.Operations), len(base.Tools))
	}
	if err := Check(base, base, Current().Changelog, Current().Registry); err != nil {
		t.Fatal(err)
	}
	// What the spec shows of the history (9.8, 9.11) is in it.
	for _, want := range []Entry{
		{Date: "2026-09-25", Kind: KindBaseline},
		{Date: "2026-10-05", Kind: KindRemoved, Tool: "install_app"},
		{Date: "2026-10-05", Kind: KindRemoved, Operation: "GET /v1/phone-number-eligibility"},
		{Date: "2026-10-05", Kind: KindMoved, Operation: "GET /v1/skus"},
	} {
		found := false
		for _, e := range Current().Changelog.Entries {
			found = found || (e.Date == want.Date && e.Kind == want.Kind && e.Tool == want.Tool && e.Operation == want.Operation)
		}
		if !found {
			t.Errorf("the changelog has no %s %s entry for %s", want.Date, want.Kind, want.subject())
		}
	}
}

// TestNothingIsDeprecatedToday: spec 9.5.
func TestNothingIsDeprecatedToday(t *testing.T) {
	reg := Current().Registry
	if len(reg.Deprecations) != 0 || len(reg.Meanings) != 0 {
		t.Fatalf("got production registry %+v; want it empty (spec 9.5: nothing is deprecated)", reg)
	}
	for _, e := range Current().Changelog.Entries {
		if e.Kind == KindDeprecated {
			t.Errorf("got deprecated entry %+v; nothing is deprecated today", e)
		}
	}
	if got := Current().Changelog.ToolSurfaceVersion(); got != "1.0.0" {
		t.Errorf("got tool surface version %s; want 1.0.0 (no tool removed since the fingerprints were recorded)", got)
	}
}

func TestCheck(t *testing.T) {
	base := surface()
	log := recorded(t, base)
	if err := Check(base, base, log, Registry{}); err != nil {
		t.Fatalf("the recorded changelog: %v", err)
	}
	moved := surface()
	moved.Operations["GET /v1/devices"] = fp("f")
	handEdited := surface()
	handEdited.Operations["GET /v1/devices"] = fp("f")
	withoutTool := surface()
	delete(withoutTool.Tools, "observe")
	withTool := surface()
	withTool.Tools["new_tool"] = fp("9")
	dep := Deprecation{Operation: "GET /v1/devices", Since: "2026-12-01", Sunset: "2027-03-01", Note: "use the pool"}
	announced := Changelog{Entries: append(append([]Entry{}, log.Entries...),
		Entry{Date: "2026-12-01", Kind: KindDeprecated, Operation: "GET /v1/devices", Effective: "2027-03-01", Note: "use the pool"})}

	tests := []struct {
		name     string
		built    Surface
		baseline Surface
		log      Changelog
		reg      Registry
		want     string // a problem mentioning this; "" for none
	}{
		{name: "a moved shape without an entry", built: moved, baseline: base, log: log,
			want: "GET /v1/devices moved: its fingerprint went from aaaaaaaaaaaa… to ffffffffffff…, and changelog.json has no entry for it"},
		{name: "a removed tool without an entry", built: withoutTool, baseline: base, log: log, want: "tool observe was removed"},
		{name: "an added tool without an entry", built: withTool, baseline: base, log: log, want: "tool new_tool was added"},
		{name: "a baseline edited by hand to match", built: handEdited, baseline: handEdited, log: log,
			want: "baseline.json does not follow from changelog.json"},
		{name: "a deprecation not announced", built: base, baseline: base, log: log, reg: Registry{Deprecations: []Deprecation{dep}},
			want: "the deprecation of GET /v1/devices (since 2026-12-01, sunset 2027-03-01) is not announced"},
		{name: "a deprecation announced", built: base, baseline: base, log: announced, reg: Registry{Deprecations: []Deprecation{dep}}},
		{name: "an announced deprecation dropped from the registry", built: base, baseline: base, log: announced,
			want: "announces GET /v1/devices as deprecated, but the registry does not list it"},
		{name: "a deprecation of nothing served", built: base, baseline: base, log: log,
			reg:  Registry{Deprecations: []Deprecation{{Tool: "gone", Since: "2026-12-01", Sunset: "2027-01-01", Note: "n"}}},
			want: "deprecates tool gone, which the service does not serve"},
		{name: "a meaning change not announced", built: base, baseline: base, log: log,
			reg:  Registry{Meanings: []Meaning{{Tool: "observe", Since: "2026-12-02", Note: "elements default to interactive"}}},
			want: "the meaning change of tool observe since 2026-12-02 is not announced"},
		{name: "entries out of date order", built: base, baseline: base,
			log:  Changelog{Entries: append(append([]Entry{}, log.Entries...), Entry{Date: "2026-01-01", Kind: KindMeaning, Tool: "observe", Note: "n"})},
			want: "is dated before the entry above it"},
		{name: "no recorded baseline", built: base, baseline: base, log: Changelog{}, want: "has no recorded baseline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.built, tt.baseline, tt.log, tt.reg)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v; want no problem", err)
				}
				return
			}
			if got := problems(t, err); !mentions(got, tt.want) {
				t.Fatalf("got problems %q; want one mentioning %q", got, tt.want)
			}
		})
	}
}

// TestGenerate walks a surface through its life: a moved shape, an added
// tool, a meaning change, a deprecation and the removal after its sunset;
// after each step Check passes on what Generate wrote.
func TestGenerate(t *testing.T) {
	s := surface()
	g := Generated{Changelog: recorded(t, s), Baseline: s.normal()} // a copy: s changes below
	step := func(t *testing.T, built Surface, reg Registry, date string) []Entry {
		t.Helper()
		next, err := Generate(built, g.Baseline, g.Changelog, reg, date)
		if err != nil {
			t.Fatal(err)
		}
		if err := Check(built, next.Baseline, next.Changelog, reg); err != nil {
			t.Fatalf("after Generate: %v", err)
		}
		g = next
		return next.New
	}

	t.Run("a moved shape and an added tool", func(t *testing.T) {
		s.Operations["GET /v1/devices"] = fp("f")
		s.Tools["take_device"] = fp("1")
		got := step(t, s, Registry{}, "2026-12-01")
		want := []Entry{
			{Date: "2026-12-01", Kind: KindMoved, Operation: "GET /v1/devices", Previous: fp("a"), Fingerprint: fp("f"),
				Note: "Its shape changed (parameters, request body, responses, headers or security)."},
			{Date: "2026-12-01", Kind: KindAdded, Tool: "take_device", Fingerprint: fp("1"), Note: "New tool."},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got entries %+v; want %+v", got, want)
		}
	})
	t.Run("nothing changed", func(t *testing.T) {
		if got := step(t, s, Registry{}, "2026-12-02"); len(got) != 0 {
			t.Fatalf("got entries %+v; want none", got)
		}
	})
	meaning := Meaning{Tool: "observe", Since: "2026-12-03", Note: "elements defaults to interactive"}
	dep := Deprecation{Tool: "observe", Since: "2026-12-05", Sunset: "2027-01-05", Replacement: "observe_screen", Note: "split in two"}
	reg := Registry{Deprecations: []Deprecation{dep}, Meanings: []Meaning{meaning}}
	t.Run("a meaning change and a deprecation are announced", func(t *testing.T) {
		got := step(t, s, reg, "2026-12-05")
		want := []Entry{
			{Date: "2026-12-05", Kind: KindDeprecated, Tool: "observe", Effective: "2027-01-05", Replacement: "observe_screen", Note: "split in two"},
			{Date: "2026-12-03", Kind: KindMeaning, Tool: "observe", Note: "elements defaults to interactive"},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got entries %+v; want %+v", got, want)
		}
		if v := g.Changelog.ToolSurfaceVersion(); v != "1.0.0" {
			t.Errorf("got version %s; want 1.0.0 until a tool is removed", v)
		}
	})
	without := Surface{Operations: s.Operations, Tools: map[string]string{"list_devices": fp("d"), "take_device": fp("1")}}
	t.Run("a removal before the sunset is refused", func(t *testing.T) {
		_, err := Generate(without, g.Baseline, g.Changelog, Registry{Meanings: nil}, "2026-12-20")
		if err == nil || !strings.Contains(err.Error(), "before its sunset 2027-01-05") {
			t.Fatalf("got %v; want the removal refused before the sunset", err)
		}
	})
	t.Run("a removal without a deprecation is refused", func(t *testing.T) {
		gone := Surface{Operations: map[string]string{"GET /v1/devices": fp("f"), "GET /healthz": fp("c")}, Tools: s.Tools}
		_, err := Generate(gone, g.Baseline, g.Changelog, reg, "2027-01-06")
		if err == nil || !strings.Contains(err.Error(), "POST /v1/leases is removed on 2027-01-06 without being deprecated first") {
			t.Fatalf("got %v; want the removal refused", err)
		}
	})
	t.Run("a removal after the sunset bumps the tool surface version", func(t *testing.T) {
		got := step(t, without, Registry{}, "2027-01-06")
		if len(got) != 1 || got[0].Kind != KindRemoved || got[0].Tool != "observe" || got[0].Previous != fp("e") {
			t.Fatalf("got entries %+v; want observe removed", got)
		}
		if v := g.Changelog.ToolSurfaceVersion(); v != "2.0.0" {
			t.Errorf("got version %s; want 2.0.0", v)
		}
	})
	t.Run("an operation outside /v1 goes without a deprecation", func(t *testing.T) {
		gone := Surface{Operations: map[string]string{"GET /v1/devices": fp("f"), "POST /v1/leases": fp("b")}, Tools: without.Tools}
		if got := step(t, gone, Registry{}, "2027-01-07"); len(got) != 1 || got[0].Operation != "GET /healthz" {
			t.Fatalf("got entries %+v; want GET /healthz removed", got)
		}
		if v := g.Changelog.ToolSurfaceVersion(); v != "2.0.0" {
			t.Errorf("got version %s; want 2.0.0: only tool removals move it", v)
		}
	})
	t.Run("a date before the last generated entry is refused", func(t *testing.T) {
		if _, err := Generate(s, g.Baseline, g.Changelog, Registry{}, "2026-12-31"); err == nil {
			t.Fatal("got no error; want entries kept in date order")
		}
	})
}

func TestRegistryValidate(t *testing.T) {
	ok := Deprecation{Operation: "GET /v1/devices", Since: "2026-12-01", Sunset: "2027-03-01", Note: "n"}
	tests := []struct {
		name string
		d    Deprecation
		want string
	}{
		{"both named", Deprecation{Operation: "GET /v1/devices", Tool: "observe", Since: ok.Since, Sunset: ok.Sunset, Note: "n"}, "exactly one"},
		{"neither named", Deprecation{Since: ok.Since, Sunset: ok.Sunset, Note: "n"}, "exactly one"},
		{"not METHOD /path", Deprecation{Operation: "/v1/devices", Since: ok.Since, Sunset: ok.Sunset, Note: "n"}, "is not \"METHOD /path\""},
		{"the device surface", Deprecation{Operation: "GET /vrx/{runToken}/v1/run", Since: ok.Since, Sunset: ok.Sunset, Note: "n"}, "device surface"},
		{"a bad date", Deprecation{Operation: ok.Operation, Since: "1 Dec 2026", Sunset: ok.Sunset, Note: "n"}, "is not YYYY-MM-DD"},
		{"a sunset before", Deprecation{Operation: ok.Operation, Since: ok.Sunset, Sunset: ok.Since, Note: "n"}, "is not after"},
		{"no note", Deprecation{Operation: ok.Operation, Since: ok.Since, Sunset: ok.Sunset}, "a note must say why"},
	}
	if err := (Registry{Deprecations: []Deprecation{ok}}).Validate(); err != nil {
		t.Fatalf("got %v for a valid deprecation", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Registry{Deprecations: []Deprecation{tt.d}}.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v; want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// TestDeprecationHeaders checks the header formats: RFC 9745's
// structured-field date and RFC 8594's HTTP-date.
func TestDeprecationHeaders(t *testing.T) {
	d := Deprecation{Operation: "GET /v1/devices", Since: "2026-12-01", Sunset: "2027-03-01", Note: "n", Link: "https://docs.example/deprecations"}
	h := d.Headers()
	want := http.Header{}
	want.Set("Deprecation", "@1796083200")
	want.Set("Sunset", "Mon, 01 Mar 2027 00:00:00 GMT")
	want.Set("Link", `<https://docs.example/deprecations>; rel="deprecation"`)
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("got %v; want %v", h, want)
	}
	if got := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Unix(); got != 1796083200 {
		t.Fatalf("the test's own date: got %d", got)
	}
	d.Link = ""
	if _, ok := d.Headers()["Link"]; ok {
		t.Error("got a Link header for a deprecation without a page")
	}
}

// TestShapeOf: prose goes, names stay, even a property called description.
func TestShapeOf(t *testing.T) {
	var in any
	_ = json.Unmarshal([]byte(`{"type":"object","description":"a thing","title":"T",
		"properties":{"description":{"type":"string","description":"what happened"},"title":{"type":"integer"}},
		"$defs":{"examples":{"type":"array","examples":[[1]]}}}`), &in)
	var want any
	_ = json.Unmarshal([]byte(`{"type":"object",
		"properties":{"description":{"type":"string"},"title":{"type":"integer"}},
		"$defs":{"examples":{"type":"array"}}}`), &want)
	if got := ShapeOf(in); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v; want %v", got, want)
	}
}

func TestPublished(t *testing.T) {
	b, err := Current().Changelog.Published()
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		ToolSurfaceVersion string  `json:"toolSurfaceVersion"`
		Entries            []Entry `json:"entries"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.ToolSurfaceVersion != Current().Changelog.ToolSurfaceVersion() || len(got.Entries) != len(Current().Changelog.Entries) {
		t.Fatalf("got version %s and %d entries; want the changelog's", got.ToolSurfaceVersion, len(got.Entries))
	}
}
