package contract

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// production is the registry the service runs with. It is empty: nothing is
// deprecated and no meaning has changed under an unchanged shape (spec
// 9.5), so no answer carries Deprecation or Sunset, no operation is marked
// deprecated and no tool has a warning or an @since note. To deprecate
// something, add it here, run `make changelog` (which announces it in the
// changelog) and commit both; see docs/contract-evolution.md.
var production = Registry{
	Deprecations: []Deprecation{},
	Meanings:     []Meaning{},
}

// Registry lists what is on its way out and what changed meaning. Tests
// hand the surfaces a registry of their own (httpapi.Deps.Contract,
// mcp.Deps.Contract).
type Registry struct {
	Deprecations []Deprecation
	Meanings     []Meaning
}

// Deprecation is an operation or a tool on its way out (spec 9.8c): it is
// still served until its sunset, with a warning.
type Deprecation struct {
	// Operation ("METHOD /path", as in the fingerprints file) or Tool
	// names what is deprecated; exactly one is set.
	Operation string
	Tool      string
	// Since is the day it is deprecated (YYYY-MM-DD, from midnight UTC):
	// the Deprecation header's date (RFC 9745) and the changelog entry's.
	Since string
	// Sunset is the day it stops being served (YYYY-MM-DD, from midnight
	// UTC): the Sunset header (RFC 8594) and the entry's effective date. A
	// removal recorded before it fails the check.
	Sunset string
	// Replacement names what to use instead (an operation or a tool);
	// optional.
	Replacement string
	// Note says why and what changes, for people.
	Note string
	// Link, optional, is a page about the deprecation, sent as
	// Link: <…>; rel="deprecation" (RFC 9745 §3).
	Link string
}

// Meaning is a change of what an operation or tool does under an unchanged
// shape (spec 9.8b): announced in the changelog, and on a tool by an
// "@since DATE: note" line in its description.
type Meaning struct {
	// Operation or Tool names what changed; exactly one is set.
	Operation string
	Tool      string
	// Since is the day the new meaning applies (YYYY-MM-DD).
	Since string
	// Note says what it means now.
	Note string
}

func (d Deprecation) subject() subject {
	return Entry{Operation: d.Operation, Tool: d.Tool}.subject()
}

func (m Meaning) subject() subject {
	return Entry{Operation: m.Operation, Tool: m.Tool}.subject()
}

// Validate checks the registry's own form: each item names exactly one
// operation (in "METHOD /path" form, outside the device surface) or tool,
// its dates are dates, a sunset follows its deprecation, and a note says
// why. Whether the names exist is the surfaces' question (each checks its
// own at start-up) and Check's.
func (r Registry) Validate() error {
	var errs []error
	seen := map[subject]bool{}
	for _, d := range r.Deprecations {
		s := d.subject()
		if err := validName(d.Operation, d.Tool); err != nil {
			errs = append(errs, fmt.Errorf("deprecation of %s: %w", s, err))
			continue
		}
		if seen[s] {
			errs = append(errs, fmt.Errorf("%s is deprecated twice", s))
		}
		seen[s] = true
		since, err := day(d.Since)
		if err != nil {
			errs = append(errs, fmt.Errorf("deprecation of %s: since: %w", s, err))
		}
		sunset, err2 := day(d.Sunset)
		if err2 != nil {
			errs = append(errs, fmt.Errorf("deprecation of %s: sunset: %w", s, err2))
		}
		if err == nil && err2 == nil && !sunset.After(since) {
			errs = append(errs, fmt.Errorf("deprecation of %s: sunset %s is not after %s", s, d.Sunset, d.Since))
		}
		if strings.TrimSpace(d.Note) == "" {
			errs = append(errs, fmt.Errorf("deprecation of %s: a note must say why", s))
		}
	}
	for _, m := range r.Meanings {
		s := m.subject()
		if err := validName(m.Operation, m.Tool); err != nil {
			errs = append(errs, fmt.Errorf("meaning change of %s: %w", s, err))
			continue
		}
		if _, err := day(m.Since); err != nil {
			errs = append(errs, fmt.Errorf("meaning change of %s: since: %w", s, err))
		}
		if strings.TrimSpace(m.Note) == "" {
			errs = append(errs, fmt.Errorf("meaning change of %s: a note must say what it means now", s))
		}
	}
	return errors.Join(errs...)
}

func validName(op, tool string) error {
	switch {
	case (op == "") == (tool == ""):
		return errors.New("name exactly one of an operation and a tool")
	case tool != "":
		return nil
	}
	if _, path, ok := splitOperation(op); !ok {
		return fmt.Errorf("operation %q is not \"METHOD /path\"", op)
	} else if strings.HasPrefix(path, "/vrx/") {
		// The device surface is versioned with the run that hands it out,
		// outside the policy of spec 9.8 (which covers /v1 and the tools),
		// and is served by its own router, which the edge's deprecation
		// headers do not reach.
		return fmt.Errorf("operation %q is on the device surface, which is not deprecated operation by operation", op)
	}
	return nil
}

// Operations returns the deprecations of operations, keyed as in the
// fingerprints file.
func (r Registry) Operations() map[string]Deprecation {
	out := map[string]Deprecation{}
	for _, d := range r.Deprecations {
		if d.Operation != "" {
			out[d.Operation] = d
		}
	}
	return out
}

// Tool returns the deprecation of tool name, if it is deprecated.
func (r Registry) Tool(name string) (Deprecation, bool) {
	for _, d := range r.Deprecations {
		if d.Tool == name {
			return d, true
		}
	}
	return Deprecation{}, false
}

// MeaningsOf returns the meaning changes of the operation or tool named,
// in registry order.
func (r Registry) MeaningsOf(operation, tool string) []Meaning {
	var out []Meaning
	for _, m := range r.Meanings {
		if (operation != "" && m.Operation == operation) || (tool != "" && m.Tool == tool) {
			out = append(out, m)
		}
	}
	return out
}

// Headers returns the response headers an operation on its way out
// carries: Deprecation as an RFC 9745 structured-field date (@ and the Unix
// seconds of its day), Sunset as an RFC 8594 HTTP-date, and, when the
// deprecation names a page, a Link to it with rel="deprecation". The
// registry must have passed Validate.
func (d Deprecation) Headers() http.Header {
	since, _ := day(d.Since)
	sunset, _ := day(d.Sunset)
	h := http.Header{}
	h.Set("Deprecation", "@"+strconv.FormatInt(since.Unix(), 10))
	h.Set("Sunset", sunset.UTC().Format(http.TimeFormat))
	if d.Link != "" {
		h.Set("Link", "<"+d.Link+`>; rel="deprecation"`)
	}
	return h
}

// Notice is the sentence that announces the deprecation, in a tool's
// description and result and an operation's description.
func (d Deprecation) Notice() string {
	what := "This operation"
	if d.Tool != "" {
		what = "The tool " + d.Tool
	}
	s := fmt.Sprintf("Deprecated since %s: %s stops being served on %s.", d.Since, what, d.Sunset)
	if d.Replacement != "" {
		s += " Use " + d.Replacement + " instead."
	}
	return s + " " + strings.TrimSpace(d.Note)
}

// SinceLine is the "@since DATE: note" line a tool's description carries
// for a meaning change (spec 9.8b).
func (m Meaning) SinceLine() string {
	return "@since " + m.Since + ": " + strings.TrimSpace(m.Note)
}
