package projections

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// FrameIndex is the frames index: one row per frame ever captured, saying
// which device it shows, when, what screen (hash) and why (an observation,
// or the before or after frame of an action). It consumes frame.captured,
// action.committed and action.failed and emits nothing. The frames'
// bytes live in the command-side table frames, which the retention sweep
// empties; this index keeps the history.
type FrameIndex struct{}

// FrameIndexName is the projection's stable name.
const FrameIndexName = "frame_index"

// Name implements Projection.
func (FrameIndex) Name() string { return FrameIndexName }

// Tables implements Projection.
func (FrameIndex) Tables() []string { return []string{"frame_index"} }

// Setup implements Projection.
func (FrameIndex) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.frame_index (
		frame_id     text PRIMARY KEY,
		org_id       text NOT NULL,
		device_id    text NOT NULL,
		screen_hash  text NOT NULL,
		captured_at  timestamptz NOT NULL,
		source       text NOT NULL,
		action_id    text
	);
	CREATE INDEX ON `+schema+`.frame_index (org_id, device_id, captured_at DESC);`)
	return err
}

// Frame sources in the index.
const (
	FrameFromObservation = "observation"
	FrameBeforeAction    = "action_before"
	FrameAfterAction     = "action_after"
)

var frameEvents = typeSet(nameOf(domain.FrameCaptured{}), nameOf(domain.ActionCommitted{}), nameOf(domain.ActionFailed{}))

// Apply implements Projection. The before frame of an action is often the
// after frame of the previous one (the screen did not change in between);
// it is indexed once, as it was first captured. A batch's frames are
// written in one statement, in the order the events give them (the first
// of a frame's rows is the one kept).
func (FrameIndex) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	var (
		ids, orgs, devices, hashes, sources []string
		at                                  []time.Time
		actions                             []*string
	)
	frame := func(org, device string, f *domain.FrameRef, source, action string) {
		if f == nil {
			return
		}
		ids, orgs, devices, hashes = append(ids, f.FrameID), append(orgs, org), append(devices, device), append(hashes, f.ScreenHash)
		at, sources, actions = append(at, f.CapturedAt), append(sources, source), append(actions, nullString(action))
	}
	flush := func(b *pgx.Batch) {
		if len(ids) > 0 {
			b.Queue(`INSERT INTO `+schema+`.frame_index (frame_id, org_id, device_id, screen_hash, captured_at, source, action_id)
				SELECT f, o, d, h, c, s, a
				FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $7::text[]) WITH ORDINALITY u(f, o, d, h, c, s, a, n)
				ORDER BY n
				ON CONFLICT (frame_id) DO NOTHING`, ids, orgs, devices, hashes, at, sources, actions)
		}
	}
	return applyBatchFlushed(ctx, tx, events, frameEvents, flush, func(_ *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		switch ev := ev.(type) {
		case domain.FrameCaptured:
			frame(e.OrgID, ev.DeviceID, &ev.Frame, FrameFromObservation, "")
		case domain.ActionCommitted:
			frame(e.OrgID, ev.DeviceID, ev.FrameBefore, FrameBeforeAction, ev.ActionID)
			frame(e.OrgID, ev.DeviceID, ev.FrameAfter, FrameAfterAction, ev.ActionID)
		case domain.ActionFailed:
			frame(e.OrgID, ev.DeviceID, ev.FrameBefore, FrameBeforeAction, ev.ActionID)
			frame(e.OrgID, ev.DeviceID, ev.FrameAfter, FrameAfterAction, ev.ActionID)
		}
		return nil
	})
}
