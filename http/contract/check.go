package contract

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Regenerate is what a developer runs to bring the changelog up to date.
const Regenerate = "make changelog (go run ./cmd/changelog)"

// CheckError lists everything the committed baseline and changelog fail to
// account for, and says how to fix it.
type CheckError struct {
	Problems []string
}

func (e *CheckError) Error() string {
	var b strings.Builder
	b.WriteString("the contract changelog does not account for the built service:\n")
	for _, p := range e.Problems {
		b.WriteString("  - ")
		b.WriteString(p)
		b.WriteByte('\n')
	}
	b.WriteString("Run " + Regenerate + ", review the entries it adds to http/contract/" + ChangelogFile +
		" (say in each note what changed for clients), and commit them with http/contract/" + BaselineFile +
		"; see docs/contract-evolution.md.")
	return b.String()
}

// change is one difference between two surfaces.
type change struct {
	subject
	kind                  Kind
	previous, fingerprint string
}

// diff lists what changed from one surface to the other: operations by
// name, then tools by name.
func diff(from, to Surface) []change {
	var out []change
	for _, tool := range []bool{false, true} {
		a, b := from.Operations, to.Operations
		if tool {
			a, b = from.Tools, to.Tools
		}
		var names []string
		for n := range a {
			names = append(names, n)
		}
		for n := range b {
			if _, ok := a[n]; !ok {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		for _, n := range names {
			old, had := a[n]
			now, has := b[n]
			s := subject{tool: tool, name: n}
			switch {
			case !had:
				out = append(out, change{subject: s, kind: KindAdded, fingerprint: now})
			case !has:
				out = append(out, change{subject: s, kind: KindRemoved, previous: old})
			case old != now:
				out = append(out, change{subject: s, kind: KindMoved, previous: old, fingerprint: now})
			}
		}
	}
	return out
}

func (c change) String() string {
	switch c.kind {
	case KindAdded:
		return fmt.Sprintf("%s was added (fingerprint %.12s…)", c.subject, c.fingerprint)
	case KindRemoved:
		return fmt.Sprintf("%s was removed (fingerprint was %.12s…)", c.subject, c.previous)
	}
	return fmt.Sprintf("%s moved: its fingerprint went from %.12s… to %.12s…", c.subject, c.previous, c.fingerprint)
}

// Check reports (as a *CheckError) every way baseline and log fail to
// account for built, the surface of the service as built, and for reg; it
// returns nil when they account for all of it:
//
//   - the entries are well formed and in date order;
//   - baseline follows from the changelog: undoing every generated entry
//     after the recording baseline, newest first, gives the surface whose
//     digest that entry holds (so baseline.json is never edited by hand);
//   - built is baseline: no operation or tool was added, moved or removed
//     without an entry;
//   - every deprecation and meaning change of reg names something built
//     serves and is announced by an entry, and everything the changelog
//     calls deprecated and built still serves is in reg (it keeps its
//     warnings until it is removed);
//   - every removal of a /v1 operation or a tool was deprecated first,
//     with a sunset on or before the removal (spec 9.8c).
func Check(built, baseline Surface, log Changelog, reg Registry) error {
	built, baseline = built.normal(), baseline.normal()
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	recorded := -1
	last := ""
	for i, e := range log.Entries {
		if err := e.wellFormed(); err != nil {
			add("entry %d (%s %s %s): %v", i+1, e.Date, e.Kind, e.subject(), err)
			continue
		}
		if e.Date < last {
			add("entry %d (%s %s %s) is dated before the entry above it; entries are in date order", i+1, e.Date, e.Kind, e.subject())
		}
		last = e.Date
		if e.Kind == KindBaseline && e.Fingerprint != "" {
			recorded = i
		}
	}
	if recorded < 0 {
		add("%s has no recorded baseline (an entry of kind baseline holding the surface's digest)", ChangelogFile)
	} else if err := rollBack(baseline, log.Entries, recorded); err != nil {
		add("%s does not follow from %s (it is written by %s, never by hand): %v", BaselineFile, ChangelogFile, Regenerate, err)
	}

	for _, c := range diff(baseline, built) {
		add("%s, and %s has no entry for it", c, ChangelogFile)
	}

	if err := reg.Validate(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			add("registry: %s", line)
		}
	}
	for _, d := range reg.Deprecations {
		s := d.subject()
		if _, ok := s.in(built); !ok {
			add("the registry deprecates %s, which the service does not serve (once it is removed, delete it from the registry: the changelog keeps its history)", s)
		}
		if e, ok := latestDeprecation(log.Entries, s); !ok || !e.announces(d) {
			add("the deprecation of %s (since %s, sunset %s) is not announced in %s", s, d.Since, d.Sunset, ChangelogFile)
		}
	}
	for _, m := range reg.Meanings {
		s := m.subject()
		if _, ok := s.in(built); !ok {
			add("the registry notes a meaning change of %s, which the service does not serve", s)
		}
		if !slices.ContainsFunc(log.Entries, func(e Entry) bool { return e.announcesMeaning(m) }) {
			add("the meaning change of %s since %s is not announced in %s", s, m.Since, ChangelogFile)
		}
	}
	for _, s := range deprecatedSubjects(log.Entries) {
		if _, served := s.in(built); !served {
			continue
		}
		if !slices.ContainsFunc(reg.Deprecations, func(d Deprecation) bool { return d.subject() == s }) {
			add("%s announces %s as deprecated, but the registry does not list it: it keeps its deprecation warnings until it is removed", ChangelogFile, s)
		}
	}
	for i, e := range log.Entries {
		if e.Kind == KindRemoved && e.shape() {
			if err := removalAllowed(log.Entries[:i], e.subject(), e.Date); err != nil {
				add("entry %d: %v", i+1, err)
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &CheckError{Problems: problems}
}

// wellFormed checks an entry's own form.
func (e Entry) wellFormed() error {
	if _, err := day(e.Date); err != nil {
		return err
	}
	switch e.Kind {
	case KindBaseline:
		if e.Operation != "" || e.Tool != "" {
			return fmt.Errorf("a baseline names no operation or tool")
		}
		return nil
	case KindAdded, KindMoved, KindRemoved, KindMeaning:
	case KindDeprecated:
		eff, err := day(e.Effective)
		if err != nil {
			return fmt.Errorf("a deprecation's effective date (its sunset): %w", err)
		}
		if since, _ := day(e.Date); !eff.After(since) {
			return fmt.Errorf("a deprecation's sunset %s is not after its date", e.Effective)
		}
	default:
		return fmt.Errorf("unknown kind %q", e.Kind)
	}
	if (e.Operation == "") == (e.Tool == "") {
		return fmt.Errorf("name exactly one of an operation and a tool")
	}
	if e.shape() && e.Operation != "" {
		if _, _, ok := splitOperation(e.Operation); !ok {
			return fmt.Errorf("operation %q is not \"METHOD /path\"", e.Operation)
		}
	}
	return nil
}

// rollBack undoes, newest first, every entry of entries after the
// recording baseline at index recorded, starting from baseline, and checks
// that it arrives at the surface whose digest that entry holds.
func rollBack(baseline Surface, entries []Entry, recorded int) error {
	s := baseline.normal()
	for i := len(entries) - 1; i > recorded; i-- {
		e := entries[i]
		switch e.Kind {
		case KindAdded, KindMoved, KindRemoved:
		default:
			continue
		}
		if !e.shape() {
			return fmt.Errorf("entry %d (%s %s %s) carries no fingerprints; entries of shape after the recorded baseline are generated", i+1, e.Date, e.Kind, e.subject())
		}
		sub := e.subject()
		cur, ok := sub.in(s)
		switch e.Kind {
		case KindAdded, KindMoved:
			if !ok || cur != e.Fingerprint {
				return fmt.Errorf("entry %d says %s is now %.12s…, but the baseline has %q", i+1, sub, e.Fingerprint, cur)
			}
		case KindRemoved:
			if ok {
				return fmt.Errorf("entry %d says %s was removed, but the baseline has it", i+1, sub)
			}
		}
		sub.set(s, e.Previous) // "" for an addition: it was absent before
	}
	if got, want := s.Digest(), entries[recorded].Fingerprint; got != want {
		return fmt.Errorf("undoing the entries after the recorded baseline of %s gives a surface with digest %.12s…, not the recorded %.12s…",
			entries[recorded].Date, got, want)
	}
	return nil
}

// latestDeprecation is the newest deprecated entry of s.
func latestDeprecation(entries []Entry, s subject) (Entry, bool) {
	for i := len(entries) - 1; i >= 0; i-- {
		if e := entries[i]; e.Kind == KindDeprecated && e.subject() == s {
			return e, true
		}
	}
	return Entry{}, false
}

// deprecatedSubjects lists what the changelog calls deprecated and has not
// recorded as removed since.
func deprecatedSubjects(entries []Entry) []subject {
	state := map[subject]Kind{}
	var order []subject
	for _, e := range entries {
		if e.Kind != KindDeprecated && e.Kind != KindRemoved && e.Kind != KindAdded {
			continue
		}
		s := e.subject()
		if _, seen := state[s]; !seen {
			order = append(order, s)
		}
		state[s] = e.Kind
	}
	return slices.DeleteFunc(order, func(s subject) bool { return state[s] != KindDeprecated })
}

// announces reports whether entry e announces deprecation d.
func (e Entry) announces(d Deprecation) bool {
	return e.Kind == KindDeprecated && e.subject() == d.subject() && e.Date == d.Since && e.Effective == d.Sunset &&
		e.Replacement == d.Replacement && e.Note == strings.TrimSpace(d.Note)
}

// announcesMeaning reports whether entry e announces meaning change m.
func (e Entry) announcesMeaning(m Meaning) bool {
	return e.Kind == KindMeaning && e.subject() == m.subject() && e.Date == m.Since && e.Note == strings.TrimSpace(m.Note)
}

// underPolicy reports whether removing s is a breaking change of the
// policy of spec 9.8 (the /v1 operations and the tools), which must be
// deprecated first.
func underPolicy(s subject) bool {
	if s.tool {
		return true
	}
	_, path, _ := splitOperation(s.name)
	return path == "/v1" || strings.HasPrefix(path, "/v1/")
}

// removalAllowed checks that removing s on date follows a deprecation in
// earlier whose sunset is on or before date.
func removalAllowed(earlier []Entry, s subject, date string) error {
	if !underPolicy(s) {
		return nil
	}
	e, ok := latestDeprecation(earlier, s)
	if !ok {
		return fmt.Errorf("%s is removed on %s without being deprecated first (spec 9.8c): add it to the registry's deprecations with a sunset, serve it until then, and remove it on or after the sunset", s, date)
	}
	if e.Effective > date {
		return fmt.Errorf("%s is removed on %s, before its sunset %s: it must be served until then (spec 9.8c)", s, date, e.Effective)
	}
	return nil
}

// Generated is the outcome of Generate.
type Generated struct {
	// Changelog is the committed changelog with New added, in date order.
	Changelog Changelog
	// Baseline is the new baseline: the built surface.
	Baseline Surface
	// New lists the entries added.
	New []Entry
}

// Generate brings the changelog and baseline up to date with built and
// reg, dating what it finds date (YYYY-MM-DD): an entry for each
// operation and tool added, moved or removed since baseline, and one for
// each deprecation and meaning change of reg not yet announced (dated by
// the registry). The new baseline is built. A changelog with no recorded
// baseline gets one, holding built's digest, instead of entries for every
// operation.
//
// It refuses (changing nothing) when the committed files are inconsistent,
// when the registry is not valid or names what built does not serve, and
// when a /v1 operation or a tool is removed without having been deprecated
// with a sunset on or before date. What it returns passes Check.
func Generate(built, baseline Surface, log Changelog, reg Registry, date string) (Generated, error) {
	built, baseline = built.normal(), baseline.normal()
	if _, err := day(date); err != nil {
		return Generated{}, err
	}
	if err := reg.Validate(); err != nil {
		return Generated{}, fmt.Errorf("the registry: %w", err)
	}
	recorded := -1
	for i, e := range log.Entries {
		if err := e.wellFormed(); err != nil {
			return Generated{}, fmt.Errorf("%s: entry %d: %w", ChangelogFile, i+1, err)
		}
		if e.Kind == KindBaseline && e.Fingerprint != "" {
			recorded = i
		}
		if (e.shape() || e.Kind == KindBaseline) && e.Date > date {
			return Generated{}, fmt.Errorf("%s: entry %d is dated %s, after %s: entries are generated in date order", ChangelogFile, i+1, e.Date, date)
		}
	}
	var added []Entry
	if recorded < 0 {
		added = append(added, Entry{Date: date, Kind: KindBaseline, Fingerprint: built.Digest(),
			Note: fmt.Sprintf("Fingerprints recorded: %d operations and %d tools (the fingerprints file and the baseline); from here on, every change of shape is an entry of its own.",
				len(built.Operations), len(built.Tools))})
	} else {
		if err := rollBack(baseline, log.Entries, recorded); err != nil {
			return Generated{}, fmt.Errorf("%s does not follow from %s; restore it from version control: %w", BaselineFile, ChangelogFile, err)
		}
		for _, c := range diff(baseline, built) {
			added = append(added, c.entry(date))
		}
	}
	for _, d := range reg.Deprecations {
		if _, ok := d.subject().in(built); !ok {
			return Generated{}, fmt.Errorf("the registry deprecates %s, which the service does not serve", d.subject())
		}
		if e, ok := latestDeprecation(log.Entries, d.subject()); !ok || !e.announces(d) {
			added = append(added, Entry{Date: d.Since, Kind: KindDeprecated, Operation: d.Operation, Tool: d.Tool,
				Note: strings.TrimSpace(d.Note), Effective: d.Sunset, Replacement: d.Replacement})
		}
	}
	for _, m := range reg.Meanings {
		if _, ok := m.subject().in(built); !ok {
			return Generated{}, fmt.Errorf("the registry notes a meaning change of %s, which the service does not serve", m.subject())
		}
		if !slices.ContainsFunc(log.Entries, func(e Entry) bool { return e.announcesMeaning(m) }) {
			added = append(added, Entry{Date: m.Since, Kind: KindMeaning, Operation: m.Operation, Tool: m.Tool, Note: strings.TrimSpace(m.Note)})
		}
	}
	entries := append(slices.Clone(log.Entries), added...)
	// Stable: the generated entries of one day stay after the day's older
	// entries and in the order written (the order Check undoes them in).
	slices.SortStableFunc(entries, func(a, b Entry) int { return cmp.Compare(a.Date, b.Date) })
	for i, e := range entries {
		if e.Kind == KindRemoved && e.shape() {
			if err := removalAllowed(entries[:i], e.subject(), e.Date); err != nil {
				return Generated{}, err
			}
		}
	}
	out := Generated{Changelog: Changelog{Entries: entries}, Baseline: built, New: added}
	if err := Check(built, out.Baseline, out.Changelog, reg); err != nil {
		return Generated{}, err
	}
	return out, nil
}

// entry is the changelog entry recording c on date. Its note says what
// the fingerprints can tell; the developer reviewing it says more.
func (c change) entry(date string) Entry {
	e := Entry{Date: date, Kind: c.kind, Fingerprint: c.fingerprint, Previous: c.previous}
	if c.tool {
		e.Tool = c.name
	} else {
		e.Operation = c.name
	}
	what := "operation"
	if c.tool {
		what = "tool"
	}
	switch c.kind {
	case KindAdded:
		e.Note = "New " + what + "."
	case KindRemoved:
		e.Note = "No longer served."
	default:
		if c.tool {
			e.Note = "Its input or output schema changed."
		} else {
			e.Note = "Its shape changed (parameters, request body, responses, headers or security)."
		}
	}
	return e
}
