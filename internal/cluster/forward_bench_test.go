package cluster

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"phonefleet/internal/devices"
	"phonefleet/testutil"
)

// BenchmarkForwardedCall times a device call through the runtime to the
// holder over a real NATS server and back: a tap-sized answer, and an
// observation carrying a 300 KiB picture and a UI tree.
func BenchmarkForwardedCall(b *testing.B) {
	pic := make([]byte, 300<<10)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range pic {
		pic[i] = byte(r.Uint32())
	}
	tree := json.RawMessage(`{"nodes":[{"text":"OK","bounds":[0,0,10,10]}]}`)
	type receipt struct {
		ID, DeviceID, Status string
		Seq                  int
	}
	calls := devices.Calls{
		"perform_action": func(context.Context, json.RawMessage) (any, error) {
			return receipt{ID: "rcp_1", DeviceID: "dev_1", Status: "committed", Seq: 7}, nil
		},
		"observe_device": func(context.Context, json.RawMessage) (any, error) {
			return picture{Hash: "h", PNG: pic, Snapshot: tree}, nil
		},
	}
	url, id := testutil.NATS(b), newClusterID(b)
	a := &holder{name: "A", reply: calls.Serve}
	a.hold("sim")
	startNode(b, url, id, testSecret, a, nil)
	caller := startNode(b, url, id, testSecret, nil, nil)
	rt := devices.New(devices.Config{Transport: caller})
	ctx := context.Background()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) { // the holder listens
		var rc receipt
		if err := rt.Call(ctx, "sim", "perform_action", struct{}{}, &rc); err == nil {
			break
		} else if time.Now().After(deadline) {
			b.Fatal(err)
		}
	}
	b.Run("tap", func(b *testing.B) {
		for b.Loop() {
			var rc receipt
			if err := rt.Call(ctx, "sim", "perform_action", map[string]any{"x": 10, "y": 20}, &rc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("picture", func(b *testing.B) {
		for b.Loop() {
			var p picture
			if err := rt.Call(ctx, "sim", "observe_device", map[string]any{"image": true}, &p); err != nil || len(p.PNG) != len(pic) {
				b.Fatal(len(p.PNG), err)
			}
		}
	})
}
