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
// it is indexed once, as it was first captured.
func (FrameIndex) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	t := schema + `.frame_index`
	ins := `INSERT INTO ` + t + ` (frame_id, org_id, device_id, screen_hash, captured_at, source, action_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (frame_id) DO NOTHING`
	frame := func(b *pgx.Batch, org, device string, f *domain.FrameRef, source, action string) {
		if f != nil {
			b.Queue(ins, f.FrameID, org, device, f.ScreenHash, f.CapturedAt, source, nullString(action))
		}
	}
	return applyBatch(ctx, tx, events, frameEvents, func(b *pgx.Batch, e eventstore.Event, ev domain.Event) error {
		switch ev := ev.(type) {
		case domain.FrameCaptured:
			frame(b, e.OrgID, ev.DeviceID, &ev.Frame, FrameFromObservation, "")
		case domain.ActionCommitted:
			frame(b, e.OrgID, ev.DeviceID, ev.FrameBefore, FrameBeforeAction, ev.ActionID)
			frame(b, e.OrgID, ev.DeviceID, ev.FrameAfter, FrameAfterAction, ev.ActionID)
		case domain.ActionFailed:
			frame(b, e.OrgID, ev.DeviceID, ev.FrameBefore, FrameBeforeAction, ev.ActionID)
			frame(b, e.OrgID, ev.DeviceID, ev.FrameAfter, FrameAfterAction, ev.ActionID)
		}
		return nil
	})
}

// IndexedFrame is one row of the frames index.
type IndexedFrame struct {
	FrameID    string
	DeviceID   string
	ScreenHash string
	CapturedAt time.Time
	Source     string
	ActionID   string
}
