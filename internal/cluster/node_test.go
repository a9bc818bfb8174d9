package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"phonefleet/internal/devices"
	"phonefleet/testutil"
)

// holder is a fake process: the hosts it holds (changed by the test) and
// the calls its Serve ran.
type holder struct {
	name string
	mu   sync.Mutex
	held []string
	// served lists "op body" of every call Serve ran.
	served []string
	// deadlines holds the deadline of each served call's context.
	deadlines []time.Time
	// reply, when set, answers instead of the echo "<name> <op> <body>".
	reply func(ctx context.Context, op string, body []byte) []byte
}

func (h *holder) hold(hosts ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = hosts
}

func (h *holder) Held() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.held...)
}

func (h *holder) Serve(ctx context.Context, op string, body []byte) []byte {
	dl, _ := ctx.Deadline()
	h.mu.Lock()
	h.served = append(h.served, op+" "+string(body))
	h.deadlines = append(h.deadlines, dl)
	reply := h.reply
	h.mu.Unlock()
	if reply != nil {
		return reply(ctx, op, body)
	}
	return []byte(h.name + " " + op + " " + string(body))
}

func (h *holder) calls() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.served...)
}

// startNode starts a node for h (nil: a node holding nothing) on the
// server at url, closed when the test ends; its log goes to logs when set.
func startNode(t testing.TB, url, clusterID string, secret []byte, h *holder, logs *testutil.SyncBuffer) *Node {
	t.Helper()
	if h == nil {
		h = &holder{name: "caller"}
	}
	logger := slog.New(slog.DiscardHandler)
	if logs != nil {
		logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	n, err := Start(context.Background(), Config{URL: url, ClusterID: clusterID, Secret: secret,
		Serve: h.Serve, Held: h.Held, Logger: logger, Name: "test " + h.name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

var testSecret = []byte("the cluster's shared secret")

// newClusterID is a cluster id no other test uses.
func newClusterID(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("t%011x", rand.Uint64()>>20)
}

// forwardOnce calls n.Forward with a deadline of its own.
func forwardOnce(t *testing.T, n *Node, host, op string, body []byte, within time.Duration) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return n.Forward(ctx, host, op, body)
}

// forwardEventually calls until a holder of host takes the call (its
// subscription may not have reached the server yet) and returns the reply.
func forwardEventually(t *testing.T, n *Node, host, op string, body []byte) []byte {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := forwardOnce(t, n, host, op, body, 10*time.Second)
		if err == nil {
			return out
		}
		if !errors.Is(err, devices.ErrNotDelivered) || time.Now().After(deadline) {
			t.Fatalf("forward %s to %s: %v", op, host, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// eventually polls cond until it holds, failing the test after a minute.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within a minute", what)
		}
	}
}

func TestForwardReachesTheHolderBothWays(t *testing.T) {
	url, id := testutil.NATS(t), newClusterID(t)
	a, b := &holder{name: "A"}, &holder{name: "B"}
	a.hold("sim")
	b.hold("gw.gw_01")
	na := startNode(t, url, id, testSecret, a, nil)
	nb := startNode(t, url, id, testSecret, b, nil)

	if got := string(forwardEventually(t, na, "gw.gw_01", "observe_device", []byte(`{"x":1}`))); got != `B observe_device {"x":1}` {
		t.Fatalf("A to B's gateway host: got %q; want B's echo", got)
	}
	if got := string(forwardEventually(t, nb, "sim", "perform_action", []byte("tap"))); got != "A perform_action tap" {
		t.Fatalf("B to A's sim host: got %q; want A's echo", got)
	}
	// The holder runs the call under the caller's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	want, _ := ctx.Deadline()
	if _, err := nb.Forward(ctx, "sim", "power_device", nil); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	got := a.deadlines[len(a.deadlines)-1]
	a.mu.Unlock()
	if !got.Equal(want.Truncate(time.Millisecond)) {
		t.Fatalf("the holder's context ends at %v; want the caller's deadline %v (to the millisecond)", got, want)
	}
	if calls := b.calls(); len(calls) != 1 || calls[0] != `observe_device {"x":1}` {
		t.Fatalf("B served %q; want only A's call", calls)
	}
}

func TestForwardToAHostNobodyHoldsIsNotDelivered(t *testing.T) {
	url, id := testutil.NATS(t), newClusterID(t)
	a := &holder{name: "A"}
	a.hold("sim")
	na := startNode(t, url, id, testSecret, a, nil)
	forwardEventually(t, na, "sim", "observe_device", nil) // the bus works

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := na.Forward(ctx, "gw.nobody", "perform_action", []byte("tap"))
	if !errors.Is(err, devices.ErrNotDelivered) {
		t.Fatalf("got %v; want ErrNotDelivered", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the call waited for its deadline; want the answer that nobody serves the host at once")
	}
	for _, host := range []string{"", "gw.*", "gw.>", "gw..x", "gw x"} {
		if _, err := na.Forward(ctx, host, "observe_device", nil); !errors.Is(err, devices.ErrNotDelivered) {
			t.Errorf("host %q: got %v; want ErrNotDelivered (it cannot be a subject)", host, err)
		}
	}
	// A node that is not connected delivers nothing.
	na.nc.Close()
	if _, err := na.Forward(ctx, "sim", "observe_device", nil); !errors.Is(err, devices.ErrNotDelivered) {
		t.Fatalf("after the connection closed: got %v; want ErrNotDelivered", err)
	}
}

func TestALargeReplyArrivesWholeInParts(t *testing.T) {
	url, id := testutil.NATS(t), newClusterID(t)
	big := make([]byte, 3<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	a := &holder{name: "A", reply: func(context.Context, string, []byte) []byte { return big }}
	a.hold("sim")
	startNode(t, url, id, testSecret, a, nil)
	caller := startNode(t, url, id, testSecret, nil, nil)
	if max := caller.nc.MaxPayload(); int64(len(big)) <= max {
		t.Fatalf("the server takes messages of %d bytes: a %d-byte reply would prove nothing", max, len(big))
	}
	got := forwardEventually(t, caller, "sim", "observe_device", nil)
	if !bytes.Equal(got, big) {
		t.Fatalf("got %d bytes; want the holder's %d bytes, equal", len(got), len(big))
	}

	// A call larger than a message may be is not sent.
	_, err := forwardOnce(t, caller, "sim", "observe_device", big, time.Minute)
	if !errors.Is(err, devices.ErrNotDelivered) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("a %d-byte call: got %v; want ErrNotDelivered saying it is too large", len(big), err)
	}
	if n := len(a.calls()); n != 1 {
		t.Fatalf("the holder served %d calls; want 1", n)
	}
}

func TestTheHolderDropsForgedReplayedAndExpiredCalls(t *testing.T) {
	url, id := testutil.NATS(t), newClusterID(t)
	var logs testutil.SyncBuffer
	a, b := &holder{name: "A"}, &holder{name: "B"}
	a.hold("sim")
	b.hold("gw.gw_01")
	startNode(t, url, id, testSecret, a, &logs)
	startNode(t, url, id, testSecret, b, &logs)
	caller := startNode(t, url, id, testSecret, nil, nil)
	forwardEventually(t, caller, "gw.gw_01", "observe_device", []byte("warm-up"))
	forwardEventually(t, caller, "sim", "observe_device", []byte("warm-up"))

	// Another client of the server, with the subjects but not the secret,
	// which records a genuine call on its way (a plain subscription gets a
	// copy of what the holder's queue subscription gets).
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subj := subject(id, "sim")
	spy, err := nc.SubscribeSync(subj)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := forwardOnce(t, caller, "sim", "perform_action", []byte("genuine"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	genuine, err := spy.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the spy saw no call: %v", err)
	}
	_ = spy.Unsubscribe()
	copyOf := func(m *nats.Msg, subj, reply string) *nats.Msg {
		c := nats.NewMsg(subj)
		c.Reply, c.Data = reply, m.Data
		for k, v := range m.Header {
			c.Header[k] = append([]string(nil), v...)
		}
		return c
	}

	future := time.Now().Add(time.Minute)
	for _, tc := range []struct {
		name string
		// msg is the message sent, answered on inbox.
		msg    func(inbox string) *nats.Msg
		reason string
	}{
		{"signed with another secret", func(inbox string) *nats.Msg {
			return request([]byte("not the secret"), subj, inbox, newCallID(), "perform_action", future, []byte("forged"))
		}, "bad MAC"},
		{"body changed after signing", func(inbox string) *nats.Msg {
			m := request(testSecret, subj, inbox, newCallID(), "perform_action", future, []byte(`{"auth":"someone"}`))
			m.Data = []byte(`{"auth":"admin"}`)
			return m
		}, "bad MAC"},
		{"no MAC", func(inbox string) *nats.Msg {
			m := request(testSecret, subj, inbox, newCallID(), "perform_action", future, []byte("unsigned"))
			m.Header.Del(hdrMAC)
			return m
		}, "bad MAC"},
		{"deadline moved after signing", func(inbox string) *nats.Msg {
			m := request(testSecret, subj, inbox, newCallID(), "perform_action", time.Now().Add(-time.Second), []byte("late"))
			m.Header.Set(hdrDeadline, strconv.FormatInt(future.UnixMilli(), 10))
			return m
		}, "bad MAC"},
		{"past its deadline", func(inbox string) *nats.Msg {
			return request(testSecret, subj, inbox, newCallID(), "perform_action", time.Now().Add(-time.Second), []byte("late"))
		}, "past its deadline"},
		{"another wire version", func(inbox string) *nats.Msg {
			m := request(testSecret, subj, inbox, newCallID(), "perform_action", future, []byte("old"))
			m.Header.Set(hdrVersion, "1")
			return m
		}, "unknown wire version"},
		{"a genuine call replayed as it was", func(string) *nats.Msg {
			return copyOf(genuine, subj, genuine.Reply)
		}, "a call id already seen"},
		{"a genuine call replayed to be answered elsewhere", func(inbox string) *nats.Msg {
			return copyOf(genuine, subj, inbox)
		}, "bad MAC"},
		{"a genuine call replayed to another host", func(string) *nats.Msg {
			return copyOf(genuine, subject(id, "gw.gw_01"), genuine.Reply)
		}, "bad MAC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := strings.Count(logs.String(), "reason=\""+tc.reason)
			inbox := nc.NewInbox()
			sub, err := nc.SubscribeSync(inbox)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := nc.PublishMsg(tc.msg(inbox)); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the holder's refusal", func() bool {
				return strings.Count(logs.String(), "reason=\""+tc.reason) > before
			})
			if m, err := sub.NextMsg(0); !errors.Is(err, nats.ErrTimeout) {
				t.Fatalf("the sender got %v (%v); want no answer", m, err)
			}
		})
	}
	if calls := a.calls(); len(calls) != 2 || calls[1] != "perform_action genuine" {
		t.Fatalf("the holder of sim served %q; want only the genuine call", calls)
	}
	if calls := b.calls(); len(calls) != 1 || calls[0] != "observe_device warm-up" {
		t.Fatalf("the holder of gw.gw_01 served %q; want only the warm-up call", calls)
	}
	if strings.Contains(logs.String(), string(testSecret)) || strings.Contains(logs.String(), genuine.Header.Get(hdrMAC)) {
		t.Fatalf("a refusal logged the secret or a MAC:\n%s", logs.String())
	}

	// A node with another secret gets no answer: its call ends at its
	// deadline, its outcome unknown to it (not "not delivered").
	forger := startNode(t, url, id, []byte("another secret"), nil, nil)
	_, err = forwardOnce(t, forger, "sim", "perform_action", []byte("forged"), time.Second)
	if err == nil || errors.Is(err, devices.ErrNotDelivered) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call signed with another secret: got %v; want no answer by the deadline", err)
	}
}

// A caller takes only the holder's signed answer to its own call: a
// forged reply on its reply subject, or another call's genuine reply
// replayed there, is ignored, and the genuine one is returned.
func TestTheCallerIgnoresRepliesThatAreNotTheHolders(t *testing.T) {
	url, id := testutil.NATS(t), newClusterID(t)
	var logs testutil.SyncBuffer
	release := make(chan struct{})
	a := &holder{name: "A", reply: func(ctx context.Context, op string, body []byte) []byte {
		if string(body) == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return []byte("genuine " + string(body))
	}}
	a.hold("sim")
	startNode(t, url, id, testSecret, a, nil)
	caller := startNode(t, url, id, testSecret, nil, &logs)

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	calls, err := nc.SubscribeSync(subject(id, "sim"))
	if err != nil {
		t.Fatal(err)
	}
	replies, err := nc.SubscribeSync("_INBOX.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// An earlier call's genuine reply, to replay later.
	forwardEventually(t, caller, "sim", "observe_device", []byte("earlier"))
	var earlier *nats.Msg
	for earlier == nil {
		m, err := replies.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("the spy saw no reply: %v", err)
		}
		if m.Header.Get(hdrMAC) != "" {
			earlier = m
		}
	}

	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := caller.Forward(ctx, "sim", "observe_device", []byte("slow"))
		done <- result{out, err}
	}()
	var slow *nats.Msg
	for slow == nil {
		m, err := calls.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("the spy saw no call: %v", err)
		}
		if string(m.Data) == "slow" {
			slow = m
		}
	}
	forged := nats.NewMsg(slow.Reply)
	forged.Data = []byte("forged")
	forged.Header.Set(hdrCall, slow.Header.Get(hdrCall))
	forged.Header.Set(hdrMAC, earlier.Header.Get(hdrMAC))
	replayed := nats.NewMsg(slow.Reply)
	replayed.Data = earlier.Data
	for k, v := range earlier.Header {
		replayed.Header[k] = v
	}
	unsigned := &nats.Msg{Subject: slow.Reply, Data: []byte("unsigned")}
	for _, m := range []*nats.Msg{forged, replayed, unsigned} {
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the caller's three refusals", func() bool {
		return strings.Count(logs.String(), "ignored a reply") >= 3
	})
	close(release)
	r := <-done
	if r.err != nil || string(r.out) != "genuine slow" {
		t.Fatalf("the call answered %q, %v; want the holder's own reply", r.out, r.err)
	}
	for _, reason := range []string{"bad MAC", "not the call waited for"} {
		if !strings.Contains(logs.String(), "reason=\""+reason) {
			t.Errorf("no refusal for %q in the caller's log:\n%s", reason, logs.String())
		}
	}
}

func TestAHolderThatDropsAHostStopsReceivingItsCalls(t *testing.T) {
	url, id := testutil.NATS(t), newClusterID(t)
	a, b := &holder{name: "A"}, &holder{name: "B"}
	a.hold("sim")
	startNode(t, url, id, testSecret, a, nil)
	startNode(t, url, id, testSecret, b, nil)
	caller := startNode(t, url, id, testSecret, nil, nil)
	if got := string(forwardEventually(t, caller, "sim", "op", []byte("1"))); got != "A op 1" {
		t.Fatalf("got %q; want A's answer", got)
	}

	// A lets go: nobody serves the host any more.
	a.hold()
	eventually(t, "A letting go of sim", func() bool {
		_, err := forwardOnce(t, caller, "sim", "op", []byte("probe"), 10*time.Second)
		return errors.Is(err, devices.ErrNotDelivered)
	})
	// B takes it: every call now reaches B, none A.
	b.hold("sim")
	forwardEventually(t, caller, "sim", "op", []byte("first to B"))
	servedByA := len(a.calls())
	for i := range 20 {
		out, err := forwardOnce(t, caller, "sim", "op", fmt.Appendf(nil, "%d", i), 10*time.Second)
		if err != nil || !strings.HasPrefix(string(out), "B ") {
			t.Fatalf("call %d: got %q, %v; want B's answer", i, out, err)
		}
	}
	if n := len(a.calls()); n != servedByA {
		t.Fatalf("A served %d calls after letting go of the host; want none", n-servedByA)
	}
}

func TestAHolderDyingMidCallLeavesTheOutcomeUnknown(t *testing.T) {
	url, id := testutil.NATS(t), newClusterID(t)
	entered, release := make(chan struct{}), make(chan struct{})
	a := &holder{name: "A", reply: func(_ context.Context, _ string, body []byte) []byte {
		if string(body) == "tap" {
			close(entered)
			<-release
		}
		return []byte("ok")
	}}
	a.hold("sim")
	na := startNode(t, url, id, testSecret, a, nil)
	t.Cleanup(func() { close(release) }) // before na closes (cleanups run last first)
	caller := startNode(t, url, id, testSecret, nil, nil)
	forwardEventually(t, caller, "sim", "op", []byte("warm up"))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := caller.Forward(ctx, "sim", "perform_action", []byte("tap"))
		errc <- err
	}()
	select {
	case <-entered:
	case err := <-errc:
		t.Fatalf("the call ended before the holder ran it: %v", err)
	}
	na.nc.Close() // the holder's process is gone, mid-call
	err := <-errc
	if err == nil || errors.Is(err, devices.ErrNotDelivered) {
		t.Fatalf("got %v; want an error that is not ErrNotDelivered: the call was taken", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v; want the wait to end at the caller's deadline", err)
	}
}

func TestTwoClustersOnOneServerDoNotCross(t *testing.T) {
	url := testutil.NATS(t)
	x, y := newClusterID(t), newClusterID(t)
	ax, ay := &holder{name: "AX"}, &holder{name: "AY"}
	ax.hold("sim")
	startNode(t, url, x, testSecret, ax, nil)
	callerX := startNode(t, url, x, testSecret, nil, nil)
	callerY := startNode(t, url, y, testSecret, nil, nil)
	forwardEventually(t, callerX, "sim", "op", []byte("x"))

	if _, err := forwardOnce(t, callerY, "sim", "op", []byte("y"), time.Minute); !errors.Is(err, devices.ErrNotDelivered) {
		t.Fatalf("cluster %s has no holder of sim: got %v; want ErrNotDelivered", y, err)
	}
	ay.hold("sim")
	startNode(t, url, y, testSecret, ay, nil)
	if got := string(forwardEventually(t, callerY, "sim", "op", []byte("y"))); got != "AY op y" {
		t.Fatalf("got %q; want cluster %s's holder", got, y)
	}
	if got := string(forwardEventually(t, callerX, "sim", "op", []byte("x"))); got != "AX op x" {
		t.Fatalf("got %q; want cluster %s's holder", got, x)
	}
	for _, c := range ax.calls() {
		if strings.HasSuffix(c, " y") {
			t.Fatalf("cluster %s's holder served %q, a call of cluster %s", x, c, y)
		}
	}
	for _, c := range ay.calls() {
		if strings.HasSuffix(c, " x") {
			t.Fatalf("cluster %s's holder served %q, a call of cluster %s", y, c, x)
		}
	}
}

func TestCloseLetsGoFirstAndFinishesCallsInProgress(t *testing.T) {
	url, id := testutil.NATS(t), newClusterID(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a := &holder{name: "A", reply: func(_ context.Context, _ string, body []byte) []byte {
		if string(body) == "slow" {
			once.Do(func() { close(entered) })
			<-release
		}
		return append([]byte("done "), body...)
	}}
	a.hold("sim")
	na := startNode(t, url, id, testSecret, a, nil)
	caller := startNode(t, url, id, testSecret, nil, nil)
	forwardEventually(t, caller, "sim", "op", []byte("quick"))

	type result struct {
		out []byte
		err error
	}
	slow := make(chan result, 1)
	go func() {
		out, err := forwardOnce(t, caller, "sim", "op", []byte("slow"), time.Minute)
		slow <- result{out, err}
	}()
	<-entered
	closed := make(chan struct{})
	go func() {
		na.Close()
		close(closed)
	}()
	// The closing holder lets go of the host: calls that still reached it
	// are answered, and soon none reaches it.
	eventually(t, "the closing holder letting go of sim", func() bool {
		out, err := forwardOnce(t, caller, "sim", "op", []byte("after close"), 10*time.Second)
		if err != nil && !errors.Is(err, devices.ErrNotDelivered) || err == nil && string(out) != "done after close" {
			t.Fatalf("a call sent as the holder closes: got %q, %v; want its answer or ErrNotDelivered", out, err)
		}
		return errors.Is(err, devices.ErrNotDelivered)
	})
	select {
	case <-closed:
		t.Fatal("Close returned while a call was in progress")
	default:
	}
	// …and the one in progress gets its answer.
	close(release)
	r := <-slow
	if r.err != nil || string(r.out) != "done slow" {
		t.Fatalf("the call in progress at Close: got %q, %v; want its answer", r.out, r.err)
	}
	<-closed
}

// A call the node is forwarding when it closes ends then, with an error,
// not at its deadline: its answer can no longer come.
func TestACallForwardedWhenTheCallerClosesEndsThen(t *testing.T) {
	url, id := testutil.NATS(t), newClusterID(t)
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	var once sync.Once
	a := &holder{name: "A", reply: func(_ context.Context, _ string, body []byte) []byte {
		if string(body) == "slow" {
			once.Do(func() { close(entered) })
			<-release
		}
		return body
	}}
	a.hold("sim")
	startNode(t, url, id, testSecret, a, nil)
	caller := startNode(t, url, id, testSecret, nil, nil)
	forwardEventually(t, caller, "sim", "op", []byte("quick"))
	failed := make(chan error, 1)
	go func() {
		_, err := forwardOnce(t, caller, "sim", "op", []byte("slow"), time.Hour)
		failed <- err
	}()
	<-entered
	caller.Close()
	select {
	case err := <-failed:
		if !errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, devices.ErrNotDelivered) {
			t.Fatalf("the call in flight at the caller's Close: %v; want the connection closed (it may have run)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call in flight at the caller's Close still waits for its answer")
	}
}

func TestStartRefusesAnIncompleteConfig(t *testing.T) {
	h := &holder{name: "A"}
	ok := Config{URL: "nats://127.0.0.1:1", ClusterID: "abc123", Secret: testSecret, Serve: h.Serve, Held: h.Held}
	for name, change := range map[string]func(*Config){
		"no URL":            func(c *Config) { c.URL = "" },
		"no cluster id":     func(c *Config) { c.ClusterID = "" },
		"a dotted id":       func(c *Config) { c.ClusterID = "a.b" },
		"a wildcard id":     func(c *Config) { c.ClusterID = "*" },
		"no secret":         func(c *Config) { c.Secret = nil },
		"no Serve":          func(c *Config) { c.Serve = nil },
		"no Held":           func(c *Config) { c.Held = nil },
		"an unparsable URL": func(c *Config) { c.URL = "nats://[::1" },
	} {
		cfg := ok
		change(&cfg)
		if n, err := Start(context.Background(), cfg); err == nil {
			n.Close()
			t.Errorf("%s: started; want an error", name)
		}
	}
}

func TestClusterIDIsWrittenOnceAndShared(t *testing.T) {
	pool := testutil.FreshPool(t)
	ctx := testutil.Context(t)
	ids := make([]string, 8)
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() { ids[i], errs[i] = ClusterID(ctx, pool) })
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("instances read cluster ids %q; want one", ids)
		}
	}
	if len(ids[0]) != 12 || strings.Trim(ids[0], "0123456789abcdef") != "" {
		t.Fatalf("cluster id %q; want 12 hex characters", ids[0])
	}
	if again, err := ClusterID(ctx, pool); err != nil || again != ids[0] {
		t.Fatalf("a later start reads %q, %v; want %q", again, err, ids[0])
	}
	if other, err := ClusterID(ctx, testutil.FreshPool(t)); err != nil || other == ids[0] {
		t.Fatalf("another database's cluster id: %q, %v; want one of its own", other, err)
	}
}

func TestClusterSecretIsWrittenOnceAndNeedsThePepper(t *testing.T) {
	pool := testutil.FreshPool(t)
	ctx := testutil.Context(t)
	pepper := []byte("the server pepper")
	keys := make([][]byte, 8)
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() { keys[i], errs[i] = ClusterSecret(ctx, pool, pepper) })
	}
	wg.Wait()
	for i := range keys {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !bytes.Equal(keys[i], keys[0]) || len(keys[i]) != 32 {
			t.Fatalf("instances derived keys %x; want one of 32 bytes", keys)
		}
	}
	var stored []byte
	if err := pool.QueryRow(ctx, `SELECT secret FROM cluster_secret`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(stored, keys[0]) {
		t.Fatal("the database holds the key itself; want only its random half")
	}
	if other, err := ClusterSecret(ctx, pool, []byte("another pepper")); err != nil || bytes.Equal(other, keys[0]) {
		t.Fatalf("another pepper derives %x, %v; want another key", other, err)
	}
	if other, err := ClusterSecret(ctx, testutil.FreshPool(t), pepper); err != nil || bytes.Equal(other, keys[0]) {
		t.Fatalf("another database derives %x, %v; want another key", other, err)
	}
}
