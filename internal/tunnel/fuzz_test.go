package tunnel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"

	"phonefleet/internal/tunnel"
)

// FuzzPeerReadsAnything: whatever text message arrives on a tunnel — not
// JSON, JSON-RPC of the wrong shape, answers to nothing, requests for
// unknown methods — the peer neither panics nor stops answering: a
// proper call made right after it still gets its answer.
func FuzzPeerReadsAnything(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"text":"hi"}}`,
		`{"jsonrpc":"2.0","method":"note","params":[1,2]}`,
		`{"jsonrpc":"2.0","id":"x","result":{}}`,
		`{"jsonrpc":"2.0","id":99,"error":{"code":-32000,"message":"m","data":{"code":"device_busy","extra":{"a":1}}}}`,
		`{"jsonrpc":"1.0","id":1,"method":"echo"}`,
		`{"id":null}`, `[]`, `null`, `{`, "\x00\xff", `{"jsonrpc":"2.0","id":1e400,"method":"echo"}`,
	} {
		f.Add([]byte(seed))
	}
	peers := make(chan *tunnel.Peer, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := tunnel.Accept(w, r, echo, tunnel.Options{Logger: quiet()})
		if err == nil {
			peers <- p
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The raw side writes the fuzzed messages; a peer on the other end
	// must survive them.
	raw, _, err := websocket.Dial(ctx, "ws"+srv.URL[len("http"):]+tunnel.Path, &websocket.DialOptions{Subprotocols: []string{tunnel.Subprotocol}})
	if err != nil {
		f.Fatal(err)
	}
	defer raw.CloseNow()
	raw.SetReadLimit(tunnel.MaxMessage)
	server := <-peers
	defer server.Close(websocket.StatusNormalClosure, "")
	seq := 0
	f.Fuzz(func(t *testing.T, msg []byte) {
		if err := raw.Write(ctx, websocket.MessageText, msg); err != nil {
			t.Fatalf("the peer dropped the connection after %q: %v", msg, err)
		}
		// A proper request right after: its answer must come (the peer may
		// answer the fuzzed message first, or not at all).
		seq++
		id := fmt.Sprintf("%d", 1_000_000+seq)
		if err := raw.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":`+id+`,"method":"echo","params":{"text":"still here"}}`)); err != nil {
			t.Fatalf("after %q: %v", msg, err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		for {
			_, data, err := raw.Read(rctx)
			if err != nil {
				t.Fatalf("after %q the peer never answered a proper request: %v", msg, err)
			}
			var m struct {
				ID     json.RawMessage
				Result echoParams
			}
			if json.Unmarshal(data, &m) == nil && string(m.ID) == id {
				if m.Result.Text != "still here" {
					t.Fatalf("after %q the answer was %s", msg, data)
				}
				break
			}
		}
		select {
		case <-server.Done():
			t.Fatalf("the peer ended after %q: %v", msg, server.Err())
		default:
		}
	})
}
