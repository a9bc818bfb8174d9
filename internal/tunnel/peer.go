// Package tunnel is the connection between a gateway and the control
// plane: JSON-RPC 2.0 over one WebSocket that the gateway opens, in which
// either end calls the other. The gateway dials (Dial) with its credential;
// the control plane accepts (Accept) once it has authenticated the request.
// messages.go names the methods both ends speak and their parameters.
//
// Each JSON-RPC message is one WebSocket text message. A message larger
// than 64 KiB goes out as several frames of that size, so that the
// heartbeat's ping and pong frames, which WebSocket lets travel between
// the frames of a message, never wait behind a whole screenshot on a slow
// link. Either end reads messages of at most MaxMessage bytes.
package tunnel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"phonefleet/domain"
)

// Subprotocol is the WebSocket subprotocol both ends must agree on; a new
// incompatible protocol gets a new name.
const Subprotocol = "phonefleet-tunnel.1"

// Path is where the control plane serves the tunnel.
const Path = "/gateway/v1/tunnel"

// MaxMessage is the largest message either end reads (32 MiB): a
// full-size screenshot, base64-encoded in JSON, fits. A larger message
// closes the connection (1009), so neither end sends one: a request that
// large is refused before it is written, an answer that large is replaced
// by an error.
const MaxMessage = 32 << 20

// writeFragment is the frame size of a message sent in several frames.
const writeFragment = 64 << 10

// Errors a Peer's calls return; test them with errors.Is.
var (
	// ErrRefused is Dial's error when the control plane answered 401: the
	// credential is unknown, forged or revoked. Dialling again with it is
	// pointless.
	ErrRefused = errors.New("tunnel: the credential was refused")
	// ErrNotSent is a call's error when its request was never written
	// (the connection had ended or failed first, or the call's context
	// ended while it waited for its turn to write): the other side never
	// saw it, so it did nothing.
	ErrNotSent = errors.New("tunnel: the request was not sent")
	// ErrNoAnswer is a call's error when its request was written but the
	// connection, or the call's context, ended before the answer came:
	// the other side may have acted on it.
	ErrNoAnswer = errors.New("tunnel: the request was sent but no answer came")
	// ErrUnknownMethod, returned (or wrapped) by a Handler, answers the
	// request as JSON-RPC's "method not found" (-32601); the caller gets a
	// *domain.Error with code service_unavailable.
	ErrUnknownMethod = errors.New("tunnel: unknown method")
)

// Handler answers the other side's requests and notifications (a
// notification has no id; its result and error are dropped). Returning a
// *domain.Error (or an error wrapping one) sends it whole to the caller;
// any other error reaches the caller as internal_error, its text only in
// this side's log. ctx ends when the connection does; PeerFrom(ctx) is
// the peer the message came on.
type Handler func(ctx context.Context, method string, params json.RawMessage) (any, error)

// Options tune a Peer; the zero value is ready to use.
type Options struct {
	// PingInterval is how often this end pings the other; 0 means
	// DefaultPingInterval.
	PingInterval time.Duration
	// PingTimeout is how long a ping waits for its pong; 0 means
	// PingInterval.
	PingTimeout time.Duration
	// MissedPings is how many pings in a row may go without a pong
	// before the connection is dropped; 0 means DefaultMissedPings. A
	// half-open connection (the other side stopped answering without
	// closing) thus ends within about PingInterval + MissedPings ×
	// max(PingInterval, PingTimeout).
	MissedPings int
	// Logger receives what goes wrong on the connection (nil:
	// slog.Default()).
	Logger *slog.Logger
	// HTTPClient makes Dial's handshake request (nil: http.DefaultClient);
	// its Timeout bounds the handshake only. Accept ignores it.
	HTTPClient *http.Client
}

// The heartbeat's defaults (Options): a half-open tunnel is dropped
// within about 8 s.
const (
	DefaultPingInterval = 2 * time.Second
	DefaultMissedPings  = 3
)

func (o Options) withDefaults() Options {
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.PingTimeout <= 0 {
		o.PingTimeout = o.PingInterval
	}
	if o.MissedPings <= 0 {
		o.MissedPings = DefaultMissedPings
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Dial opens the tunnel to the control plane at base (http://host:port or
// https://…, with an optional path prefix; ws and wss work too, Path is
// appended), presenting credential as "Authorization: Bearer …" and
// asking for Subprotocol. The peer reads and answers from the moment it
// is returned until the connection ends; ctx bounds the handshake only.
// Errors: one wrapping ErrRefused when the control plane answered 401;
// any other failure to connect is returned as it is.
func Dial(ctx context.Context, base, credential string, h Handler, opts Options) (*Peer, error) {
	u, err := tunnelURL(base)
	if err != nil {
		return nil, err
	}
	header := http.Header{}
	header.Set("Authorization", "Bearer "+credential)
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient:   opts.HTTPClient,
		HTTPHeader:   header,
		Subprotocols: []string{Subprotocol},
	})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return nil, fmt.Errorf("%w by %s", ErrRefused, redact(u))
		}
		return nil, fmt.Errorf("tunnel: connecting to %s: %w", redact(u), err)
	}
	if conn.Subprotocol() != Subprotocol {
		_ = conn.Close(websocket.StatusProtocolError, "subprotocol "+Subprotocol+" required")
		return nil, fmt.Errorf("tunnel: %s does not speak %s", redact(u), Subprotocol)
	}
	return newPeer(conn, h, opts), nil
}

// tunnelURL derives the tunnel's WebSocket URL from the control plane's
// base URL.
func tunnelURL(base string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil {
		return "", fmt.Errorf("tunnel: control plane URL %q: %w", base, err)
	}
	switch u.Scheme {
	case "http", "ws":
		u.Scheme = "ws"
	case "https", "wss":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("tunnel: control plane URL %q must be http:// or https://", base)
	}
	if u.Host == "" {
		return "", fmt.Errorf("tunnel: control plane URL %q names no host", base)
	}
	u.Path = strings.TrimRight(u.Path, "/") + Path
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u.String(), nil
}

// redact drops user information from a URL before it is shown.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the control plane"
	}
	return u.Redacted()
}

// Accept upgrades r, which the caller has already authenticated, to the
// tunnel and returns its peer, which reads and answers from the moment it
// is returned until the connection ends. It works behind
// http.ResponseWriter wrappers that have Unwrap() http.ResponseWriter
// (the WebSocket library follows Unwrap to the http.Hijacker, as
// http.ResponseController does), and clears the server's read and write
// deadlines, which would otherwise outlive the request on the hijacked
// connection. A client that does not offer
// Subprotocol is closed with 1002 (protocol error) and Accept returns an
// error. When the upgrade itself fails, Accept has already answered r.
func Accept(w http.ResponseWriter, r *http.Request, h Handler, opts Options) (*Peer, error) {
	// The server's read and write timeouts would otherwise stay on the
	// hijacked connection and cut the tunnel.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}})
	if err != nil {
		return nil, fmt.Errorf("tunnel: %w", err)
	}
	if conn.Subprotocol() != Subprotocol {
		_ = conn.Close(websocket.StatusProtocolError, "subprotocol "+Subprotocol+" required")
		return nil, fmt.Errorf("tunnel: the client did not offer subprotocol %s", Subprotocol)
	}
	return newPeer(conn, h, opts), nil
}

// Peer is one end of a tunnel. Its methods are safe for concurrent use.
// The other side's requests are each handled on a goroutine of their own;
// its notifications on one goroutine, in the order they came. Writes are
// serialized.
type Peer struct {
	conn    *websocket.Conn
	handler Handler
	opts    Options
	log     *slog.Logger

	// ctx lives as long as the connection; handlers run under it.
	ctx    context.Context
	cancel context.CancelFunc
	// ending is closed when the peer stops taking calls (the connection
	// failed or Close began); done when the connection has ended.
	ending chan struct{}
	done   chan struct{}
	// turn is the right to write one message: a channel, so that a call
	// waiting for it can give up when its context ends.
	turn chan struct{}

	nextID atomic.Int64

	mu      sync.Mutex
	pending map[int64]chan *message
	err     error

	notesMu sync.Mutex
	notes   []*message
	noteCh  chan struct{}

	failOnce  sync.Once
	endOnce   sync.Once
	closeOnce sync.Once
}

func newPeer(conn *websocket.Conn, h Handler, opts Options) *Peer {
	opts = opts.withDefaults()
	conn.SetReadLimit(MaxMessage)
	p := &Peer{
		conn: conn, handler: h, opts: opts, log: opts.Logger,
		ending: make(chan struct{}), done: make(chan struct{}), turn: make(chan struct{}, 1),
		pending: map[int64]chan *message{}, noteCh: make(chan struct{}, 1),
	}
	p.ctx, p.cancel = context.WithCancel(context.WithValue(context.Background(), peerKey{}, p))
	go p.readLoop()
	go p.heartbeat()
	go p.notifications()
	return p
}

type peerKey struct{}

// PeerFrom returns the peer whose message a Handler is answering, or nil
// when ctx is not a handler's.
func PeerFrom(ctx context.Context) *Peer {
	p, _ := ctx.Value(peerKey{}).(*Peer)
	return p
}

// Done is closed when the connection has ended.
func (p *Peer) Done() <-chan struct{} { return p.done }

// Err says why the connection ended (nil while it has not): Close's
// reason, a heartbeat that went unanswered, or the read error, in which
// websocket.CloseStatus finds the close code the other side sent.
func (p *Peer) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Close ends the connection with a close handshake (code and reason as
// WebSocket close frames carry them; reason at most 123 bytes). Pending
// calls fail at once with ErrNoAnswer and new ones with ErrNotSent. It
// returns when the connection has ended, which takes at most about ten
// seconds when the other side does not answer the handshake. Calling it
// again, or after the connection ended, only waits for that end.
func (p *Peer) Close(code websocket.StatusCode, reason string) {
	p.closeOnce.Do(func() {
		p.fail(&closedError{code: code, reason: reason})
		_ = p.conn.Close(code, reason)
	})
	<-p.done
}

// Serve waits until the connection ends, closing it with 1001 (going
// away) if ctx ends first, and returns why it ended (Err). The peer reads
// and answers from the moment Dial or Accept returned it, whether or not
// anyone calls Serve.
func (p *Peer) Serve(ctx context.Context) error {
	select {
	case <-p.done:
	case <-ctx.Done():
		p.Close(websocket.StatusGoingAway, "shutting down")
	}
	return p.Err()
}

// closedError is Err after this side closed the connection.
type closedError struct {
	code   websocket.StatusCode
	reason string
}

func (e *closedError) Error() string {
	return fmt.Sprintf("tunnel: closed by this side (%d %s)", int(e.code), e.reason)
}

// fail records why the peer stops (the first reason wins), refuses new
// calls and fails the pending ones. The connection may still be closing.
func (p *Peer) fail(err error) {
	p.failOnce.Do(func() {
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.ending)
	})
}

// end marks the connection ended.
func (p *Peer) end(err error) {
	p.fail(err)
	p.endOnce.Do(func() {
		p.cancel()
		close(p.done)
	})
}

// Call sends a request and waits for its answer, decoding the result into
// result (nil: the result is dropped). Errors: one wrapping ErrNotSent
// when the request was never written (the other side never saw it), one
// wrapping ErrNoAnswer when it was written but the connection or ctx
// ended before the answer (the other side may have acted; the error also
// wraps ctx's error or the connection's), a *domain.Error the other side
// answered (service_unavailable for a method it does not know), or an
// error encoding params or decoding the result.
func (p *Peer) Call(ctx context.Context, method string, params, result any) error {
	raw, err := encodeParams(params)
	if err != nil {
		return fmt.Errorf("tunnel: encoding the %s params: %w", method, err)
	}
	id := p.nextID.Add(1)
	idRaw, _ := json.Marshal(id)
	frame, err := json.Marshal(&message{JSONRPC: version, ID: idRaw, Method: method, Params: raw})
	if err != nil {
		return fmt.Errorf("tunnel: encoding the %s request: %w", method, err)
	}
	answer := make(chan *message, 1)
	p.mu.Lock()
	p.pending[id] = answer
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.pending, id)
		p.mu.Unlock()
	}()
	if err := p.write(ctx, frame); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotSent, method, err)
	}
	var m *message
	select {
	case m = <-answer:
	case <-ctx.Done():
		return fmt.Errorf("%w: %s: %w", ErrNoAnswer, method, ctx.Err())
	case <-p.ending:
		select {
		case m = <-answer: // it came just as the connection ended
		default:
			return fmt.Errorf("%w: %s: %w", ErrNoAnswer, method, p.Err())
		}
	}
	if m.Error != nil {
		return m.Error.domainError(method)
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(m.Result, result); err != nil {
		return fmt.Errorf("tunnel: decoding the %s result: %w", method, err)
	}
	return nil
}

// Notify sends a notification, which gets no answer. Errors: one wrapping
// ErrNotSent when it was never written, or an error encoding params.
func (p *Peer) Notify(ctx context.Context, method string, params any) error {
	raw, err := encodeParams(params)
	if err != nil {
		return fmt.Errorf("tunnel: encoding the %s params: %w", method, err)
	}
	frame, err := json.Marshal(&message{JSONRPC: version, Method: method, Params: raw})
	if err != nil {
		return fmt.Errorf("tunnel: encoding the %s notification: %w", method, err)
	}
	if err := p.write(ctx, frame); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotSent, method, err)
	}
	return nil
}

func encodeParams(params any) (json.RawMessage, error) {
	if params == nil {
		return nil, nil
	}
	return json.Marshal(params)
}

// errTooLarge refuses a message the other side would not read.
var errTooLarge = errors.New("the message is larger than the tunnel's 32 MiB limit")

// write sends one message once it is this caller's turn. An error means
// the message was not (wholly) written, so the other side cannot have
// read it. A write that fails part way breaks the connection, which is
// then closed.
func (p *Peer) write(ctx context.Context, frame []byte) error {
	if len(frame) > MaxMessage {
		return errTooLarge
	}
	select {
	case <-p.ending:
		return p.Err()
	default:
	}
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.ending:
		return p.Err()
	}
	defer func() { <-p.turn }()
	select {
	case <-p.ending:
		return p.Err()
	default:
	}
	if err := p.writeMessage(frame); err != nil {
		p.fail(fmt.Errorf("tunnel: writing failed: %w", err))
		go func() { _ = p.conn.CloseNow() }()
		return err
	}
	return nil
}

// writeMessage writes frame as one text message: in one frame, or in
// writeFragment-sized frames when it is larger.
func (p *Peer) writeMessage(frame []byte) error {
	if len(frame) <= writeFragment {
		return p.conn.Write(p.ctx, websocket.MessageText, frame)
	}
	w, err := p.conn.Writer(p.ctx, websocket.MessageText)
	if err != nil {
		return err
	}
	for len(frame) > 0 {
		n := min(len(frame), writeFragment)
		if _, err := w.Write(frame[:n]); err != nil {
			_ = w.Close()
			return err
		}
		frame = frame[n:]
	}
	return w.Close()
}

// readLoop reads messages until the connection ends.
func (p *Peer) readLoop() {
	for {
		typ, data, err := p.conn.Read(p.ctx)
		if err != nil {
			p.end(fmt.Errorf("tunnel: connection ended: %w", err))
			_ = p.conn.CloseNow()
			return
		}
		if typ != websocket.MessageText {
			p.fail(errors.New("tunnel: the other side sent a binary message"))
			_ = p.conn.Close(websocket.StatusUnsupportedData, "text messages only")
			continue // the next read reports the end
		}
		p.dispatch(data)
	}
}

// dispatch routes one message: a request to a goroutine of its own, a
// notification to the ordered queue, an answer to its waiting call.
func (p *Peer) dispatch(data []byte) {
	var m message
	if err := json.Unmarshal(data, &m); err != nil {
		p.log.Warn("tunnel: unreadable message", "err", err)
		go p.answer(&message{JSONRPC: version, ID: json.RawMessage("null"), Error: &wireError{Code: codeParseError, Message: "parse error"}})
		return
	}
	hasID := len(m.ID) > 0
	switch {
	case m.JSONRPC != version:
		p.log.Warn("tunnel: not a JSON-RPC 2.0 message", "jsonrpc", m.JSONRPC)
		if hasID && m.Method != "" {
			go p.answer(&message{JSONRPC: version, ID: m.ID, Error: &wireError{Code: codeInvalidRequest, Message: "invalid request"}})
		}
	case m.Method != "" && !hasID:
		p.queueNote(&m)
	case m.Method != "":
		go p.serve(&m)
	case hasID:
		p.deliver(&m)
	default:
		p.log.Warn("tunnel: a message that is neither request nor answer")
	}
}

func (p *Peer) deliver(m *message) {
	var id int64
	if err := json.Unmarshal(m.ID, &id); err != nil {
		p.log.Warn("tunnel: an answer to no request of ours", "id", string(m.ID))
		return
	}
	p.mu.Lock()
	ch := p.pending[id]
	delete(p.pending, id)
	p.mu.Unlock()
	if ch == nil {
		// Its caller gave up (context ended) before it came.
		p.log.Debug("tunnel: a late answer", "id", id)
		return
	}
	ch <- m
}

// serve answers one request.
func (p *Peer) serve(m *message) {
	res, err := p.handle(m)
	out := &message{JSONRPC: version, ID: m.ID}
	if err == nil {
		if out.Result, err = json.Marshal(res); err != nil {
			err = fmt.Errorf("encoding the result: %w", err)
		}
	}
	if err != nil {
		out.Result, out.Error = nil, p.errorFor(m.Method, err)
	}
	p.answer(out)
}

// answer writes one answer, replacing one too large to send by an error.
func (p *Peer) answer(out *message) {
	frame, err := json.Marshal(out)
	if err == nil && len(frame) > MaxMessage {
		p.log.Warn("tunnel: an answer too large to send", "bytes", len(frame))
		out.Result, out.Error = nil, newWireError(domain.Errorf(domain.CodeBackendCommandFailed,
			"the answer is %d bytes; the tunnel carries at most %d", len(frame), MaxMessage))
		frame, err = json.Marshal(out)
	}
	if err != nil {
		p.log.Error("tunnel: encoding an answer", "err", err)
		return
	}
	if err := p.write(p.ctx, frame); err != nil {
		p.log.Debug("tunnel: answer not sent", "err", err)
	}
}

// handle runs the handler on one request or notification, turning a
// panic into an error.
func (p *Peer) handle(m *message) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("tunnel: handler panicked", "method", m.Method, "panic", r)
			res, err = nil, domain.Errorf(domain.CodeInternal, "internal error")
		}
	}()
	if p.handler == nil {
		return nil, ErrUnknownMethod
	}
	return p.handler(p.ctx, m.Method, m.Params)
}

// errorFor turns a handler's error into a JSON-RPC error.
func (p *Peer) errorFor(method string, err error) *wireError {
	if errors.Is(err, ErrUnknownMethod) {
		return &wireError{Code: codeMethodNotFound, Message: "method not found: " + method}
	}
	var de *domain.Error
	if !errors.As(err, &de) {
		p.log.Error("tunnel: handler failed", "method", method, "err", err)
	}
	return newWireError(domain.AsError(err))
}

func (p *Peer) queueNote(m *message) {
	p.notesMu.Lock()
	p.notes = append(p.notes, m)
	p.notesMu.Unlock()
	select {
	case p.noteCh <- struct{}{}:
	default:
	}
}

// notifications hands the notifications to the handler one at a time, in
// the order they came, until the peer stops.
func (p *Peer) notifications() {
	for {
		select {
		case <-p.ending:
			return
		case <-p.noteCh:
		}
		for {
			p.notesMu.Lock()
			if len(p.notes) == 0 {
				p.notesMu.Unlock()
				break
			}
			m := p.notes[0]
			p.notes = p.notes[1:]
			p.notesMu.Unlock()
			if _, err := p.handle(m); err != nil {
				p.log.Warn("tunnel: notification failed", "method", m.Method, "err", err)
			}
		}
	}
}

// heartbeat pings the other side every PingInterval and drops the
// connection when MissedPings pings in a row get no pong within
// PingTimeout.
func (p *Peer) heartbeat() {
	t := time.NewTicker(p.opts.PingInterval)
	defer t.Stop()
	missed := 0
	for {
		select {
		case <-p.ending:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(p.ctx, p.opts.PingTimeout)
		err := p.conn.Ping(ctx)
		cancel()
		if err == nil {
			missed = 0
			continue
		}
		select {
		case <-p.ending:
			return
		default:
		}
		if missed++; missed >= p.opts.MissedPings {
			p.fail(fmt.Errorf("tunnel: the other side answered no ping for %d tries: %w", missed, err))
			_ = p.conn.CloseNow()
			return
		}
		p.log.Debug("tunnel: ping unanswered", "err", err)
	}
}

// The JSON-RPC 2.0 wire format.

const version = "2.0"

// JSON-RPC error codes.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	// codeServerError carries a *domain.Error in its data.
	codeServerError = -32000
)

// message is a request (Method and ID), a notification (Method, no ID) or
// an answer (ID with Result or Error).
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *wireError      `json:"error,omitempty"`
}

type wireError struct {
	Code    int        `json:"code"`
	Message string     `json:"message"`
	Data    *errorData `json:"data,omitempty"`
}

// errorData is a *domain.Error as it travels.
type errorData struct {
	Code      domain.Code    `json:"code"`
	Message   string         `json:"message"`
	Retryable *bool          `json:"retryable,omitempty"`
	Extra     map[string]any `json:"extra,omitempty"`
}

func newWireError(e *domain.Error) *wireError {
	return &wireError{Code: codeServerError, Message: e.Message,
		Data: &errorData{Code: e.Code, Message: e.Message, Retryable: e.Retryable, Extra: e.Extra}}
}

// domainError rebuilds the other side's error. Numbers in Extra come back
// as float64, as JSON decodes them.
func (e *wireError) domainError(method string) *domain.Error {
	switch {
	case e.Code == codeMethodNotFound:
		return domain.Errorf(domain.CodeServiceUnavailable, "the other end of the tunnel does not know %s", method).
			With("method", method)
	case e.Data != nil && e.Data.Code != "":
		return &domain.Error{Code: e.Data.Code, Message: e.Data.Message, Retryable: e.Data.Retryable, Extra: e.Data.Extra}
	}
	return domain.Errorf(domain.CodeInternal, "internal error").
		Wrap(fmt.Errorf("tunnel: %s answered JSON-RPC error %d: %s", method, e.Code, e.Message))
}
