// Package contract keeps the history of phonefleet's published contract
// (spec 9.7–9.11): a committed baseline of every operation's fingerprint and
// every tool's, the changelog generated from comparing that baseline with
// the built service, and the registries of what is on its way out
// (deprecations) and of meaning changes under an unchanged shape (@since
// notes).
//
// The HTTP edge serves the changelog beside the fingerprints and marks a
// deprecated operation in its document and its answers' headers; the tool
// surface marks a deprecated tool in its description and its results and
// reports a tool surface version derived from the changelog.
//
// A developer who changes a shape runs `make changelog` (go run
// ./cmd/changelog), reviews the entries it added to changelog.json and
// commits them with baseline.json; until then the check (Check, run by
// cmd/changelog's TestChangelogIsCurrent under `make test`) fails.
// docs/contract-evolution.md describes the workflow.
//
// This package imports neither the HTTP edge nor the tool surface (both
// import it): what the built service looks like is handed to it as a
// Surface.
package contract

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"
)

// Surface is the published shape of the service: each operation's
// fingerprint, keyed "METHOD /path" as in the fingerprints file, and each
// tool's, keyed by tool name.
type Surface struct {
	Operations map[string]string `json:"operations"`
	Tools      map[string]string `json:"tools"`
}

// Digest is one digest over the whole surface, which the changelog's
// recording entry holds (see Check).
func (s Surface) Digest() string {
	return digestJSON(s.normal())
}

// normal returns s with nil maps made empty, so an absent and an empty
// surface digest alike.
func (s Surface) normal() Surface {
	out := Surface{Operations: maps.Clone(s.Operations), Tools: maps.Clone(s.Tools)}
	if out.Operations == nil {
		out.Operations = map[string]string{}
	}
	if out.Tools == nil {
		out.Tools = map[string]string{}
	}
	return out
}

// Kind is what a changelog entry records.
type Kind string

// The kinds of changelog entries.
const (
	// KindBaseline marks a baseline: the launch baseline of the policy
	// (spec 9.8), and the day the fingerprints were first recorded, whose
	// entry holds the digest of the surface recorded then.
	KindBaseline Kind = "baseline"
	// KindAdded: an operation or tool appeared.
	KindAdded Kind = "added"
	// KindMoved: an operation's or tool's shape moved (its fingerprint
	// changed).
	KindMoved Kind = "moved"
	// KindRemoved: an operation or tool is no longer served.
	KindRemoved Kind = "removed"
	// KindDeprecated: an operation or tool is on its way out; Effective is
	// its sunset.
	KindDeprecated Kind = "deprecated"
	// KindMeaning: what an operation or tool does changed under an
	// unchanged shape (spec 9.8b).
	KindMeaning Kind = "meaning"
)

// Entry is one line of the changelog.
type Entry struct {
	// Date is the day of the change, YYYY-MM-DD (UTC).
	Date string `json:"date"`
	Kind Kind   `json:"kind"`
	// Operation ("METHOD /path") or Tool names what changed; a baseline
	// names neither. Entries older than the recorded fingerprints may
	// name a group of paths as the spec does ("/v1/files...").
	Operation string `json:"operation,omitempty"`
	Tool      string `json:"tool,omitempty"`
	// Note says what changed, for people.
	Note string `json:"note"`
	// Effective is when a breaking change takes effect: for a
	// deprecation, its sunset.
	Effective string `json:"effective,omitempty"`
	// Replacement names what to use instead of a deprecated operation or
	// tool.
	Replacement string `json:"replacement,omitempty"`
	// Fingerprint is the new fingerprint of an added or moved operation or
	// tool, and on the recording baseline the digest of the whole surface
	// recorded then.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Previous is the fingerprint before a move or removal.
	Previous string `json:"previous,omitempty"`
}

// subject is the entry's operation or tool as one key of a Surface.
func (e Entry) subject() subject {
	if e.Tool != "" {
		return subject{tool: true, name: e.Tool}
	}
	return subject{name: e.Operation}
}

// shape reports whether e records a generated change of shape: added,
// moved or removed with the fingerprints that prove it.
func (e Entry) shape() bool {
	switch e.Kind {
	case KindAdded:
		return e.Fingerprint != ""
	case KindMoved:
		return e.Fingerprint != "" && e.Previous != ""
	case KindRemoved:
		return e.Previous != ""
	}
	return false
}

// subject is an operation or a tool.
type subject struct {
	tool bool
	name string
}

func (s subject) String() string {
	if s.tool {
		return "tool " + s.name
	}
	return s.name
}

// in returns the subject's fingerprint in surface s.
func (s subject) in(surface Surface) (string, bool) {
	m := surface.Operations
	if s.tool {
		m = surface.Tools
	}
	fp, ok := m[s.name]
	return fp, ok
}

// set puts fp as the subject's fingerprint in s; "" deletes it.
func (s subject) set(surface Surface, fp string) {
	m := surface.Operations
	if s.tool {
		m = surface.Tools
	}
	if fp == "" {
		delete(m, s.name)
		return
	}
	m[s.name] = fp
}

// Changelog is the committed list of entries, oldest first.
type Changelog struct {
	Entries []Entry `json:"entries"`
}

// ToolSurfaceVersion is the version of the tool surface reported in
// serverInfo (spec 9.8c, 9.9), derived from the changelog so that nobody
// edits it: the major number is one more than the number of days on which
// a generated entry removed a tool. Additions keep the version (clients
// ignore what they do not know); removals before the fingerprints were
// recorded (2026-10-05) predate version 1 of this surface and do not count.
func (c Changelog) ToolSurfaceVersion() string {
	days := map[string]bool{}
	for _, e := range c.Entries {
		if e.Kind == KindRemoved && e.Tool != "" && e.shape() {
			days[e.Date] = true
		}
	}
	return fmt.Sprintf("%d.0.0", 1+len(days))
}

// Published is the changelog as served at {docs_url}/api/changelog.json:
// the tool surface version beside the entries.
func (c Changelog) Published() ([]byte, error) {
	entries := c.Entries
	if entries == nil {
		entries = []Entry{}
	}
	return json.Marshal(struct {
		ToolSurfaceVersion string  `json:"toolSurfaceVersion"`
		Entries            []Entry `json:"entries"`
	}{c.ToolSurfaceVersion(), entries})
}

// ParseChangelog decodes a changelog file, refusing unknown members (a
// misspelt member would silently drop what it meant).
func ParseChangelog(b []byte) (Changelog, error) {
	var c Changelog
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Changelog{}, fmt.Errorf("contract: changelog: %w", err)
	}
	return c, nil
}

// ParseBaseline decodes a baseline file.
func ParseBaseline(b []byte) (Surface, error) {
	var s Surface
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Surface{}, fmt.Errorf("contract: baseline: %w", err)
	}
	return s.normal(), nil
}

// MarshalFile renders a baseline or changelog the way it is committed:
// indented, one member a line, ending in a newline, so a change is a
// readable diff.
func MarshalFile(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// The committed files. cmd/changelog writes them; the service embeds them.
var (
	//go:embed baseline.json
	baselineFile []byte
	//go:embed changelog.json
	changelogFile []byte
)

// BaselineFile and ChangelogFile are the committed files' names in this
// package's directory.
const (
	BaselineFile  = "baseline.json"
	ChangelogFile = "changelog.json"
)

// Evolution is what a surface needs to know of the contract's history: the
// changelog it serves (and derives the tool surface version from) and the
// registries of deprecations and meaning changes it marks.
type Evolution struct {
	Changelog Changelog
	Registry  Registry
}

var committed = sync.OnceValues(func() (Evolution, Surface) {
	log, err := ParseChangelog(changelogFile)
	if err != nil {
		panic(err)
	}
	base, err := ParseBaseline(baselineFile)
	if err != nil {
		panic(err)
	}
	return Evolution{Changelog: log, Registry: production}, base
})

// Current is the committed changelog with the production registry: what
// the service serves. It panics if the committed changelog does not parse,
// a defect of the build the package tests catch.
func Current() Evolution {
	ev, _ := committed()
	return ev
}

// Baseline is the committed baseline.
func Baseline() Surface {
	_, base := committed()
	return base.normal()
}

// Prose reports whether member key of an OpenAPI or JSON Schema object
// carries meaning for people only, and so is left out of a fingerprint.
func Prose(key string) bool {
	switch key {
	case "description", "summary", "title", "example", "examples", "externalDocs", "tags", "operationId", "$comment":
		return true
	}
	return false
}

// NameMap reports whether the members of member key are names the contract
// chose (a schema's properties, an OpenAPI media type's encoding, a
// discriminator's mapping) rather than keywords: inside it, a member
// called "description" is a property, part of the shape, not prose.
func NameMap(key string) bool {
	switch key {
	case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependentRequired",
		"encoding", "mapping", "links", "callbacks", "variables", "content", "responses":
		return true
	}
	return false
}

// ShapeOf returns v, a JSON-shaped value, without its prose (see Prose and
// NameMap): what a tool's fingerprint is computed over.
func ShapeOf(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			if Prose(k) {
				continue
			}
			if names, ok := x.(map[string]any); ok && NameMap(k) {
				m := make(map[string]any, len(names))
				for name, y := range names {
					m[name] = ShapeOf(y)
				}
				out[k] = m
				continue
			}
			out[k] = ShapeOf(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = ShapeOf(x)
		}
		return out
	}
	return v
}

// Fingerprint is SHA-256 over the canonical JSON (sorted keys) of v, in
// hex: the digest the fingerprints file publishes.
func Fingerprint(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func digestJSON(v any) string {
	fp, err := Fingerprint(v)
	if err != nil {
		panic(fmt.Sprintf("contract: %v", err)) // maps of strings always marshal
	}
	return fp
}

// dateLayout is the layout of every date in the changelog and registries.
const dateLayout = time.DateOnly

// day parses a YYYY-MM-DD date as its midnight UTC.
func day(s string) (time.Time, error) {
	t, err := time.Parse(dateLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("date %q is not YYYY-MM-DD", s)
	}
	return t, nil
}

// splitOperation splits "METHOD /path".
func splitOperation(op string) (method, path string, ok bool) {
	method, path, ok = strings.Cut(op, " ")
	if !ok || method == "" || method != strings.ToUpper(method) || !strings.HasPrefix(path, "/") {
		return "", "", false
	}
	return method, path, true
}
