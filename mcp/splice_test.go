package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/domain"
)

// TestSplicedResultIsTheSameBytes: a screen's result written through the
// splice writer (its parts in place of their tokens) is byte for byte the
// JSON-RPC response mcp-go writes of the same result built inline, however
// the transport cuts its writes, and the result the transport marshals
// holds tokens, not the picture or the JSON.
func TestSplicedResultIsTheSameBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	picture := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	on := true
	sc := screen{DeviceID: "dev_0123", FrameID: "frm_4567", ScreenHash: "abc", CapturedAt: time.Date(2026, 11, 29, 1, 2, 3, 4, time.UTC),
		Width: 1080, Height: 2400, ScreenOn: &on, App: "com.example", ElementsOmitted: 3,
		Marks: []domain.Mark{{N: 1, Ref: "e1", Bounds: [4]int{1, 2, 3, 4}}}}
	for i, text := range []string{`plain`, `"quoted" \back\slash\`, `<b>&amp;</b>`, "line\nbreak\ttab\x01", "é ü 漢字 😀",
		"\u2028\u2029", "bad \xff\xfe utf-8", `\"\\"`, "pfsplice"} {
		sc.Elements = append(sc.Elements, element{Ref: "e" + string(rune('a'+i)), Text: text, Desc: strings.Repeat(text, 3),
			Bounds: [4]int{i, i, i + 10, i + 10}, Clickable: i%2 == 0})
	}
	marker := newSpliceMarker()
	for _, c := range []struct {
		name string
		data []byte
		mime string
		sc   screen
	}{
		{"elements, no picture", nil, "", sc},
		{"picture, small", picture(100), "image/png", screen{DeviceID: "dev_1", Width: 10, Height: 10}},
		{"picture of chunks and a padded end", picture(3*base64Chunk + 1), "image/jpeg", sc},
		{"picture of whole chunks", picture(2 * base64Chunk), "image/png", sc},
	} {
		t.Run(c.name, func(t *testing.T) {
			inline, err := imageResultOf(context.Background(), c.data, c.mime, marshal(t, c.sc))
			if err != nil {
				t.Fatal(err)
			}
			want := encodeResponse(t, inline)

			sp := &splices{marker: marker}
			spliced, err := imageResultOf(context.WithValue(context.Background(), splicesKey{}, sp), c.data, c.mime, marshal(t, c.sc))
			if err != nil {
				t.Fatal(err)
			}
			raw := encodeResponse(t, spliced)
			if len(raw) > 1000 {
				t.Fatalf("the transport marshals %d bytes; want only tokens (under 1000)", len(raw))
			}
			for _, cut := range []int{0, 1, 2, 7, 45, 1 << 20} {
				rec := httptest.NewRecorder()
				w, sw := newSpliceWriter(rec, sp)
				for p := raw; len(p) > 0; {
					n := len(p)
					if cut > 0 {
						n = min(n, cut)
					} else {
						n = min(n, 1+rng.IntN(60))
					}
					if _, err := w.Write(p[:n]); err != nil {
						t.Fatal(err)
					}
					p = p[n:]
				}
				sw.finish()
				if got := rec.Body.Bytes(); !bytes.Equal(got, want) {
					t.Fatalf("writes of %d bytes: got %d bytes %.200q…; want %d bytes %.200q…", cut, len(got), got, len(want), want)
				}
			}
		})
	}
}

// encodeResponse writes res as mcp-go answers a tools/call.
func encodeResponse(t *testing.T, res *mcpgo.CallToolResult) []byte {
	t.Helper()
	res.ResultType = "complete"
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(mcpgo.NewJSONRPCResultResponse(mcpgo.NewRequestId(7), res)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestSpliceWriterPassesOtherBytes: bytes that look like a token but name
// no part of the response (another marker, an index past the parts) are
// written as they are.
func TestSpliceWriterPassesOtherBytes(t *testing.T) {
	sp := &splices{marker: []byte("pfsplice00ff")}
	tok, _ := sp.add(spliceText, []byte(`{"a":"b"}`))
	for _, c := range []struct{ in, want string }{
		{`["` + tok + `"]`, `["{\"a\":\"b\"}"]`},
		{`["pfsplice00ff01"]`, `["pfsplice00ff01"]`},
		{`["pfsplice00ffzz", "pfsplice00f"]`, `["pfsplice00ffzz", "pfsplice00f"]`},
		{`"pfsplice00ff00"`, `"{\"a\":\"b\"}"`},
		{`pfsplice00f`, `pfsplice00f`},
	} {
		rec := httptest.NewRecorder()
		w, sw := newSpliceWriter(rec, sp)
		_, _ = w.Write([]byte(c.in))
		sw.finish()
		if got := rec.Body.String(); got != c.want {
			t.Errorf("%s: got %s; want %s", c.in, got, c.want)
		}
	}
}

// marshal is v as JSON, a fresh buffer each call (imageResultOf owns it).
func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
