package kernel

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"phonefleet/domain"
)

// FuzzDecodeJSON feeds arbitrary request bodies, under a body limit, to
// DecodeJSON: nothing panics; every refusal is a domain error with
// invalid_argument or payload_too_large, never naming a Go type; a body
// accepted is exactly one JSON value within the limit, and decodes the
// same as encoding/json decodes it.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","count":1,"tags":["x"],"inner":{"on":true}}`, `{"count":"1"}`, `{"count":1.5}`, `{"tags":{}}`,
		`{"inner":[]}`, `{} {}`, `{}  `, ` `, ``, `null`, `[`, `{"name":"` + strings.Repeat("a", 100) + `"}`,
		`{"count":99999999999999999999}`, "{\"name\":\"\xff\"}", `{"unknown":1}`,
	} {
		f.Add([]byte(s), uint16(64))
	}
	f.Fuzz(func(t *testing.T, body []byte, limit uint16) {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, int64(limit))
		var got sample
		err := DecodeJSON(r, &got)
		if err != nil {
			var de *domain.Error
			if !errors.As(err, &de) || (de.Code != domain.CodeInvalidArgument && de.Code != domain.CodePayloadTooLarge) {
				t.Fatalf("%q: got %v; want invalid_argument or payload_too_large", body, err)
			}
			if strings.Contains(de.Message, "kernel.") || strings.Contains(de.Message, "Go ") || strings.Contains(de.Message, "struct") {
				t.Fatalf("%q: refusal names a Go type: %s", body, de.Message)
			}
			if de.Code == domain.CodePayloadTooLarge && len(body) <= int(limit) {
				t.Fatalf("%q (%d bytes): payload_too_large under a limit of %d", body, len(body), limit)
			}
			return
		}
		if len(body) > int(limit) {
			t.Fatalf("%q (%d bytes) accepted under a limit of %d", body, len(body), limit)
		}
		if !json.Valid(body) {
			t.Fatalf("%q accepted but is not one JSON value", body)
		}
		var want sample
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("%q accepted but encoding/json refuses it: %v", body, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			t.Fatalf("%q accepted with data after its value", body)
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		if !bytes.Equal(a, b) {
			t.Fatalf("%q decoded as %s; encoding/json decodes %s", body, a, b)
		}
	})
}
