package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// frameRow is one frame as stored in table frames: what the runtime
// remembers of it, and its pictures.
type frameRow struct {
	domain.StoredFrame
	PNG      []byte
	Snapshot json.RawMessage
	Replay   []byte
	// stored marks a row that is already in the table (reused as the
	// before frame of a later action).
	stored bool
}

func (r frameRow) ref() *domain.FrameRef {
	return &domain.FrameRef{FrameID: r.ID, ScreenHash: r.ScreenHash, CapturedAt: r.CapturedAt}
}

// frameFor returns the frame showing obs: the device's last stored frame
// when it shows the same screen, else a new one (to be inserted).
func (f *Fleet) frameFor(d *domain.Device, obs domain.Observation, at time.Time) frameRow {
	fr, stored := f.runtime.FrameFor(d, obs, at)
	if stored {
		return frameRow{StoredFrame: fr, stored: true}
	}
	return frameRow{StoredFrame: fr, PNG: obs.PNG, Snapshot: obs.Snapshot, Replay: obs.Replay}
}

const insertFrameColumns = `INSERT INTO frames (frame_id, org_id, device_id, backend, screen_hash, width, height, captured_at, expires_at,
	png, snapshot, replay)`

const insertFrameSQL = insertFrameColumns + ` VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

// queueFrame adds the insert of row to the unit u.
func queueFrame(u *eventstore.Unit, row frameRow) {
	var snap any
	if row.Snapshot != nil {
		snap = string(row.Snapshot)
	}
	u.Exec(insertFrameSQL, row.ID, row.OrgID, row.DeviceID, row.Backend, row.ScreenHash, row.Width, row.Height,
		row.CapturedAt, row.ExpiresAt, row.PNG, snap, row.Replay)
}

// lookupFrame resolves a frame id of the organisation that is still
// readable at now, from the runtime's recent frames or else the table; ok
// is false for a frame that is absent, another organisation's or past
// retention (one answer for the three).
func (f *Fleet) lookupFrame(ctx context.Context, orgID, frameID string, now time.Time) (domain.StoredFrame, bool, error) {
	m, ok := f.runtime.RecentFrame(frameID)
	if !ok {
		err := f.pool.QueryRow(ctx, `SELECT org_id, device_id, screen_hash, expires_at FROM frames WHERE frame_id = $1`, frameID).
			Scan(&m.OrgID, &m.DeviceID, &m.ScreenHash, &m.ExpiresAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return m, false, nil
		}
		if err != nil {
			return m, false, err
		}
	}
	if m.OrgID != orgID || !now.Before(m.ExpiresAt) {
		return domain.StoredFrame{}, false, nil
	}
	return m, true, nil
}

// frameNotFound is the one answer for a frame that is absent, another
// organisation's or past retention.
func frameNotFound(frameID string) error {
	return domain.Errorf(domain.CodeFrameNotFound, "no frame %s is readable", frameID).With("frameId", frameID)
}

// Frame is a stored frame as read back: what a device showed at one
// moment.
type Frame struct {
	FrameID    string    `json:"frameId"`
	DeviceID   string    `json:"deviceId"`
	ScreenHash string    `json:"screenHash"`
	Width      int       `json:"width"`
	Height     int       `json:"height"`
	CapturedAt time.Time `json:"capturedAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	// PNG is the screenshot (when asked for); it is not rendered in JSON
	// except as the base64 image of the JSON forms.
	PNG []byte `json:"-"`
	// Snapshot is the UI element tree (domain.UIElement) as JSON.
	Snapshot json.RawMessage `json:"snapshot,omitempty"`
}

// FrameOptions says which parts of a frame a read wants.
type FrameOptions struct {
	Image    bool
	Snapshot bool
	// MaxWidth, when positive, shrinks the PNG to at most that width.
	MaxWidth int
}

// frame reads a frame (GET /v1/frames/{frameId}); it needs devices:read.
// A frame of another organisation, outside the credential's device subset,
// never stored or past retention answers frame_not_found alike. A sim
// frame whose PNG or snapshot was not drawn when it was captured is drawn
// now, from the phone state it was taken in; a full-size PNG is kept.
func (f *Fleet) frame(ctx context.Context, auth domain.Auth, frameID string, opts FrameOptions) (Frame, error) {
	if err := auth.Require(domain.ScopeDevicesRead); err != nil {
		return Frame{}, err
	}
	return f.readFrame(ctx, auth, frameID, opts)
}

// observedElement returns the element ref as the frame an action was
// decided on shows it, or nil when that frame kept no UI tree (an adb
// frame taken without one): the element is then bound to the screen as a
// whole. A ref the frame does not show is invalid_argument
// (element_not_found). The frame was checked readable by the caller.
func (f *Fleet) observedElement(ctx context.Context, auth domain.Auth, frameID, ref string) (*domain.UIElement, error) {
	fr, err := f.readFrame(ctx, auth, frameID, FrameOptions{Snapshot: true})
	if err != nil || fr.Snapshot == nil {
		return nil, err
	}
	var tree domain.UIElement
	if err := json.Unmarshal(fr.Snapshot, &tree); err != nil {
		return nil, err
	}
	el, ok := tree.Find(ref)
	if !ok {
		return nil, domain.Errorf(domain.CodeInvalidArgument, "observedFrame %s shows no element %s", frameID, ref).
			With("reason", "element_not_found").With("ref", ref)
	}
	return &el, nil
}

// readFrame reads a frame as frame does, for a caller whose scope was
// checked.
func (f *Fleet) readFrame(ctx context.Context, auth domain.Auth, frameID string, opts FrameOptions) (Frame, error) {
	if !domain.HasPrefix(frameID, domain.PrefixFrame) {
		return Frame{}, frameNotFound(frameID)
	}
	var fr Frame
	var backend string
	var png, replay []byte
	var snap *string
	err := f.pool.QueryRow(ctx, `SELECT device_id, backend, screen_hash, width, height, captured_at, expires_at,
			CASE WHEN $3 THEN png END, CASE WHEN $4 THEN snapshot::text END,
			CASE WHEN $6 OR ($3 AND png IS NULL) OR ($4 AND snapshot IS NULL) THEN replay END
		FROM frames WHERE frame_id = $1 AND org_id = $2 AND expires_at > $5`,
		frameID, auth.OrgID, opts.Image && opts.MaxWidth <= 0, opts.Snapshot, f.now(), opts.Image && opts.MaxWidth > 0).
		Scan(&fr.DeviceID, &backend, &fr.ScreenHash, &fr.Width, &fr.Height, &fr.CapturedAt, &fr.ExpiresAt, &png, &snap, &replay)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !auth.CanSeeDevice(fr.DeviceID) {
		return Frame{}, frameNotFound(frameID)
	}
	if err != nil {
		return Frame{}, err
	}
	fr.FrameID, fr.PNG = frameID, png
	if snap != nil {
		fr.Snapshot = json.RawMessage(*snap)
	}
	needImage := opts.Image && (fr.PNG == nil || opts.MaxWidth > 0)
	needSnap := opts.Snapshot && fr.Snapshot == nil
	if !needImage && !needSnap {
		return fr, nil
	}
	r, ok := f.runtime.Renderer(backend)
	if !ok || replay == nil {
		// A backend that cannot redraw stored what it captured: a picture
		// it did not capture does not exist. A UI tree it did not capture
		// (an adb device's frames around an action keep none: a dump costs
		// seconds on a phone) is left out, as a frame needs none.
		if needImage {
			return Frame{}, domain.Errorf(domain.CodeFrameNotFound, "frame %s holds no such picture", frameID).With("frameId", frameID)
		}
		return fr, nil
	}
	obs, err := r.RenderFrame(ctx, replay, domain.ObserveOptions{Image: needImage, MaxWidth: opts.MaxWidth, Snapshot: needSnap})
	if err != nil {
		return Frame{}, err
	}
	if needImage {
		fr.PNG = obs.PNG
	}
	if needSnap && len(obs.Snapshot) > 0 {
		fr.Snapshot = obs.Snapshot
	}
	// Keep a picture drawn at full size, so the next read is a plain read.
	// A tree is not kept: only the sim redraws one, and cheaply (see
	// domain.Capabilities.CheapSnapshot), so writing it to the row would
	// cost the database more than drawing it again costs here.
	if needImage && opts.MaxWidth <= 0 {
		if _, err := f.pool.Exec(ctx, `UPDATE frames SET png = coalesce(png, $2) WHERE frame_id = $1`, frameID, obs.PNG); err != nil {
			return Frame{}, err
		}
	}
	return fr, nil
}
