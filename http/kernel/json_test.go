package kernel

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"phonefleet/domain"
)

type sample struct {
	Name  string   `json:"name"`
	Count int      `json:"count"`
	Tags  []string `json:"tags"`
	Inner struct {
		On bool `json:"on"`
	} `json:"inner"`
}

func TestDecodeJSON(t *testing.T) {
	tests := []struct {
		name    string
		body    io.Reader
		limit   int64 // 0: no limit applied
		code    domain.Code
		message string // substring of the message
	}{
		{name: "valid", body: strings.NewReader(`{"name":"a","count":2,"tags":["x"],"unknown":true}`)},
		{name: "valid with trailing whitespace", body: strings.NewReader("{\"name\":\"a\"}\n\t ")},
		{name: "no body", body: nil, code: domain.CodeInvalidArgument, message: "request body is empty"},
		{name: "only whitespace", body: strings.NewReader("  \n"), code: domain.CodeInvalidArgument, message: "request body is empty"},
		{name: "syntax error", body: strings.NewReader(`{"name":}`), code: domain.CodeInvalidArgument, message: "not valid JSON"},
		{name: "truncated", body: strings.NewReader(`{"name":"a"`), code: domain.CodeInvalidArgument, message: "ends before"},
		{name: "wrong field type", body: strings.NewReader(`{"count":"two"}`), code: domain.CodeInvalidArgument, message: `field "count" must be an integer, not string`},
		{name: "wrong nested field type", body: strings.NewReader(`{"inner":{"on":"yes"}}`), code: domain.CodeInvalidArgument, message: `field "inner.on" must be a boolean`},
		{name: "wrong array item type", body: strings.NewReader(`{"tags":[1]}`), code: domain.CodeInvalidArgument, message: "must be a string"},
		{name: "not an object", body: strings.NewReader(`[1,2]`), code: domain.CodeInvalidArgument, message: "request body must be an object, not array"},
		{name: "two values", body: strings.NewReader(`{"name":"a"}{"name":"b"}`), code: domain.CodeInvalidArgument, message: "exactly one JSON value"},
		{name: "garbage after the value", body: strings.NewReader(`{"name":"a"} x`), code: domain.CodeInvalidArgument, message: "exactly one JSON value"},
		{
			name: "over the limit", limit: 64,
			body: strings.NewReader(`{"name":"` + strings.Repeat("a", 100) + `"}`),
			code: domain.CodePayloadTooLarge, message: "limit of 64 bytes",
		},
		{
			name: "over the limit only after the value", limit: 16,
			body: strings.NewReader(`{"name":"a"}` + strings.Repeat(" ", 100)),
			code: domain.CodePayloadTooLarge, message: "limit of 16 bytes",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", tt.body)
			if tt.limit > 0 {
				r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, tt.limit)
			}
			var v sample
			err := DecodeJSON(r, &v)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("got error %v; want none", err)
				}
				if v.Name != "a" {
					t.Errorf("got name %q; want \"a\"", v.Name)
				}
				return
			}
			var de *domain.Error
			if !errors.As(err, &de) {
				t.Fatalf("got error %v; want a domain error", err)
			}
			if de.Code != tt.code {
				t.Errorf("got code %s; want %s", de.Code, tt.code)
			}
			if !strings.Contains(de.Message, tt.message) {
				t.Errorf("got message %q; want it to contain %q", de.Message, tt.message)
			}
		})
	}
}

func TestDecodeOptionalJSON(t *testing.T) {
	tests := []struct {
		name        string
		body        io.Reader
		wantPresent bool
		wantErr     bool
	}{
		{name: "absent", body: nil},
		{name: "empty", body: bytes.NewReader(nil)},
		{name: "present", body: strings.NewReader(`{"name":"a"}`), wantPresent: true},
		{name: "malformed", body: strings.NewReader(`{`), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v sample
			present, err := DecodeOptionalJSON(httptest.NewRequest(http.MethodPost, "/", tt.body), &v)
			if present != tt.wantPresent {
				t.Errorf("got present %v; want %v", present, tt.wantPresent)
			}
			if (err != nil) != tt.wantErr {
				t.Errorf("got error %v; want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestWriteJSON(t *testing.T) {
	t.Run("encodable", func(t *testing.T) {
		rec := httptest.NewRecorder()
		if err := WriteJSON(rec, http.StatusCreated, map[string]int{"n": 1}); err != nil {
			t.Fatal(err)
		}
		if rec.Code != http.StatusCreated || rec.Body.String() != `{"n":1}` {
			t.Errorf("got %d %s; want 201 {\"n\":1}", rec.Code, rec.Body)
		}
		if got := rec.Header().Get("Content-Type"); got != "application/json" {
			t.Errorf("got Content-Type %q; want application/json", got)
		}
	})
	t.Run("unencodable writes nothing", func(t *testing.T) {
		rec := httptest.NewRecorder()
		if err := WriteJSON(rec, http.StatusOK, make(chan int)); err == nil {
			t.Fatal("got no error; want one")
		}
		if rec.Body.Len() != 0 || rec.Header().Get("Content-Type") != "" {
			t.Errorf("got a written response; want nothing written")
		}
	})
}

// TestWriteJSONWritesWhatMarshalReturns: the pooled encoder writes the
// bytes json.Marshal returns (HTML escaped, no newline), and an answer
// written earlier keeps its bytes when the buffer is reused.
func TestWriteJSONWritesWhatMarshalReturns(t *testing.T) {
	values := []any{
		map[string]any{"html": "<a href=\"x\">&</a>", "n": 1.5, "u": "\u2028é", "list": []int{1, 2}},
		struct {
			A string `json:"a,omitempty"`
			B []byte `json:"b"`
		}{B: []byte("bytes")},
		"plain", 12, nil, json.RawMessage(`{ "spaced" : true }`),
	}
	var recs []*httptest.ResponseRecorder
	for _, v := range values {
		rec := httptest.NewRecorder()
		if err := WriteJSON(rec, http.StatusOK, v); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	for i, v := range values {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := recs[i].Body.String(); got != string(want) {
			t.Errorf("WriteJSON(%#v) wrote %s; json.Marshal gives %s", v, got, want)
		}
		if got := recs[i].Header().Get("Content-Length"); got != strconv.Itoa(len(want)) {
			t.Errorf("WriteJSON(%#v): Content-Length %s; want %d", v, got, len(want))
		}
	}
}

// TestWriteJSONWithRaw: the answer decodes as the same value with raw as a
// json.RawMessage member would (strings raw left unescaped included), with
// a Content-Length; an empty raw leaves the member out, as omitempty
// would; a value that is no object writes nothing.
func TestWriteJSONWithRaw(t *testing.T) {
	type head struct {
		ID   string `json:"id"`
		HTML string `json:"html,omitempty"`
	}
	type whole struct {
		ID   string          `json:"id"`
		HTML string          `json:"html,omitempty"`
		Root json.RawMessage `json:"root,omitempty"`
	}
	raw := []byte(`{"text":"Apps & <notifications>","children":[{"n":1.5},null,"é\u2028"]}`)
	for _, v := range []whole{{ID: "frm_1", HTML: "<b>&</b>", Root: raw}, {ID: "frm_2"}, {Root: raw}} {
		rec := httptest.NewRecorder()
		if err := WriteJSONWithRaw(rec, http.StatusOK, head{ID: v.ID, HTML: v.HTML}, "root", v.Root); err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var got, wanted any
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("%+v: the answer %s is no JSON: %v", v, rec.Body, err)
		}
		_ = json.Unmarshal(want, &wanted)
		if !reflect.DeepEqual(got, wanted) {
			t.Errorf("%+v: wrote %s; want the value of %s", v, rec.Body, want)
		}
		if cl := rec.Header().Get("Content-Length"); cl != strconv.Itoa(rec.Body.Len()) {
			t.Errorf("%+v: Content-Length %s for %d bytes", v, cl, rec.Body.Len())
		}
	}
	rec := httptest.NewRecorder()
	if err := WriteJSONWithRaw(rec, http.StatusOK, struct{}{}, "root", raw); err != nil || rec.Body.String() != `{"root":`+string(raw)+`}` {
		t.Errorf("an empty object with raw: %s, %v", rec.Body, err)
	}
	rec = httptest.NewRecorder()
	if err := WriteJSONWithRaw(rec, http.StatusOK, []int{1}, "root", raw); err == nil || rec.Body.Len() != 0 {
		t.Errorf("a list with raw: wrote %q, %v; want an error and nothing written", rec.Body, err)
	}
}

// discardWriter is a ResponseWriter that keeps nothing, to measure the
// encoding alone.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkWriteJSON writes a receipt-sized answer, as every action does.
func BenchmarkWriteJSON(b *testing.B) {
	type frame struct {
		FrameID    string `json:"frameId"`
		ScreenHash string `json:"screenHash"`
		CapturedAt string `json:"capturedAt"`
	}
	v := struct {
		ActionID, IdempotencyKey, DeviceID, State, Action string
		Arguments                                         map[string]string
		Result                                            map[string]any
		FrameBefore, FrameAfter                           frame
		Timestamp, StartedAt, FinishedAt                  string
		DurationMs                                        float64
	}{
		"act_0190a1b2c3d4e5f60718293a4b5c6d7e", "bench-1-2", "dev_0190a1b2c3d4e5f60718293a4b5c6d7e", "committed", "key",
		map[string]string{"key": "VOLUME_UP"},
		map[string]any{"description": "pressed VOLUME_UP", "changed": true, "foreground": "com.android.launcher3"},
		frame{"frm_0190a1b2c3d4e5f60718293a4b5c6d7e", "0123456789abcdef0123456789abcdef", "2026-11-28T10:00:00.123456Z"},
		frame{"frm_0190a1b2c3d4e5f60718293a4b5c6d7f", "fedcba9876543210fedcba9876543210", "2026-11-28T10:00:00.125456Z"},
		"2026-11-28T10:00:00.120000Z", "2026-11-28T10:00:00.121000Z", "2026-11-28T10:00:00.126000Z", 5.25,
	}
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		if err := WriteJSON(w, http.StatusOK, v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteSnapshotAnswer writes a UI snapshot's answer with a tree
// of a sim screen's order of size (2.5 kB; the sim's home screen's is
// 3.7 kB) as a json.RawMessage member and through WriteJSONWithRaw.
func BenchmarkWriteSnapshotAnswer(b *testing.B) {
	type head struct {
		FrameID    string `json:"frameId"`
		ScreenHash string `json:"screenHash"`
		Width      int    `json:"width"`
	}
	var tree strings.Builder
	tree.WriteString(`{"ref":"e0","class":"FrameLayout","bounds":[0,0,1080,2400],"children":[`)
	for i := range 24 {
		if i > 0 {
			tree.WriteByte(',')
		}
		tree.WriteString(`{"ref":"e` + strconv.Itoa(i+1) + `","class":"TextView","text":"Row number ` + strconv.Itoa(i) +
			`","bounds":[0,` + strconv.Itoa(100*i) + `,1080,` + strconv.Itoa(100*i+96) + `],"clickable":true}`)
	}
	tree.WriteString(`]}`)
	raw := []byte(tree.String())
	w := &discardWriter{h: http.Header{}}
	h := head{"frm_0190a1b2c3d4e5f60718293a4b5c6d7e", "0123456789abcdef0123456789abcdef", 1080}
	b.Run("RawMessage", func(b *testing.B) {
		v := struct {
			head
			Root json.RawMessage `json:"root"`
		}{h, raw}
		for b.Loop() {
			if err := WriteJSON(w, http.StatusOK, v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("WithRaw", func(b *testing.B) {
		for b.Loop() {
			if err := WriteJSONWithRaw(w, http.StatusOK, h, "root", raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Logf("tree of %d bytes", len(raw))
}
