package fleet

import (
	"context"
	"encoding/json"
	"fmt"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// ObserveDevice looks at a device's screen now (GET
// /v1/devices/{deviceId}/screenshot and /snapshot).
type ObserveDevice struct {
	Auth     domain.Auth
	DeviceID string
	// Image asks for a screenshot, at most MaxWidth wide when positive.
	Image    bool
	MaxWidth int
	// Format is the picture's encoding: png (the default) or jpeg, at
	// Quality (1–100; 0 means 70). The backend encodes it from the
	// rendered screen.
	Format  string
	Quality int
	// Snapshot asks for the UI element tree.
	Snapshot bool
	// Elements, when not empty, asks for the compact element list
	// (domain.CompactElements): all, interactive or none.
	Elements string
	// Marks makes the picture a set-of-marks image (it implies Image): a
	// box numbered k is drawn at the bounds of Elements[k-1], whose ref is
	// Marks[k-1].Ref. Elements defaults to interactive then; none is
	// refused.
	Marks bool
	// LeaseID, when given, must be the device's lease in force held by the
	// caller; observing does not need a lease.
	LeaseID string
}

// Observation is a device's screen as just captured and stored as a frame.
type Observation struct {
	Frame    domain.FrameRef
	DeviceID string
	Width    int
	Height   int
	ScreenOn bool
	// PNG is the plain full-colour PNG when that is the picture asked for
	// (png, no marks); Image is the picture as asked, of media type
	// ContentType and ImageWidth×ImageHeight pixels.
	PNG         []byte
	Image       []byte
	ContentType string
	ImageWidth  int
	ImageHeight int
	// Snapshot is the UI element tree, when asked for.
	Snapshot json.RawMessage
	// Elements is the compact element list, when asked for; on a
	// set-of-marks picture element i carries box number i+1.
	Elements []domain.Element
	// Marks maps each box of a set-of-marks picture to its element.
	Marks []domain.Mark
}

// check validates the budget and fills its defaults.
func (cmd *ObserveDevice) check() error {
	if cmd.Marks {
		cmd.Image = true
		if cmd.Elements == "" {
			cmd.Elements = domain.ElementsInteractive
		}
	}
	switch {
	case cmd.MaxWidth < 0 || cmd.MaxWidth > domain.MaxObserveWidth:
		return domain.Errorf(domain.CodeInvalidArgument, "maxWidth must be between 1 and %d", domain.MaxObserveWidth)
	case cmd.Format != "" && cmd.Format != domain.ImagePNG && cmd.Format != domain.ImageJPEG:
		return domain.Errorf(domain.CodeInvalidArgument, "format must be png or jpeg")
	case cmd.Quality < 0 || cmd.Quality > 100:
		return domain.Errorf(domain.CodeInvalidArgument, "quality must be between 1 and 100")
	case cmd.Elements != "" && cmd.Elements != domain.ElementsAll && cmd.Elements != domain.ElementsInteractive && cmd.Elements != domain.ElementsNone:
		return domain.Errorf(domain.CodeInvalidArgument, "elements must be all, interactive or none")
	case cmd.Marks && cmd.Elements == domain.ElementsNone:
		return domain.Errorf(domain.CodeInvalidArgument, "marks number the elements; elements=none leaves nothing to mark")
	}
	return nil
}

// wantsTree reports whether the UI tree must be taken.
func (cmd *ObserveDevice) wantsTree() bool {
	return cmd.Snapshot || cmd.Elements == domain.ElementsAll || cmd.Elements == domain.ElementsInteractive
}

// ObserveDeviceHandler handles ObserveDevice.
type ObserveDeviceHandler struct{ f *Fleet }

// ObserveDevice returns the handler of ObserveDevice.
func (f *Fleet) ObserveDevice() ObserveDeviceHandler { return ObserveDeviceHandler{f} }

// Handle captures the screen and stores it as a frame (frame.captured), so
// an action can name it as observedFrame. It needs devices:read. Errors:
// device_unavailable (not_found, offline), backend_resolution_failed,
// backend_not_implemented, capability_unsupported, invalid_argument,
// lease_mismatch, device_disconnected, backend_command_failed.
func (h ObserveDeviceHandler) Handle(ctx context.Context, cmd ObserveDevice) (Observation, error) {
	f := h.f
	if err := cmd.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return Observation{}, err
	}
	if err := cmd.check(); err != nil {
		return Observation{}, err
	}
	d, err := f.visibleDevice(ctx, cmd.Auth, cmd.DeviceID)
	if err != nil {
		return Observation{}, err
	}
	if host, remote, err := f.runtime.Route(ctx, &d); err != nil {
		return Observation{}, err
	} else if remote {
		return forwardDeviceCall[ObserveDevice, Observation](ctx, f, host, OpObserveDevice, d.ID, cmd)
	}
	now := f.now()
	if cmd.LeaseID != "" {
		if _, err := d.CheckLease(now, domain.HolderOf(cmd.Auth), cmd.LeaseID); err != nil {
			return Observation{}, err
		}
	}
	backend, err := f.runtime.Resolve(ctx, &d)
	if err != nil {
		return Observation{}, err
	}
	caps := backend.Capabilities()
	if cmd.Image && !caps.Screenshot || cmd.wantsTree() && !caps.UISnapshot {
		return Observation{}, domain.Errorf(domain.CodeCapabilityUnsupported, "this device cannot be observed that way").
			With("capability", map[bool]string{true: "screenshot", false: "ui_snapshot"}[cmd.Image && !caps.Screenshot])
	}
	// A tree asked for as elements only is read here and, on a backend
	// that redraws trees cheaply, stored by no frame: such a backend may
	// hand it over as a value rather than as JSON to decode again.
	opts := domain.ObserveOptions{Image: cmd.Image, MaxWidth: cmd.MaxWidth, Format: cmd.Format, Quality: cmd.Quality,
		Snapshot: cmd.wantsTree(), Tree: !cmd.Snapshot && caps.CheapSnapshot, Replay: true}
	var elements []domain.Element
	if cmd.Marks {
		// The marks are the compact elements of the very screen pictured,
		// numbered in list order: box k is element k.
		interactiveOnly := cmd.Elements == domain.ElementsInteractive
		opts.Marks = func(root domain.UIElement) []domain.Mark {
			elements = domain.CompactElements(root, interactiveOnly)
			marks := make([]domain.Mark, len(elements))
			for i, e := range elements {
				marks[i] = domain.Mark{N: i + 1, Ref: e.Ref, Bounds: e.Bounds}
			}
			return marks
		}
	}
	obs, err := backend.Observe(ctx, opts)
	if err != nil {
		return Observation{}, err
	}
	out := Observation{DeviceID: d.ID, Width: obs.Width, Height: obs.Height, ScreenOn: obs.ScreenOn,
		PNG: obs.PNG, Image: obs.Image, ContentType: obs.ImageType, ImageWidth: obs.ImageWidth, ImageHeight: obs.ImageHeight,
		Elements: elements, Marks: obs.Marks}
	if cmd.Snapshot {
		out.Snapshot = obs.Snapshot
	}
	if !cmd.Marks && (cmd.Elements == domain.ElementsAll || cmd.Elements == domain.ElementsInteractive) {
		root, ok, err := obs.UITree()
		if err != nil {
			return Observation{}, fmt.Errorf("read UI snapshot: %w", err)
		}
		if ok {
			out.Elements = domain.CompactElements(*root, cmd.Elements == domain.ElementsInteractive)
		}
	}
	if cmd.Elements != "" && cmd.Elements != domain.ElementsNone && out.Elements == nil {
		out.Elements = []domain.Element{}
	}
	// A backend that redraws trees cheaply (the sim) keeps none in its
	// frames, as around an action: a read of the frame's tree (a tap bound
	// to one of its elements) draws it from the replay bytes the row keeps.
	row := f.frameFor(&d, lean(obs, caps.CheapSnapshot), now)
	out.Frame = *row.ref()
	if row.stored {
		// Same screen as the last stored frame: name that one. A backend
		// that cannot redraw its trees (adb, whose frames around an action
		// keep none) keeps the tree just taken if the frame kept none, so
		// that a tap bound to one of its elements is checked against it.
		if len(obs.Snapshot) > 0 && !row.Tree && !caps.CheapSnapshot {
			if _, err := f.pool.Exec(ctx, `UPDATE frames SET snapshot = $2::json WHERE frame_id = $1 AND snapshot IS NULL`,
				row.ID, string(obs.Snapshot)); err != nil {
				return Observation{}, err
			}
			f.runtime.KeptTree(row.StoredFrame)
		}
		return out, nil
	}
	if cmd.MaxWidth > 0 && cmd.MaxWidth < obs.Width {
		row.PNG = nil // only the full-size picture is kept; it can be redrawn
	}
	ev := domain.FrameCaptured{Frame: *row.ref(), DeviceID: d.ID, Reason: observeReason(cmd), RunID: cmd.Auth.RunID}
	news, err := eventstore.Encode(domain.Events, d.OrgID, domain.Event(ev))
	if err != nil {
		return Observation{}, err
	}
	u := (&eventstore.Unit{}).Append("frame-"+row.ID, eventstore.NoStream, news...)
	queueFrame(u, row)
	if _, err := f.store.Commit(ctx, u); err != nil {
		return Observation{}, err
	}
	f.runtime.RememberFrames(row.StoredFrame)
	return out, nil
}

func observeReason(cmd ObserveDevice) string {
	switch {
	case cmd.Image && cmd.wantsTree():
		return "screenshot_and_snapshot"
	case cmd.Image:
		return "screenshot"
	}
	return "snapshot"
}
