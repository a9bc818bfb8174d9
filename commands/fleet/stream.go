package fleet

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"sync"
	"time"

	"phonefleet/domain"
	"phonefleet/internal/screenjpeg"
)

// Live screens (GET /v1/devices/{deviceId}/stream): a device's screen as a
// sequence of JPEG frames. Viewers of one device at one size and quality
// share one feed, and a feed encodes only when the screen changed: each
// viewer's turn first asks the backend for its screen hash (cheap: a sim
// phone lays its screen out, it does not paint it) and reuses the last
// encoded frame when the hash is the same, so a still screen costs no
// encoding however many watch it; a changed screen is encoded in the
// background while viewers are still sent the last picture, so encoding
// never delays a turn. A viewer is paced by its own frame rate and is sent
// the newest picture at each turn, changed or not, so a client (a browser
// <img> showing multipart/x-mixed-replace) keeps a steady rate.
//
// Observing never goes through the device's action queue: it takes the
// phone's own lock only while one frame is laid out and painted, so actions
// are never starved by viewers, and a screen changed by an action shows at
// the next turn.

// Bounds of a stream's parameters.
const (
	DefaultStreamFPS     = 15
	MaxStreamFPS         = 30
	DefaultStreamWidth   = 540
	MinStreamWidth       = 64
	DefaultStreamQuality = 70
)

// OpenStream opens a live view of a device's screen.
type OpenStream struct {
	Auth     domain.Auth
	DeviceID string
	// FPS is frames per second, 1 to MaxStreamFPS; 0 means
	// DefaultStreamFPS.
	FPS int
	// MaxWidth bounds the frame's width (aspect kept), at least
	// MinStreamWidth; 0 means DefaultStreamWidth; at or above the screen's
	// width means full size.
	MaxWidth int
	// Quality is the JPEG quality, 1 to 100; 0 means DefaultStreamQuality.
	Quality int
}

// StreamFrame is one JPEG frame of a stream.
type StreamFrame struct {
	JPEG []byte
	// Seq numbers the distinct pictures of the feed: a frame sent again
	// because the screen did not change keeps its number.
	Seq    uint64
	Width  int
	Height int
}

// ScreenSource is a device's live screen: a cheap hash of what is on
// screen, and the screen painted no wider than maxWidth with the hash it
// shows. A backend offering domain.LiveScreen (a sim phone) is its own;
// any other is watched through its screenshots.
type ScreenSource = domain.LiveScreen

// Streams is the live screen capability over a fleet: the feeds being
// watched now, one per device, size and quality.
type Streams struct {
	f *Fleet

	mu    sync.Mutex
	feeds map[feedKey]*screenFeed
}

// NewStreams returns the live screens of f's devices.
func NewStreams(f *Fleet) *Streams {
	return &Streams{f: f, feeds: map[feedKey]*screenFeed{}}
}

type feedKey struct {
	deviceID string
	width    int
	quality  int
}

// OpenStreamHandler handles OpenStream.
type OpenStreamHandler struct{ st *Streams }

// OpenStream returns the handler of OpenStream.
func (st *Streams) OpenStream() OpenStreamHandler { return OpenStreamHandler{st} }

// Handle checks the request and opens the stream; the caller reads frames
// with Next and must Close it. It needs devices:read; OAuth apps are
// refused (spec 5.2, live video sessions). It records nothing: a stream
// is watching, not a frame kept for actions to name. Errors:
// permission_denied, invalid_argument (fps, maxWidth, quality),
// device_unavailable (not_found, offline), backend_resolution_failed,
// backend_not_implemented, capability_unsupported (no screenshots).
func (h OpenStreamHandler) Handle(ctx context.Context, cmd OpenStream) (*ScreenStream, error) {
	if err := denyLive(cmd.Auth); err != nil {
		return nil, err
	}
	fps, width, quality := cmd.FPS, cmd.MaxWidth, cmd.Quality
	switch {
	case fps == 0:
		fps = DefaultStreamFPS
	case fps < 1 || fps > MaxStreamFPS:
		return nil, domain.Errorf(domain.CodeInvalidArgument, "fps must be between 1 and %d", MaxStreamFPS)
	}
	switch {
	case width == 0:
		width = DefaultStreamWidth
	case width < MinStreamWidth:
		return nil, domain.Errorf(domain.CodeInvalidArgument, "maxWidth must be at least %d", MinStreamWidth)
	}
	switch {
	case quality == 0:
		quality = DefaultStreamQuality
	case quality < 1 || quality > 100:
		return nil, domain.Errorf(domain.CodeInvalidArgument, "quality must be between 1 and 100")
	}
	d, err := h.st.f.visibleDevice(ctx, cmd.Auth, cmd.DeviceID)
	if err != nil {
		return nil, err
	}
	src, caps, err := h.st.source(ctx, cmd, &d)
	if err != nil {
		return nil, err
	}
	if !caps.Screenshot {
		return nil, domain.Errorf(domain.CodeCapabilityUnsupported, "this device cannot show its screen").
			With("capability", "screenshot")
	}
	if caps.Width > 0 && width >= caps.Width {
		width = caps.Width // one feed for every request of full size
	}
	feed := h.st.join(feedKey{deviceID: d.ID, width: width, quality: quality}, src, time.Second/time.Duration(fps))
	// The first frame is made now, so a device that cannot show its screen
	// is refused before the stream's answer starts.
	if _, err := feed.frame(ctx); err != nil {
		h.st.leave(feed)
		return nil, err
	}
	return &ScreenStream{st: h.st, feed: feed, interval: time.Second / time.Duration(fps), fps: fps}, nil
}

// source returns the live screen of d and what it can show: its backend's
// here, or the instance driving it's through forwarded live_frame calls.
func (st *Streams) source(ctx context.Context, cmd OpenStream, d *domain.Device) (ScreenSource, domain.Capabilities, error) {
	f := st.f
	host, remote, err := f.runtime.Route(ctx, d)
	if err != nil {
		return nil, domain.Capabilities{}, err
	}
	if remote {
		c := LiveFrame{Auth: cmd.Auth, DeviceID: d.ID}
		probe := c
		probe.HashOnly = true
		a, err := forwardDeviceCall[LiveFrame, LiveFrameAnswer](ctx, f, host, OpLiveFrame, d.ID, probe)
		if err != nil {
			return nil, domain.Capabilities{}, err
		}
		return &remoteScreen{f: f, host: host, call: c}, domain.Capabilities{Screenshot: a.Screenshot, Width: a.Width}, nil
	}
	backend, err := f.runtime.Resolve(ctx, d)
	if err != nil {
		return nil, domain.Capabilities{}, err
	}
	return sourceOf(backend), backend.Capabilities(), nil
}

// join returns the feed of key, starting it with src when nobody watches
// it, and counts one more viewer at interval.
func (st *Streams) join(key feedKey, src ScreenSource, interval time.Duration) *screenFeed {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.feeds[key]
	if f == nil {
		f = &screenFeed{key: key, src: src, fastest: interval}
		st.feeds[key] = f
	}
	f.viewers++
	f.mu.Lock()
	f.fastest = min(f.fastest, interval)
	if f.src != src {
		// The device's adapter was replaced (its host restored the phone
		// anew): watch the new one from now on.
		f.src, f.hash = src, ""
	}
	f.mu.Unlock()
	return f
}

// leave counts one viewer fewer, forgetting the feed after its last.
func (st *Streams) leave(f *screenFeed) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f.viewers--
	if f.viewers == 0 && st.feeds[f.key] == f {
		delete(st.feeds, f.key)
	}
}

// Feeds reports how many feeds are being watched (tests, the bench).
func (st *Streams) Feeds() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.feeds)
}

// screenFeed is the shared picture of one device at one size and quality.
type screenFeed struct {
	key     feedKey
	viewers int // under Streams.mu

	mu       sync.Mutex
	src      ScreenSource
	fastest  time.Duration // the fastest viewer's interval
	checked  time.Time     // when the screen hash was last asked for
	encoding bool          // a new picture is being encoded
	hash     string        // the screen the last picture shows
	last     StreamFrame
	err      error
}

// frame returns the newest picture. The first is encoded at once; after
// it, a turn that finds the screen changed (checked at most twice per
// fastest viewer's interval) starts encoding the new picture in the
// background and still answers the last one, so an encoding never delays
// a viewer's turn: the new picture shows from the turn after it is ready.
// Once an encoding failed (the device can no longer be read) every turn
// answers that error.
func (f *screenFeed) frame(ctx context.Context) (StreamFrame, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return StreamFrame{}, f.err
	}
	if f.last.JPEG == nil {
		if err := ctx.Err(); err != nil {
			return StreamFrame{}, err
		}
		f.checked = time.Now()
		next, hash, err := f.encode(f.src, f.last.Seq)
		if err != nil {
			return StreamFrame{}, err
		}
		f.last, f.hash = next, hash
		return f.last, nil
	}
	if now := time.Now(); !f.encoding && now.Sub(f.checked) >= f.fastest/2 {
		f.checked = now
		if f.src.ScreenHash() != f.hash {
			f.encoding = true
			go f.refresh(f.src, f.last.Seq)
		}
	}
	return f.last, nil
}

// refresh encodes the screen as it is now, outside the feed's lock, and
// makes it the newest picture.
func (f *screenFeed) refresh(src ScreenSource, seq uint64) {
	next, hash, err := f.encode(src, seq)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.encoding = false
	if err != nil {
		f.err = err
		return
	}
	f.last, f.hash = next, hash
}

// encode paints the screen and encodes it as picture seq+1.
func (f *screenFeed) encode(src ScreenSource, seq uint64) (StreamFrame, string, error) {
	img, hash, err := src.LiveFrame(f.key.width)
	if err != nil {
		return StreamFrame{}, "", err
	}
	var buf bytes.Buffer
	buf.Grow(64 << 10)
	if err := screenjpeg.Encode(&buf, img, f.key.quality); err != nil {
		return StreamFrame{}, "", domain.Errorf(domain.CodeInternal, "internal error").Wrap(err)
	}
	b := img.Bounds()
	return StreamFrame{JPEG: buf.Bytes(), Seq: seq + 1, Width: b.Dx(), Height: b.Dy()}, hash, nil
}

// ScreenStream is one viewer's stream. It is not safe for concurrent use.
type ScreenStream struct {
	st       *Streams
	feed     *screenFeed
	interval time.Duration
	fps      int
	due      time.Time
	closed   bool
}

// FPS is the stream's frame rate.
func (s *ScreenStream) FPS() int { return s.fps }

// Next waits for the stream's next turn (the first comes at once) and
// returns the newest frame. It returns ctx's error when ctx ends first,
// and the backend's when the screen can no longer be read (the device went
// offline): the stream is over then.
func (s *ScreenStream) Next(ctx context.Context) (StreamFrame, error) {
	now := time.Now()
	if s.due.IsZero() {
		s.due = now
	}
	if wait := s.due.Sub(now); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return StreamFrame{}, ctx.Err()
		case <-t.C:
		}
	}
	// Turns are kept on a fixed grid; a viewer that fell behind (a slow
	// client) skips the turns it missed rather than bursting to catch up.
	s.due = s.due.Add(s.interval)
	if now := time.Now(); s.due.Before(now) {
		s.due = now.Add(s.interval)
	}
	return s.feed.frame(ctx)
}

// Close ends the stream. It may be called more than once.
func (s *ScreenStream) Close() {
	if !s.closed {
		s.closed = true
		s.st.leave(s.feed)
	}
}

// sourceOf returns the live screen of a backend: the one it offers (a sim
// phone's), or for any other backend its screenshots decoded.
func sourceOf(b domain.Backend) ScreenSource {
	if p, ok := b.(interface{ LiveScreen() domain.LiveScreen }); ok {
		return p.LiveScreen()
	}
	return &observedScreen{b: b}
}

// observedScreen is a ScreenSource over domain.Backend.Observe, for
// backends with no cheaper way to their pixels: each check takes a
// screenshot, and the one whose hash changed is decoded.
type observedScreen struct{ b domain.Backend }

// ScreenHash implements ScreenSource.
func (o *observedScreen) ScreenHash() string {
	obs, err := o.b.Observe(context.Background(), domain.ObserveOptions{})
	if err != nil {
		return ""
	}
	return obs.ScreenHash
}

// LiveFrame implements ScreenSource.
func (o *observedScreen) LiveFrame(maxWidth int) (*image.RGBA, string, error) {
	obs, err := o.b.Observe(context.Background(), domain.ObserveOptions{Image: true, MaxWidth: maxWidth})
	if err != nil {
		return nil, "", err
	}
	img, err := png.Decode(bytes.NewReader(obs.PNG))
	if err != nil {
		return nil, "", domain.Errorf(domain.CodeBackendCommandFailed, "the device's screenshot cannot be read").Wrap(err)
	}
	rgba, ok := img.(*image.RGBA)
	if !ok {
		rgba = image.NewRGBA(img.Bounds())
		for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
			for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
				rgba.Set(x, y, img.At(x, y))
			}
		}
	}
	return rgba, obs.ScreenHash, nil
}
