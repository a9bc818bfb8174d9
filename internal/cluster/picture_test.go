package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"phonefleet/internal/devices"
	"phonefleet/testutil"
)

// picture is a result holding a picture, as an observation does.
type picture struct {
	Hash     string
	PNG      []byte
	Snapshot json.RawMessage
}

// A picture forwarded from its device's holder arrives byte for byte,
// and travels on the bus as its bytes: no message carries its base64,
// and the reply's messages together are the picture and a few hundred
// bytes more (base64 alone would add a third). The result's JSON field
// beside it arrives as sent.
func TestAForwardedPictureTravelsAsItsBytes(t *testing.T) {
	url, id := testutil.NATS(t), newClusterID(t)
	pic := make([]byte, 1536<<10) // larger than one message: sent in parts
	r := rand.New(rand.NewPCG(3, 4))
	for i := range pic {
		pic[i] = byte(r.Uint32())
	}
	snapshot := json.RawMessage(`{"nodes":[{"text":"OK","bounds":[0,0,10,10]}]}`)
	calls := devices.Calls{"observe_device": func(context.Context, json.RawMessage) (any, error) {
		return picture{Hash: "h1", PNG: pic, Snapshot: snapshot}, nil
	}}
	a := &holder{name: "A", reply: calls.Serve}
	a.hold("sim")
	startNode(t, url, id, testSecret, a, nil)
	caller := startNode(t, url, id, testSecret, nil, nil)

	// A client of the bus hearing every message of the deployment and
	// every reply.
	spy, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	// The spy's connection puts each message it hears in ch before it
	// reads what comes after it, so a round trip of that connection
	// (Flush) follows every message sent before.
	ch := make(chan *nats.Msg, 1024)
	for _, subj := range []string{"pf." + id + ".>", "_INBOX.>"} {
		if _, err := spy.ChanSubscribe(subj, ch); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	drain := func() []*nats.Msg {
		if err := spy.Flush(); err != nil {
			t.Fatal(err)
		}
		var heard []*nats.Msg
		for {
			select {
			case m := <-ch:
				heard = append(heard, m)
			default:
				return heard
			}
		}
	}

	rt := devices.New(devices.Config{Transport: caller})
	forwardEventually(t, caller, "sim", "observe_device", []byte(`{"meta":{},"cmd":{}}`)) // the holder listens
	drain()
	var got picture
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rt.Call(ctx, "sim", "observe_device", struct{}{}, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.PNG, pic) || got.Hash != "h1" || !bytes.Equal(got.Snapshot, snapshot) {
		t.Fatalf("got a %d-byte picture (equal: %v), hash %q, snapshot %s; want the holder's %d bytes, h1, %s",
			len(got.PNG), bytes.Equal(got.PNG, pic), got.Hash, got.Snapshot, len(pic), snapshot)
	}

	// Every message of the call has reached the spy once the caller has
	// its answer and the spy's connection has made a round trip.
	heard := drain()
	b64 := []byte(base64.StdEncoding.EncodeToString(pic[:3<<10]))
	replyBytes := 0
	for _, m := range heard {
		if bytes.Contains(m.Data, b64) {
			t.Fatalf("a message on %s carries the picture in base64", m.Subject)
		}
		if m.Header.Get(hdrCall) != "" && m.Header.Get(hdrOp) == "" { // a reply message
			replyBytes += len(m.Data)
		}
	}
	if replyBytes < len(pic) || replyBytes > len(pic)+512 {
		t.Fatalf("the reply took %d bytes on the bus for a %d-byte picture; want the picture and at most 512 bytes more", replyBytes, len(pic))
	}
}
