package eventstore

import (
	"context"
	"fmt"
)

// LoadStreams returns the events of every stream in streamIDs in one
// statement, grouped by stream and in version order within each: a read
// of many small streams at one moment, for a decision or an answer that
// needs them all (an organisation's phones) and must not cost a round
// trip each.
func (s *Store) LoadStreams(ctx context.Context, streamIDs []string) (map[string][]Event, error) {
	out := make(map[string][]Event, len(streamIDs))
	if len(streamIDs) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE stream_id = ANY($1) ORDER BY stream_id, stream_version`, streamIDs)
	if err != nil {
		return nil, err
	}
	evs, err := s.collect(rows, 4*len(streamIDs))
	if err != nil {
		return nil, err
	}
	for _, e := range evs {
		out[e.StreamID] = append(out[e.StreamID], e)
	}
	return out, nil
}

// LoadMany returns the current state of each id, and the version it was
// folded to, read in one statement (Store.LoadStreams). An id whose
// stream is empty has the state New(id) at version 0. It bypasses (and
// leaves untouched) the repository's cache.
func (r *Repository[T, E]) LoadMany(ctx context.Context, ids []string) (map[string]T, map[string]int64, error) {
	streams := make([]string, len(ids))
	for i, id := range ids {
		streams[i] = r.agg.Stream(id)
	}
	byStream, err := r.store.LoadStreams(ctx, streams)
	if err != nil {
		return nil, nil, err
	}
	states, versions := make(map[string]T, len(ids)), make(map[string]int64, len(ids))
	for i, id := range ids {
		s := r.agg.New(id)
		var v int64
		for _, ev := range byStream[streams[i]] {
			de, err := r.agg.Codec.Decode(ev.Type, ev.SchemaVersion, ev.Data)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", streams[i], err)
			}
			r.agg.Apply(&s, de, Recorded{Version: ev.StreamVersion, OrgID: ev.OrgID})
			v = ev.StreamVersion
		}
		states[id], versions[id] = s, v
	}
	return states, versions, nil
}
