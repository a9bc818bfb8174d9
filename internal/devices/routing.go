package devices

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// How a call reaches the holder of its device. Every device is driven by
// one process, the holder of its host (Locate); a call for it reaching
// another process travels whole to the holder over the Transport
// (internal/cluster, NATS request–reply), which runs it as a local call
// (Calls.Serve) and sends the answer back. The runtime carries the call:
// the caller's event metadata with it, the answer or error back, the
// retries while the host changes hands. What a call is, and what an
// unanswered one means for its command, is the caller's (commands/fleet).

// Transport carries a device call to the process that holds the device's
// host (internal/cluster.Node implements it over NATS request–reply). A
// deployment of one instance has none: a device another process drives
// then answers device_unavailable (offline).
type Transport interface {
	// Forward sends the call op with body to the holder of host and
	// returns the holder's reply (what Calls.Serve answered there). An
	// error wrapping ErrNotDelivered means no holder took the call, so
	// nothing ran; any other error means the call may have been taken and
	// its outcome is not known here.
	Forward(ctx context.Context, host, op string, body []byte) ([]byte, error)
}

// ErrNotDelivered is wrapped by a Transport's error when the call reached
// no holder (nobody holds the host, the transport is down): nothing ran.
var ErrNotDelivered = errors.New("no process holding the device took the call")

// HostState reports who holds a host now: the epoch of its last take and
// whether any process holds its claim (internal/backends.HostState).
type HostState func(ctx context.Context, host string) (epoch int64, held bool, err error)

// forwardedKey marks a context whose call came from another instance: it
// runs here or nowhere, never forwarded again.
type forwardedKey struct{}

func isForwarded(ctx context.Context) bool { return ctx.Value(forwardedKey{}) != nil }

// errNotHere answers a forwarded call for a device this process no longer
// holds: the caller asks again, and the host's new holder answers.
var errNotHere = errors.New("this process does not hold the device")

// Route names the host d is driven under and reports whether a call on d
// goes to another process (remote): one that holds the host, when there
// is a way to it (a Transport). Without one, a device held elsewhere is
// not remote, and Resolve answers it offline. A call that came forwarded
// and finds d held elsewhere fails (the caller asks again and reaches the
// host's new holder); Route fails for nothing else.
func (r *Runtime) Route(ctx context.Context, d *domain.Device) (host string, remote bool, err error) {
	host, local := r.Locate(d)
	if local || r.cfg.Transport == nil {
		return host, false, nil // here, or nowhere: Resolve answers offline
	}
	if isForwarded(ctx) {
		return host, false, errNotHere
	}
	return host, true, nil
}

// call is a forwarded call as it travels: the caller's event metadata and
// the command (which carries the caller's authorization context: the
// holder checks scopes and tenancy again).
type call struct {
	Meta eventstore.Metadata `json:"meta"`
	Cmd  json.RawMessage     `json:"cmd"`
	// Raw asks for the reply in its raw form (reply.go): pictures as
	// their bytes, not base64. A holder of an earlier build ignores it
	// and answers in JSON.
	Raw bool `json:"raw,omitempty"`
}

// reply is a forwarded call's answer in JSON, as a holder answers a
// caller that did not ask for the raw form (an earlier build).
type reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *wireError      `json:"error,omitempty"`
}

// wireError is an error as it travels: a domain error whole; a conflict
// (the run's stream moved on) and a call for a device the holder does not
// hold as flags, since the caller acts on them; anything else as
// internal_error.
type wireError struct {
	Code      domain.Code    `json:"code,omitempty"`
	Message   string         `json:"message,omitempty"`
	Retryable *bool          `json:"retryable,omitempty"`
	Extra     map[string]any `json:"extra,omitempty"`
	Conflict  bool           `json:"conflict,omitempty"`
	NotHere   bool           `json:"notHere,omitempty"`
}

func toWire(err error) *wireError {
	var de *domain.Error
	switch {
	case errors.Is(err, errNotHere):
		return &wireError{NotHere: true}
	case errors.Is(err, eventstore.ErrConflict):
		return &wireError{Conflict: true}
	case errors.As(err, &de):
		return &wireError{Code: de.Code, Message: de.Message, Retryable: de.Retryable, Extra: de.Extra}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &wireError{Code: domain.CodeServiceUnavailable, Message: "the call ran out of time on the instance holding the device"}
	default:
		return &wireError{Code: domain.CodeInternal, Message: "internal error"}
	}
}

func (w *wireError) err() error {
	switch {
	case w.NotHere:
		return errNotHere
	case w.Conflict:
		return &eventstore.ConflictError{}
	}
	return &domain.Error{Code: w.Code, Message: w.Message, Retryable: w.Retryable, Extra: w.Extra}
}

// Calls are the device calls this process runs for the others, by op:
// each decodes its command and runs it as a local call would
// (commands/fleet.ServedCalls: the application object's fleet handlers).
type Calls map[string]func(ctx context.Context, cmd json.RawMessage) (any, error)

// Serve runs a device call another process forwarded here and returns the
// reply to send back (the Transport's serving end calls it for each call
// on a host this process holds). The call runs under the caller's event
// metadata and is marked forwarded: it runs here or nowhere. Serve never
// fails: every error travels in the reply.
func (c Calls) Serve(ctx context.Context, op string, body []byte) []byte {
	answer := func(res any, err error) []byte {
		var r reply
		if err != nil {
			r.Error = toWire(err)
		} else if b, merr := json.Marshal(res); merr != nil {
			r.Error = toWire(merr)
		} else {
			r.Result = b
		}
		b, _ := json.Marshal(r) // plain data: it cannot fail
		return b
	}
	run, ok := c[op]
	if !ok {
		return answer(nil, domain.Errorf(domain.CodeServiceUnavailable, "this instance does not know the device call %q; it runs another version", op).WithRetryable(true))
	}
	var in call
	if err := json.Unmarshal(body, &in); err != nil {
		return answer(nil, fmt.Errorf("forwarded call: %w", err))
	}
	ctx = context.WithValue(eventstore.WithMetadata(ctx, in.Meta), forwardedKey{}, true)
	if in.Raw {
		return encodeRawReply(run(ctx, in.Cmd))
	}
	return answer(run(ctx, in.Cmd))
}

// notHereRetries is how often a call answered errNotHere is sent again
// (the host moved between the caller's look and the call) before the
// device answers offline.
var notHereRetries = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}

// undeliveredRetries is how often a call nobody took is sent again while
// some process holds the device's host: one that has just taken it starts
// listening within moments.
var undeliveredRetries = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}

// hostHeld reports whether some process holds host's claim now (true when
// it cannot be told).
func (r *Runtime) hostHeld(ctx context.Context, host string) bool {
	if r.cfg.HostState == nil {
		return true
	}
	_, held, err := r.cfg.HostState(ctx, host)
	return err != nil || held
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Call sends cmd (JSON) as op to the process holding host, with the
// caller's event metadata, and decodes the holder's answer into result (a
// pointer). A call whose holder is changing is sent again: one nobody took
// while some process holds the host (it may not listen yet), one the
// holder answered as not held there any more. Errors: the holder's (a
// domain error whole, a concurrency conflict as an eventstore conflict);
// device_unavailable (offline, retryable) when no holder took the call, so
// nothing ran; an error wrapping domain.ErrUnanswered when it was sent and
// no answer came (it may have run: what that means is the caller's
// command's to say).
func (r *Runtime) Call(ctx context.Context, host, op string, cmd, result any) error {
	tr := r.cfg.Transport
	if tr == nil {
		return hostUnreachable(host)
	}
	// A call without metadata (a live frame) records nothing; one that
	// records fails on the holder as it would here.
	meta, _ := eventstore.MetadataFrom(ctx)
	body, err := callBody(meta, cmd)
	if err != nil {
		return err
	}
	undelivered := 0
	for attempt := 0; ; attempt++ {
		out, err := tr.Forward(ctx, host, op, body)
		if errors.Is(err, ErrNotDelivered) {
			// A process holding the claim may not listen yet (it has just
			// taken the host); one that holds nothing never will.
			if undelivered < len(undeliveredRetries) && r.hostHeld(ctx, host) {
				if !sleepCtx(ctx, undeliveredRetries[undelivered]) {
					return ctx.Err()
				}
				undelivered++
				continue
			}
			return hostUnreachable(host)
		}
		if err != nil {
			return fmt.Errorf("%w: %w", domain.ErrUnanswered, err)
		}
		werr, err := decodeReply(out, result)
		if err != nil {
			return fmt.Errorf("forwarded %s answer: %w", op, err)
		}
		if werr != nil {
			if werr.NotHere && attempt < len(notHereRetries) {
				if !sleepCtx(ctx, notHereRetries[attempt]) {
					return ctx.Err()
				}
				continue
			}
			if werr.NotHere {
				return hostUnreachable(host)
			}
			return werr.err()
		}
		return nil
	}
}

// callBody is the body of a forwarded call of cmd under meta, asking for
// the raw reply: the command's JSON is written into it as it is, not
// encoded a second time as a json.RawMessage field would be.
func callBody(meta eventstore.Metadata, cmd any) ([]byte, error) {
	m, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	c, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(m)+len(c)+32)
	b = append(b, `{"meta":`...)
	b = append(b, m...)
	b = append(b, `,"cmd":`...)
	b = append(b, c...)
	b = append(b, `,"raw":true}`...)
	return b, nil
}

// decodeReply reads a holder's reply, raw or (from a holder of an
// earlier build) JSON: the holder's error, or its result decoded into
// result.
func decodeReply(out []byte, result any) (*wireError, error) {
	if len(out) > 0 && out[0] == rawTag {
		return decodeRawReply(out, result)
	}
	var rep reply
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, err
	}
	if rep.Error != nil {
		return rep.Error, nil
	}
	return nil, json.Unmarshal(rep.Result, result)
}

// How CallWatched watches the host of a call: it looks first once the
// call has waited hostWatchFirst, then every hostWatchEvery; once the
// claim is free or was taken anew, it waits hostLostGrace more for an
// answer on its way, then gives up.
const (
	hostWatchFirst = 200 * time.Millisecond
	hostWatchEvery = time.Second
	hostLostGrace  = 2 * time.Second
)

// errHostLost ends a watched call's wait: the process it was sent to no
// longer holds the device's host.
var errHostLost = errors.New("the instance driving the device went away")

// CallWatched is Call for a call whose caller settles it from what was
// recorded when no answer comes (an action): it also gives up, as
// unanswered, once the holder went away — the host's claim free, or taken
// anew since the call left — after a grace for an answer already on its
// way, rather than waiting out the call's deadline. Without a HostState
// it is Call.
func (r *Runtime) CallWatched(ctx context.Context, host, op string, cmd, result any) error {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if r.cfg.HostState != nil {
		go r.watchHost(wctx, cancel, host)
	}
	return r.Call(wctx, host, op, cmd, result)
}

// watchHost cancels ctx with errHostLost once the host's claim is free or
// taken anew since the call left (after a grace for an answer already on
// its way).
func (r *Runtime) watchHost(ctx context.Context, cancel context.CancelCauseFunc, host string) {
	// The claim is read only for a call still waiting after
	// hostWatchFirst: most are answered sooner, and reading it for each
	// would cost every forwarded call a query. The claim as first read
	// is the one the call is watched against: a takeover after it moves
	// the epoch on. One between the call leaving and this read (the
	// holder died and another took the host within hostWatchFirst) is not
	// seen, and the call then ends at its deadline and is settled the
	// same way. A claim found free already ends the wait (after the
	// grace).
	first := time.NewTimer(hostWatchFirst)
	defer first.Stop()
	select {
	case <-ctx.Done():
		return
	case <-first.C:
	}
	epoch0, held, err := r.cfg.HostState(ctx, host)
	if err == nil && !held {
		r.hostLost(ctx, cancel)
		return
	}
	if err != nil {
		return
	}
	t := time.NewTicker(hostWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		epoch, held, err := r.cfg.HostState(ctx, host)
		if err != nil {
			continue // the database decides nothing now; the call's own deadline still holds
		}
		if held && epoch == epoch0 {
			continue
		}
		r.hostLost(ctx, cancel)
		return
	}
}

// hostLost cancels ctx with errHostLost after hostLostGrace, unless it
// ends sooner (the answer came).
func (r *Runtime) hostLost(ctx context.Context, cancel context.CancelCauseFunc) {
	select {
	case <-ctx.Done():
	case <-time.After(hostLostGrace):
		cancel(errHostLost)
	}
}

// hostUnreachable is the answer for a device whose host no process holds
// (or none can be reached): nothing was done.
func hostUnreachable(host string) *domain.Error {
	return domain.Errorf(domain.CodeDeviceUnavailable, "no instance of the service drives this device now; nothing was done").
		With("reason", domain.ReasonOffline).WithRetryable(true).With("host", host)
}
