// Package cluster carries device calls between the instances of one
// deployment over NATS request–reply. A device is driven by the one
// process holding its host ("sim", or "gw.<gatewayId>"); a call for it
// reaching another instance travels whole to that holder, which runs it as
// a local call and sends the answer back. The package only moves bytes:
// it is the device runtime's transport (devices.Transport), and what a
// call is, is decided above it (devices.Calls, commands/fleet.ServedCalls).
//
// Each holder keeps one queue subscription per host it holds, on subject
// pf.<clusterId>.host.<host>. The cluster id comes from the shared database
// (ClusterID), so two deployments on one NATS server never hear each other.
// Every call and every reply carries a MAC under a secret all instances
// share (ClusterSecret), binding it to its subject, its call id and its
// deadline: another client of the NATS server can neither inject a call,
// nor replay one, nor answer one. The bus itself is locked down by the
// NATS server's authentication and TLS (Config.Options).
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"phonefleet/internal/clock"
	"phonefleet/internal/devices"
)

// Config configures a Node.
type Config struct {
	// URL is the NATS server (SERVICE_NATS_URL); a comma-separated list
	// names several servers of one NATS cluster.
	URL string
	// ClusterID names the deployment on the bus (ClusterID reads it).
	ClusterID string
	// Secret signs the calls this node sends and checks the ones it
	// receives; every instance of the deployment has the same.
	Secret []byte
	// Serve runs a call for a host this process holds and returns the
	// reply to send back (devices.Calls.Serve). Its context ends at the
	// caller's deadline. Start requires it; Dial leaves it to Node.Serve.
	Serve func(ctx context.Context, op string, body []byte) []byte
	// Held lists the hosts this process holds now
	// ((*devices.Runtime).HeldHosts); the node follows it. Start
	// requires it; Dial leaves it to Node.Serve.
	Held func() []string
	// Logger receives the node's warnings; nil means slog.Default().
	Logger *slog.Logger
	// Name names the connection on the NATS server (its monitoring lists
	// connections by name).
	Name string
	// Options are added to the connection's own: the deployment's NATS
	// credentials and TLS (ConnectOptions builds them from the settings).
	Options []nats.Option
}

const (
	// reconcileEvery is how often the node compares its subscriptions
	// with the hosts this process holds.
	reconcileEvery = 250 * time.Millisecond
	// reconnectWait is the pause between attempts to reach the server.
	reconnectWait = 250 * time.Millisecond
	// defaultCallTimeout bounds a call whose context has no deadline.
	defaultCallTimeout = 2 * time.Minute
	// drainWait bounds how long Close lets the subscriptions hand over
	// the calls already delivered to them.
	drainWait = 5 * time.Second
	// closeWait bounds how long Close waits for the calls in progress
	// before it cancels them.
	closeWait = 20 * time.Second
	// flushWait bounds the last answers' way out once calls are
	// cancelled, and again the final flush.
	flushWait = 2 * time.Second
)

// Node is this process's place on the bus: it serves the calls for the
// hosts this process holds and forwards calls to the holders of others.
// It is safe for concurrent use.
type Node struct {
	cfg Config
	nc  *nats.Conn
	log *slog.Logger

	// base is the parent of every served call's context; Close cancels it
	// when calls outlast closeWait.
	base       context.Context
	cancelBase context.CancelFunc
	// stop ends the reconcile loop; loopDone says it has ended (closed
	// at once when the node never served).
	stop      chan struct{}
	loopDone  chan struct{}
	closeOnce sync.Once
	serveOnce sync.Once

	mu sync.Mutex
	// serving is set once Serve has given the node its held hosts and
	// its way to answer (cfg.Held, cfg.Serve).
	serving bool
	// subs holds one subscription per host served.
	subs map[string]*nats.Subscription
	// badHosts are hosts Held named that cannot be a subject, logged once.
	badHosts map[string]bool
	// refusing is set once Close waits for the calls in progress: no new
	// one starts (calls.Add happens only under mu while it is false).
	refusing bool
	calls    sync.WaitGroup

	// seen holds the ids of the calls accepted, against replays.
	seen seenCalls

	// Every answer to a call this node forwards comes in on one
	// subscription (to replyTo + "*"), each to the subject replyTo + its
	// call id, and is handed to the call waiting for it (deliver). One
	// subscription for all, as nats.Request does: no SUB and UNSUB on the
	// bus for each call.
	replyTo  string
	waitMu   sync.Mutex
	awaiting map[string]chan *nats.Msg
	// closed is closed once the connection is: no answer comes after it.
	closed chan struct{}
}

// Start connects to the NATS server at cfg.URL and serves the hosts
// cfg.Held names until ctx ends or Close is called: Dial, then Serve.
// Errors: Dial's, or a Config without Serve or Held.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Serve == nil || cfg.Held == nil {
		return nil, errors.New("cluster: Serve and Held are required")
	}
	n, err := Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	n.Serve(cfg.Held, cfg.Serve)
	return n, nil
}

// Dial connects to the NATS server at cfg.URL and returns the node, which
// forwards calls at once (Forward) and serves none until Serve: the device
// runtime forwards through the node, and what the node serves runs through
// the application built over that runtime, so the service dials before it
// builds them and serves after. It closes when ctx ends or Close is
// called. An unreachable server is not an error: the node keeps trying
// (calls meanwhile are not delivered, and the hosts held here are served
// once it connects). Errors: an incomplete Config, or a URL the NATS
// client refuses.
func Dial(ctx context.Context, cfg Config) (*Node, error) {
	switch {
	case cfg.URL == "":
		return nil, errors.New("cluster: no NATS server URL")
	case !validTokens(cfg.ClusterID) || strings.Contains(cfg.ClusterID, "."):
		return nil, fmt.Errorf("cluster: invalid cluster id %q", cfg.ClusterID)
	case len(cfg.Secret) == 0:
		return nil, errors.New("cluster: no secret to sign calls with")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("component", "cluster")
	// Failed attempts to (re)connect are logged when their reason changes,
	// not four times a second: a server refusing this instance's
	// credentials or certificate says so once.
	var failMu sync.Mutex
	lastFail := ""
	failed := func(err error) {
		failMu.Lock()
		defer failMu.Unlock()
		if err == nil {
			lastFail = ""
			return
		}
		if msg := err.Error(); msg != lastFail {
			lastFail = msg
			log.Warn("cannot reach the message bus; trying again", "err", msg)
		}
	}
	opts := append([]nats.Option{
		nats.Name(cfg.Name),
		// Nothing is kept while disconnected: a call is delivered now or
		// never, not late after its caller gave up on it.
		nats.ReconnectBufSize(-1),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(reconnectWait),
		nats.ConnectHandler(func(c *nats.Conn) {
			failed(nil)
			log.Info("connected to the message bus", "server", c.ConnectedUrlRedacted())
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { failed(err) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("lost the message bus: device calls to other instances are not delivered until it is back", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			failed(nil)
			log.Info("message bus back", "server", c.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("message bus error", "err", err)
		}),
		// A server refusing this instance's credentials is asked again
		// (it may be reloading them), not given up on for good.
		nats.IgnoreAuthErrorAbort(),
	}, cfg.Options...)
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect to the message bus: %w", err)
	}
	n := &Node{cfg: cfg, nc: nc, log: log, stop: make(chan struct{}), loopDone: make(chan struct{}),
		subs: map[string]*nats.Subscription{}, badHosts: map[string]bool{},
		replyTo: nc.NewInbox() + ".", awaiting: map[string]chan *nats.Msg{}, closed: make(chan struct{})}
	if _, err := nc.Subscribe(n.replyTo+"*", n.deliver); err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: subscribe to the replies: %w", err)
	}
	n.base, n.cancelBase = context.WithCancel(context.Background())
	go func() {
		select {
		case <-ctx.Done():
			n.Close()
		case <-n.stop:
		}
	}()
	log.Info("cluster node started", "cluster", cfg.ClusterID)
	return n, nil
}

// Serve starts serving the calls for the hosts held names, each answered
// by serve (devices.Calls.Serve), until the node closes: the node follows
// held every reconcileEvery. Call it once; a later call, or one after
// Close, does nothing.
func (n *Node) Serve(held func() []string, serve func(ctx context.Context, op string, body []byte) []byte) {
	n.serveOnce.Do(func() {
		n.mu.Lock()
		if n.subs == nil { // closed
			n.mu.Unlock()
			return
		}
		n.cfg.Held, n.cfg.Serve, n.serving = held, serve, true
		n.mu.Unlock()
		n.reconcile()
		go n.loop()
	})
}

// loop reconciles the subscriptions every reconcileEvery until Close.
func (n *Node) loop() {
	defer close(n.loopDone)
	t := time.NewTicker(reconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.reconcile()
		}
	}
}

// reconcile subscribes to the hosts held now and lets go of the others.
// A host let go of drains: the calls already delivered for it are still
// served (devices.Calls.Serve answers that the host is not here, and the
// caller asks again, reaching the new holder).
func (n *Node) reconcile() {
	n.mu.Lock()
	held := n.cfg.Held
	n.mu.Unlock()
	want := map[string]bool{}
	for _, h := range held() {
		want[h] = true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.subs == nil { // closing
		return
	}
	for h, sub := range n.subs {
		if !want[h] {
			delete(n.subs, h)
			n.letGo(sub)
			n.log.Debug("stopped serving device calls", "host", h)
		}
	}
	for h := range want {
		if _, ok := n.subs[h]; ok {
			continue
		}
		if !validTokens(h) {
			if !n.badHosts[h] {
				n.badHosts[h] = true
				n.log.Error("a held host cannot be named on the message bus; its devices are reachable from this instance only", "host", h)
			}
			continue
		}
		sub, err := n.nc.QueueSubscribe(subject(n.cfg.ClusterID, h), queueGroup, n.receive)
		if err != nil {
			n.log.Warn("cannot serve device calls yet; trying again", "host", h, "err", err)
			continue
		}
		n.subs[h] = sub
		n.log.Debug("serving device calls", "host", h)
	}
}

// letGo drains sub, or unsubscribes it when it cannot drain.
func (n *Node) letGo(sub *nats.Subscription) {
	if err := sub.Drain(); err != nil {
		_ = sub.Unsubscribe()
	}
}

// receive takes one call from a subscription and serves it on a
// goroutine of its own, unless the node is closing.
func (n *Node) receive(m *nats.Msg) {
	n.mu.Lock()
	if n.refusing {
		n.mu.Unlock()
		return
	}
	n.calls.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.calls.Done()
		n.serve(m)
	}()
}

// serve checks a call, runs it under the caller's deadline and sends the
// reply, signed and bound to the call's id, in parts when it is larger
// than one message may be. A call that fails the checks (version, MAC,
// deadline, an id already seen) is dropped with a warning naming neither
// the secret nor the MAC: its sender's wait ends at its deadline.
func (n *Node) serve(m *nats.Msg) {
	now := clock.Now() // deadlines on the bus are in the processes' wall clocks
	c, err := verify(n.cfg.Secret, m, now)
	if err == nil && !n.seen.first(c.id, c.deadline, now) {
		err = errReplayed
	}
	if err != nil {
		n.log.Warn("refused a device call from the message bus", "subject", m.Subject, "reason", err.Error())
		return
	}
	ctx, cancel := context.WithDeadline(n.base, c.deadline.Add(-clock.Offset()))
	n.mu.Lock()
	serve := n.cfg.Serve
	n.mu.Unlock()
	out := serve(ctx, c.op, m.Data)
	cancel()
	msgs := replyMsgs(m.Reply, out, partSize(n.nc.MaxPayload()))
	signReply(n.cfg.Secret, c, msgs)
	op := c.op
	for _, r := range msgs {
		if err := n.nc.PublishMsg(r); err != nil {
			n.log.Warn("could not answer a forwarded device call", "op", op, "err", err)
			return
		}
	}
}

// Forward implements devices.Transport: it sends the call op with body
// to whichever process holds host and waits for its reply until ctx ends
// (a ctx without a deadline waits defaultCallTimeout). Errors wrapping
// devices.ErrNotDelivered mean nothing ran: no process holds host, the
// node is not connected, the call could not be published, or it is
// larger than a message may be. Any other error means the call went out
// and no (readable) answer came back: it may have run. A message on the
// reply subject that is not the holder's answer to this call (another
// call's id, a bad MAC) is logged and ignored: the wait goes on.
func (n *Node) Forward(ctx context.Context, host, op string, body []byte) ([]byte, error) {
	if !validTokens(host) {
		return nil, fmt.Errorf("%w: host %q cannot be named on the message bus", devices.ErrNotDelivered, host)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", devices.ErrNotDelivered, err)
	}
	if !n.nc.IsConnected() {
		return nil, fmt.Errorf("%w: not connected to the message bus", devices.ErrNotDelivered)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		var cancel context.CancelFunc
		deadline = time.Now().Add(defaultCallTimeout)
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	id := newCallID()
	parts := make(chan *nats.Msg, maxParts+1)
	n.waitMu.Lock()
	n.awaiting[id] = parts
	n.waitMu.Unlock()
	defer func() {
		n.waitMu.Lock()
		delete(n.awaiting, id)
		n.waitMu.Unlock()
	}()
	maxPayload := n.nc.MaxPayload()
	req := request(n.cfg.Secret, subject(n.cfg.ClusterID, host), n.replyTo+id, id, op, deadline.Add(clock.Offset()), body)
	dl := req.Header.Get(hdrDeadline)
	if err := n.nc.PublishMsg(req); err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			return nil, fmt.Errorf("%w: the %s call (%d bytes) is larger than the message bus takes (%d bytes)",
				devices.ErrNotDelivered, op, len(body), maxPayload)
		}
		return nil, fmt.Errorf("%w: %w", devices.ErrNotDelivered, err)
	}
	var asm assembler
	for {
		var m *nats.Msg
		select {
		case m = <-parts:
		case <-ctx.Done():
			return nil, fmt.Errorf("no answer from the instance holding host %s: %w", host, ctx.Err())
		case <-n.closed:
			return nil, fmt.Errorf("no answer from the instance holding host %s: %w", host, nats.ErrConnectionClosed)
		}
		if len(m.Data) == 0 && m.Header.Get(statusHeader) == noResponders {
			return nil, fmt.Errorf("%w: no instance serves host %s", devices.ErrNotDelivered, host)
		}
		if err := verifyReply(n.cfg.Secret, m, id, dl); err != nil {
			n.log.Warn("ignored a reply from the message bus", "subject", m.Subject, "host", host, "op", op, "reason", err.Error())
			continue
		}
		reply, done, err := asm.add(m)
		if err != nil {
			return nil, fmt.Errorf("the answer from the instance holding host %s: %w", host, err)
		}
		if done {
			return reply, nil
		}
	}
}

// The status the NATS server answers a request with when no subscription
// takes its subject (what nats.ErrNoResponders stands for).
const (
	statusHeader = "Status"
	noResponders = "503"
)

// deliver hands a message on the replies subscription to the call it
// answers, named by its subject's last token. One for no call waiting (it
// ended, or never was), or past the parts a reply may have, is dropped.
func (n *Node) deliver(m *nats.Msg) {
	id, ok := strings.CutPrefix(m.Subject, n.replyTo)
	if !ok {
		return
	}
	n.waitMu.Lock()
	parts := n.awaiting[id]
	n.waitMu.Unlock()
	if parts == nil {
		return
	}
	select {
	case parts <- m:
	default:
		n.log.Warn("dropped a reply part beyond what a reply may have", "subject", m.Subject)
	}
}

// Close stops serving: it lets go of every subscription first (so no new
// call arrives; those already delivered are still served), waits for the
// calls in progress (up to closeWait, then cancels them and waits a
// little more), and closes the connection once their answers are out.
// Calls this node is still forwarding then end with an error. Close may be
// called more than once; it returns when the node has stopped.
func (n *Node) Close() {
	n.closeOnce.Do(n.close)
}

func (n *Node) close() {
	close(n.stop)
	n.mu.Lock()
	serving := n.serving
	subs := n.subs
	n.subs = nil
	n.mu.Unlock()
	if serving {
		<-n.loopDone
	}

	// Drain every subscription, and wait until each has handed over the
	// calls already delivered to it. Disconnected, no answer could go
	// out: just unsubscribe.
	gone := make([]<-chan nats.SubStatus, 0, len(subs))
	for _, sub := range subs {
		if !n.nc.IsConnected() {
			_ = sub.Unsubscribe()
			continue
		}
		gone = append(gone, sub.StatusChanged(nats.SubscriptionClosed))
		n.letGo(sub)
	}
	deadline := time.After(drainWait)
drained:
	for i, ch := range gone {
		select {
		case <-ch: // SubscriptionClosed, or the channel closed
		case <-deadline:
			n.log.Warn("subscriptions did not hand over their calls in time", "left", len(gone)-i)
			for _, sub := range subs {
				_ = sub.Unsubscribe()
			}
			break drained
		}
	}

	n.mu.Lock()
	n.refusing = true
	n.mu.Unlock()
	done := make(chan struct{})
	go func() {
		n.calls.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeWait):
		n.log.Warn("device calls from other instances still running at shutdown; cancelling them")
		n.cancelBase()
		select {
		case <-done:
		case <-time.After(flushWait):
		}
	}
	n.cancelBase()
	if n.nc.IsConnected() {
		_ = n.nc.FlushTimeout(flushWait)
	}
	n.nc.Close()
	close(n.closed)
}
