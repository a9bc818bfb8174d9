package tunnel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"phonefleet/domain"
	"phonefleet/internal/tunnel"
)

// testCtx bounds a test: nothing it waits for may take longer.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// pair connects a client peer to a server peer through a real HTTP server
// and returns both.
func pair(t *testing.T, serverH, clientH tunnel.Handler) (client, server *tunnel.Peer) {
	t.Helper()
	peers := make(chan *tunnel.Peer, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != tunnel.Path || r.Header.Get("Authorization") != "Bearer pfg_good" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		p, err := tunnel.Accept(w, r, serverH, tunnel.Options{Logger: quiet()})
		if err != nil {
			t.Errorf("Accept: %v", err)
			return
		}
		peers <- p
	}))
	t.Cleanup(srv.Close)
	ctx := testCtx(t)
	c, err := tunnel.Dial(ctx, srv.URL, "pfg_good", clientH, tunnel.Options{Logger: quiet()})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	select {
	case server = <-peers:
	case <-ctx.Done():
		t.Fatal("the server never accepted")
	}
	t.Cleanup(func() {
		c.Close(websocket.StatusNormalClosure, "")
		server.Close(websocket.StatusNormalClosure, "")
	})
	return c, server
}

type echoParams struct {
	Text string `json:"text"`
}

// echo answers "echo" with its params and knows no other method.
func echo(_ context.Context, method string, params json.RawMessage) (any, error) {
	if method != "echo" {
		return nil, tunnel.ErrUnknownMethod
	}
	var p echoParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, domain.Errorf(domain.CodeInvalidArgument, "bad params")
	}
	return p, nil
}

func TestCallBothWays(t *testing.T) {
	// The server answers "relay" by calling the client back on the same
	// connection, found through the handler's context.
	serverH := func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		if method != "relay" {
			return echo(ctx, method, params)
		}
		var got echoParams
		if err := tunnel.PeerFrom(ctx).Call(ctx, "echo", json.RawMessage(params), &got); err != nil {
			return nil, err
		}
		return echoParams{Text: "relayed " + got.Text}, nil
	}
	client, server := pair(t, serverH, echo)
	ctx := testCtx(t)

	var got echoParams
	if err := client.Call(ctx, "echo", echoParams{Text: "to the server"}, &got); err != nil || got.Text != "to the server" {
		t.Fatalf("client → server: got %+v, %v; want the text back", got, err)
	}
	if err := server.Call(ctx, "echo", echoParams{Text: "to the client"}, &got); err != nil || got.Text != "to the client" {
		t.Fatalf("server → client: got %+v, %v; want the text back", got, err)
	}
	if err := client.Call(ctx, "relay", echoParams{Text: "hi"}, &got); err != nil || got.Text != "relayed hi" {
		t.Fatalf("relay: got %+v, %v; want %q", got, err, "relayed hi")
	}
	if err := client.Call(ctx, "echo", echoParams{Text: "dropped"}, nil); err != nil {
		t.Fatalf("a call with a nil result: %v", err)
	}
}

func TestErrorsRoundTrip(t *testing.T) {
	refused := domain.Errorf(domain.CodeInvalidArgument, "no field has the focus").
		With("reason", "no_focused_field").With("retryAfterMs", 1500).WithRetryable(false)
	handler := func(_ context.Context, method string, _ json.RawMessage) (any, error) {
		switch method {
		case "refuse":
			return nil, refused
		case "wrapped":
			return nil, fmt.Errorf("adapter: %w", domain.Errorf(domain.CodeDeviceDisconnected, "the phone dropped off").WithRetryable(true))
		case "plain":
			return nil, errors.New("secret internal detail")
		case "panic":
			panic("boom")
		}
		return nil, tunnel.ErrUnknownMethod
	}
	client, _ := pair(t, handler, nil)
	ctx := testCtx(t)
	tru, fls := true, false
	tests := []struct {
		method    string
		code      domain.Code
		message   string
		retryable *bool
		extra     map[string]any
	}{
		{method: "refuse", code: domain.CodeInvalidArgument, message: "no field has the focus", retryable: &fls,
			extra: map[string]any{"reason": "no_focused_field", "retryAfterMs": float64(1500)}},
		{method: "wrapped", code: domain.CodeDeviceDisconnected, message: "the phone dropped off", retryable: &tru},
		{method: "plain", code: domain.CodeInternal, message: "internal error"},
		{method: "panic", code: domain.CodeInternal, message: "internal error"},
		{method: "no.such.method", code: domain.CodeServiceUnavailable, message: "the other end of the tunnel does not know no.such.method",
			extra: map[string]any{"method": "no.such.method"}},
	}
	for _, tc := range tests {
		t.Run(tc.method, func(t *testing.T) {
			err := client.Call(ctx, tc.method, nil, nil)
			var de *domain.Error
			if !errors.As(err, &de) {
				t.Fatalf("got %v (%T); want a *domain.Error", err, err)
			}
			if de.Code != tc.code || de.Message != tc.message {
				t.Errorf("got %s %q; want %s %q", de.Code, de.Message, tc.code, tc.message)
			}
			if (de.Retryable == nil) != (tc.retryable == nil) || de.Retryable != nil && *de.Retryable != *tc.retryable {
				t.Errorf("retryable: got %v; want %v", de.Retryable, tc.retryable)
			}
			if fmt.Sprint(de.Extra) != fmt.Sprint(tc.extra) {
				t.Errorf("extra: got %v; want %v", de.Extra, tc.extra)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("the error %q leaks the handler's internal error", err)
			}
		})
	}
}

func TestNotSentAfterClose(t *testing.T) {
	client, server := pair(t, echo, echo)
	client.Close(websocket.StatusNormalClosure, "done")
	select {
	case <-client.Done():
	default:
		t.Fatal("Done is not closed after Close returned")
	}
	err := client.Call(testCtx(t), "echo", echoParams{Text: "late"}, nil)
	if !errors.Is(err, tunnel.ErrNotSent) || errors.Is(err, tunnel.ErrNoAnswer) {
		t.Fatalf("got %v; want ErrNotSent only", err)
	}
	if err := client.Notify(testCtx(t), "echo", nil); !errors.Is(err, tunnel.ErrNotSent) {
		t.Fatalf("Notify: got %v; want ErrNotSent", err)
	}
	// The other side sees the close code.
	<-server.Done()
	if got := websocket.CloseStatus(server.Err()); got != websocket.StatusNormalClosure {
		t.Errorf("the server saw close status %d (%v); want 1000", got, server.Err())
	}
	client.Close(websocket.StatusNormalClosure, "again") // idempotent
}

func TestCallTooLargeIsNotSent(t *testing.T) {
	client, _ := pair(t, echo, nil)
	err := client.Call(testCtx(t), "echo", echoParams{Text: strings.Repeat("x", tunnel.MaxMessage)}, nil)
	if !errors.Is(err, tunnel.ErrNotSent) {
		t.Fatalf("got %v; want ErrNotSent", err)
	}
	var got echoParams
	if err := client.Call(testCtx(t), "echo", echoParams{Text: "still up"}, &got); err != nil || got.Text != "still up" {
		t.Fatalf("after the refused call: got %+v, %v; want the connection still up", got, err)
	}
}

func TestNoAnswerWhenTheOtherSideEndsMidCall(t *testing.T) {
	t.Run("the server closes", func(t *testing.T) {
		started := make(chan struct{})
		block := func(ctx context.Context, _ string, _ json.RawMessage) (any, error) {
			close(started)
			<-ctx.Done() // until the connection ends
			return nil, nil
		}
		client, server := pair(t, block, nil)
		ctx := testCtx(t)
		go func() {
			select {
			case <-started:
				server.Close(websocket.StatusGoingAway, "going away")
			case <-ctx.Done():
			}
		}()
		err := client.Call(ctx, "block", nil, nil)
		if !errors.Is(err, tunnel.ErrNoAnswer) || errors.Is(err, tunnel.ErrNotSent) {
			t.Fatalf("got %v; want ErrNoAnswer only", err)
		}
		<-client.Done()
		if got := websocket.CloseStatus(client.Err()); got != websocket.StatusGoingAway {
			t.Errorf("the client saw close status %d (%v); want 1001", got, client.Err())
		}
	})
	t.Run("this side closes", func(t *testing.T) {
		started := make(chan struct{})
		block := func(ctx context.Context, _ string, _ json.RawMessage) (any, error) {
			close(started)
			<-ctx.Done()
			return nil, nil
		}
		client, _ := pair(t, block, nil)
		ctx := testCtx(t)
		go func() {
			select {
			case <-started:
				client.Close(websocket.StatusGoingAway, "shutting down")
			case <-ctx.Done():
			}
		}()
		err := client.Call(ctx, "block", nil, nil)
		if !errors.Is(err, tunnel.ErrNoAnswer) || errors.Is(err, tunnel.ErrNotSent) {
			t.Fatalf("got %v; want ErrNoAnswer only", err)
		}
	})
	t.Run("the server drops the connection", func(t *testing.T) {
		// A bare WebSocket server that reads the request and drops the
		// TCP connection without a close handshake, as a killed process.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{tunnel.Subprotocol}})
			if err != nil {
				return
			}
			c.SetReadLimit(tunnel.MaxMessage)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _, _ = c.Read(ctx)
			_ = c.CloseNow()
		}))
		defer srv.Close()
		ctx := testCtx(t)
		client, err := tunnel.Dial(ctx, srv.URL, "pfg_any", nil, tunnel.Options{Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		err = client.Call(ctx, "act", nil, nil)
		if !errors.Is(err, tunnel.ErrNoAnswer) || errors.Is(err, tunnel.ErrNotSent) {
			t.Fatalf("got %v; want ErrNoAnswer only", err)
		}
	})
	t.Run("the caller's context ends", func(t *testing.T) {
		started := make(chan struct{})
		block := func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			if method != "block" {
				return echo(ctx, method, params)
			}
			close(started)
			<-ctx.Done()
			return nil, nil
		}
		client, _ := pair(t, block, nil)
		ctx, cancel := context.WithCancel(testCtx(t))
		go func() {
			<-started
			cancel()
		}()
		err := client.Call(ctx, "block", nil, nil)
		if !errors.Is(err, tunnel.ErrNoAnswer) || !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v; want ErrNoAnswer wrapping context.Canceled", err)
		}
		// The connection is still good.
		var got echoParams
		if err := client.Call(testCtx(t), "echo", echoParams{Text: "after"}, &got); err != nil || got.Text != "after" {
			t.Fatalf("a second call: got %+v, %v", got, err)
		}
	})
}

func TestRefusedCredential(t *testing.T) {
	for _, tc := range []struct {
		status  int
		refused bool
	}{{http.StatusUnauthorized, true}, {http.StatusServiceUnavailable, false}, {http.StatusForbidden, false}} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "no", tc.status)
			}))
			defer srv.Close()
			_, err := tunnel.Dial(testCtx(t), srv.URL, "pfg_revoked", nil, tunnel.Options{})
			if err == nil || errors.Is(err, tunnel.ErrRefused) != tc.refused {
				t.Fatalf("got %v; want refused=%v", err, tc.refused)
			}
			if strings.Contains(err.Error(), "pfg_revoked") {
				t.Errorf("the error %q shows the credential", err)
			}
		})
	}
}

func TestLargeResult(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16) // 5 MiB
	handler := func(context.Context, string, json.RawMessage) (any, error) {
		return tunnel.Observation{ScreenHash: "h", PNG: big}, nil
	}
	client, _ := pair(t, handler, nil)
	var got domain.Observation
	if err := client.Call(testCtx(t), "device.observe", nil, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.PNG, big) || got.ScreenHash != "h" {
		t.Fatalf("got %d bytes, hash %q; want the 5 MiB back", len(got.PNG), got.ScreenHash)
	}
}

func TestObservationKeepsNilFieldsNil(t *testing.T) {
	o := domain.Observation{ScreenHash: "abc", Width: 1080, Height: 2400, ScreenOn: true, Replay: []byte(`{"model":"Pixel7"}`)}
	b, err := json.Marshal(tunnel.Observation(o))
	if err != nil {
		t.Fatal(err)
	}
	var got domain.Observation
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Snapshot != nil || got.PNG != nil || got.Marks != nil {
		t.Errorf("got Snapshot %q, PNG %v, Marks %v; want them nil", got.Snapshot, got.PNG, got.Marks)
	}
	if got.ScreenHash != o.ScreenHash || got.Width != o.Width || !got.ScreenOn || string(got.Replay) != string(o.Replay) {
		t.Errorf("got %+v; want %+v", got, o)
	}
}

func TestConcurrentCalls(t *testing.T) {
	// Each request waits until all n have arrived: handled one at a
	// time, they never would.
	const n = 20
	var arrived sync.WaitGroup
	arrived.Add(2 * n)
	barrier := func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		arrived.Done()
		arrived.Wait()
		return echo(ctx, method, params)
	}
	client, server := pair(t, barrier, barrier)
	ctx := testCtx(t)
	errs := make(chan error, 2*n)
	for i := range n {
		for _, p := range []*tunnel.Peer{client, server} {
			go func() {
				var got echoParams
				want := fmt.Sprintf("call %d", i)
				err := p.Call(ctx, "echo", echoParams{Text: want}, &got)
				if err == nil && got.Text != want {
					err = fmt.Errorf("got %q; want %q", got.Text, want)
				}
				errs <- err
			}()
		}
	}
	for range 2 * n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestNotificationsArriveInOrder(t *testing.T) {
	const n = 200
	var mu sync.Mutex
	var got []int
	handler := func(_ context.Context, method string, params json.RawMessage) (any, error) {
		var i int
		if err := json.Unmarshal(params, &i); err != nil {
			return nil, err
		}
		mu.Lock()
		got = append(got, i)
		mu.Unlock()
		return nil, nil
	}
	client, _ := pair(t, handler, nil)
	ctx := testCtx(t)
	for i := range n {
		if err := client.Notify(ctx, "count", i); err != nil {
			t.Fatal(err)
		}
	}
	for {
		mu.Lock()
		done := len(got) == n
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("got %d notifications; want %d", len(got), n)
		case <-time.After(5 * time.Millisecond):
		}
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("notification %d carried %d; want them in order", i, v)
		}
	}
}

func TestHeartbeatClosesADeadPeer(t *testing.T) {
	// A bare WebSocket server that never reads: it answers no ping.
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{tunnel.Subprotocol}})
		if err != nil {
			return
		}
		<-release
		_ = c.CloseNow()
	}))
	defer srv.Close()
	defer close(release)
	ctx := testCtx(t)
	client, err := tunnel.Dial(ctx, srv.URL, "pfg_any", nil,
		tunnel.Options{PingInterval: 20 * time.Millisecond, PingTimeout: 20 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	// A call in flight when the heartbeat gives up gets no answer.
	err = client.Call(ctx, "act", nil, nil)
	if !errors.Is(err, tunnel.ErrNoAnswer) || ctx.Err() != nil {
		t.Fatalf("got %v; want ErrNoAnswer from the heartbeat closing the connection", err)
	}
	select {
	case <-client.Done():
	case <-ctx.Done():
		t.Fatal("the connection did not end")
	}
	if !strings.Contains(client.Err().Error(), "ping") {
		t.Errorf("Err: got %v; want it to name the unanswered pings", client.Err())
	}
}

func TestHeartbeatKeepsALiveConnection(t *testing.T) {
	// Fast heartbeats on both ends, and a large message written in
	// between: pings and pongs travel between its frames.
	big := strings.Repeat("y", 2<<20)
	fast := tunnel.Options{PingInterval: 5 * time.Millisecond, PingTimeout: time.Second, Logger: quiet()}
	peers := make(chan *tunnel.Peer, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := tunnel.Accept(w, r, echo, fast)
		if err == nil {
			peers <- p
		}
	}))
	defer srv.Close()
	ctx := testCtx(t)
	client, err := tunnel.Dial(ctx, srv.URL, "pfg_any", echo, fast)
	if err != nil {
		t.Fatal(err)
	}
	server := <-peers
	defer server.Close(websocket.StatusNormalClosure, "")
	defer client.Close(websocket.StatusNormalClosure, "")
	for range 3 {
		var got echoParams
		if err := client.Call(ctx, "echo", echoParams{Text: big}, &got); err != nil || len(got.Text) != len(big) {
			t.Fatalf("got %d bytes, %v; want the message back", len(got.Text), err)
		}
	}
	select {
	case <-client.Done():
		t.Fatalf("the connection ended: %v", client.Err())
	default:
	}
}

// unwrapper hides the http.Hijacker of the writer it wraps behind Unwrap,
// as middleware that records the status does.
type unwrapper struct {
	w http.ResponseWriter
}

func (u *unwrapper) Header() http.Header         { return u.w.Header() }
func (u *unwrapper) Write(b []byte) (int, error) { return u.w.Write(b) }
func (u *unwrapper) WriteHeader(code int)        { u.w.WriteHeader(code) }
func (u *unwrapper) Unwrap() http.ResponseWriter { return u.w }

func TestAcceptBehindAWrapper(t *testing.T) {
	peers := make(chan *tunnel.Peer, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := any(&unwrapper{w}).(http.Hijacker); ok {
			t.Error("the wrapper must not be a Hijacker itself")
		}
		p, err := tunnel.Accept(&unwrapper{w}, r, echo, tunnel.Options{Logger: quiet()})
		if err != nil {
			t.Errorf("Accept: %v", err)
			return
		}
		peers <- p
	}))
	defer srv.Close()
	ctx := testCtx(t)
	client, err := tunnel.Dial(ctx, srv.URL, "pfg_any", nil, tunnel.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(websocket.StatusNormalClosure, "")
	defer (<-peers).Close(websocket.StatusNormalClosure, "")
	var got echoParams
	if err := client.Call(ctx, "echo", echoParams{Text: "through"}, &got); err != nil || got.Text != "through" {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestAcceptOutlivesTheServerTimeouts(t *testing.T) {
	// The write deadline has passed before the handler runs: a tunnel
	// that kept it could not even answer the upgrade.
	peers := make(chan *tunnel.Peer, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := tunnel.Accept(&unwrapper{w}, r, echo, tunnel.Options{Logger: quiet()})
		if err != nil {
			t.Errorf("Accept: %v", err)
			return
		}
		peers <- p
	}))
	srv.Config.WriteTimeout = time.Nanosecond
	srv.Start()
	defer srv.Close()
	ctx := testCtx(t)
	client, err := tunnel.Dial(ctx, srv.URL, "pfg_any", echo, tunnel.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(websocket.StatusNormalClosure, "")
	server := <-peers
	defer server.Close(websocket.StatusNormalClosure, "")
	var got echoParams
	if err := server.Call(ctx, "echo", echoParams{Text: "late"}, &got); err != nil || got.Text != "late" {
		t.Fatalf("got %+v, %v; want the server still writing", got, err)
	}
}

func TestAcceptRequiresTheSubprotocol(t *testing.T) {
	accepted := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := tunnel.Accept(w, r, echo, tunnel.Options{Logger: quiet()})
		accepted <- err
	}))
	defer srv.Close()
	ctx := testCtx(t)
	c, _, err := websocket.Dial(ctx, srv.URL, nil) // no subprotocol
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	_, _, err = c.Read(ctx)
	if got := websocket.CloseStatus(err); got != websocket.StatusProtocolError {
		t.Fatalf("the client saw %v; want close status 1002", err)
	}
	if err := <-accepted; err == nil {
		t.Fatal("Accept took a client without the subprotocol")
	}
}

func TestServeClosesWhenItsContextEnds(t *testing.T) {
	client, server := pair(t, echo, echo)
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	if err := client.Serve(ctx); err == nil {
		t.Fatal("Serve returned no reason")
	}
	<-server.Done()
	if got := websocket.CloseStatus(server.Err()); got != websocket.StatusGoingAway {
		t.Errorf("the server saw %v; want close status 1001", server.Err())
	}
}
