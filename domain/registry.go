package domain

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Event is a domain event: a plain struct with an explicit, stable name.
// EventName must return a constant (never a reflected type name), because
// renaming a Go type must not orphan recorded history.
type Event interface {
	EventName() string
}

// UpcastFunc turns the JSON of schema version v into that of version v+1.
type UpcastFunc func(data json.RawMessage) (json.RawMessage, error)

// EventDef describes one event type: its current schema version, how to
// decode it, and the upcasters that bring older versions up to date.
type EventDef struct {
	Name      string
	Version   int
	decode    func(json.RawMessage) (Event, error)
	upcasters map[int]UpcastFunc
}

// Def defines event type T at schema version version. upcasters[v] turns
// version v into v+1 and must exist for every v below version.
func Def[T Event](version int, upcasters map[int]UpcastFunc) EventDef {
	var zero T
	return EventDef{
		Name:    zero.EventName(),
		Version: version,
		decode: func(data json.RawMessage) (Event, error) {
			var e T
			if err := json.Unmarshal(data, &e); err != nil {
				return nil, err
			}
			return e, nil
		},
		upcasters: upcasters,
	}
}

// Registry is the closed set of event types the service records.
type Registry struct {
	defs map[string]EventDef
}

// NewRegistry checks and indexes defs: names unique and non-empty, and an
// upcaster for every old version.
func NewRegistry(defs ...EventDef) (*Registry, error) {
	r := &Registry{defs: map[string]EventDef{}}
	for _, d := range defs {
		if d.Name == "" || d.Version < 1 {
			return nil, fmt.Errorf("event definition %q: needs a name and a version ≥ 1", d.Name)
		}
		if _, dup := r.defs[d.Name]; dup {
			return nil, fmt.Errorf("event %q defined twice", d.Name)
		}
		for v := 1; v < d.Version; v++ {
			if d.upcasters[v] == nil {
				return nil, fmt.Errorf("event %q: no upcaster from version %d", d.Name, v)
			}
		}
		r.defs[d.Name] = d
	}
	return r, nil
}

// Names lists the registered event names, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.defs))
	for n := range r.defs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Lookup returns the definition of name.
func (r *Registry) Lookup(name string) (EventDef, bool) {
	d, ok := r.defs[name]
	return d, ok
}

// Encode returns e's name, current schema version and JSON body.
func (r *Registry) Encode(e Event) (string, int, json.RawMessage, error) {
	d, ok := r.defs[e.EventName()]
	if !ok {
		return "", 0, nil, fmt.Errorf("event %q is not registered", e.EventName())
	}
	data, err := json.Marshal(e)
	if err != nil {
		return "", 0, nil, fmt.Errorf("encode %s: %w", d.Name, err)
	}
	return d.Name, d.Version, data, nil
}

// Upcast brings data recorded as (name, version) to the current version.
// Unknown names pass through unchanged so that an older binary can still
// read a feed written by a newer one.
func (r *Registry) Upcast(name string, version int, data json.RawMessage) (int, json.RawMessage, error) {
	d, ok := r.defs[name]
	if !ok {
		return version, data, nil
	}
	if version > d.Version {
		return 0, nil, fmt.Errorf("event %q schema version %d is newer than this binary's %d", name, version, d.Version)
	}
	for v := version; v < d.Version; v++ {
		next, err := d.upcasters[v](data)
		if err != nil {
			return 0, nil, fmt.Errorf("upcast %q from version %d: %w", name, v, err)
		}
		data = next
	}
	return d.Version, data, nil
}

// Decode returns the typed event for (name, version, data), upcasting first.
func (r *Registry) Decode(name string, version int, data json.RawMessage) (Event, error) {
	d, ok := r.defs[name]
	if !ok {
		return nil, fmt.Errorf("event %q is not registered", name)
	}
	_, data, err := r.Upcast(name, version, data)
	if err != nil {
		return nil, err
	}
	return d.decode(data)
}
