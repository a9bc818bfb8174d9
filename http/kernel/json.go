package kernel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"sync"

	"phonefleet/domain"
)

// WriteJSON answers status with v encoded as JSON. It encodes before writing
// anything, so an unencodable value becomes the caller's error (and a clean
// 500) instead of a half-written body.
//
// The body is encoded into a pooled buffer, not a fresh one per answer (a
// receipt is a few kilobytes, written on every action): json.Encoder
// writes what json.Marshal returns, HTML escaping included, followed by a
// newline, which is not sent. A writer must not keep the slice it is
// handed (io.Writer's contract), so the buffer is reused once written.
func WriteJSON(w http.ResponseWriter, status int, v any) error {
	buf := jsonBuffers.Get().(*bytes.Buffer)
	defer putJSONBuffer(buf)
	buf.Reset()
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	body := buf.Bytes()
	WriteBody(w, status, body[:len(body)-1]) // without Encode's newline
	return nil
}

// WriteJSONWithRaw answers status with v, a value that encodes to a JSON
// object, and raw as its last member, named name, written as it is (left
// out when raw is empty). raw must be one compact JSON value this service
// encoded itself (a backend's UI tree): as a json.RawMessage, encoding/json
// would scan all of it again to check and compact it (about 13 µs for a
// 2.5 kB tree, twenty-five times the rest of a snapshot's answer:
// BenchmarkWriteSnapshotAnswer). Its strings keep the escaping they were
// written with (encoding/json escapes <, > and & in the rest), which
// decodes alike.
func WriteJSONWithRaw(w http.ResponseWriter, status int, v any, name string, raw []byte) error {
	if len(raw) == 0 {
		return WriteJSON(w, status, v)
	}
	buf := jsonBuffers.Get().(*bytes.Buffer)
	defer putJSONBuffer(buf)
	buf.Reset()
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	// Room for the member in the pooled buffer, so that appending it
	// does not copy the answer into a new array each time.
	buf.Grow(len(name) + len(raw) + 8)
	body, err := AppendMember(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), name, raw)
	if err != nil {
		return fmt.Errorf("encode response: %T: %w", v, err)
	}
	WriteBody(w, status, body)
	return nil
}

// AppendMember adds to obj, an encoded JSON object, a last member named
// name whose value is raw, written as it is (compact JSON this service
// encoded itself; see WriteJSONWithRaw), and returns the object. It may
// write into obj's spare capacity.
func AppendMember(obj []byte, name string, raw []byte) ([]byte, error) {
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return nil, errors.New("no JSON object")
	}
	out := obj[:len(obj)-1]
	if len(obj) > 2 {
		out = append(out, ',')
	}
	out = strconv.AppendQuote(out, name)
	out = append(out, ':')
	out = append(out, raw...)
	return append(out, '}'), nil
}

// jsonBuffers holds WriteJSON's buffers; one grown past maxPooledJSON (a
// large listing) is dropped rather than kept for every later answer.
var jsonBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledJSON = 64 << 10

func putJSONBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledJSON {
		jsonBuffers.Put(buf)
	}
}

// WriteBody answers status with body, a JSON document already encoded (a
// document built once at start-up, an envelope written by hand). It sets
// Content-Length, so the answer is never chunked.
func WriteBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// errEmptyBody marks a request that sent no body at all.
var errEmptyBody = errors.New("empty body")

// DecodeJSON reads the request body as one JSON value into v. Unknown object
// members are ignored (spec 2.1: clients may send more than a route reads);
// routes that must be strict check that themselves. It answers:
//   - payload_too_large when the body runs past the limit;
//   - invalid_argument, with a message saying what is wrong, for an empty
//     body, malformed JSON, a value of the wrong type or trailing data.
//
// The request's Content-Type is not checked: a bearer-token API has no
// cross-site form posts to fear, and curl's default form type would
// otherwise turn valid JSON into an error.
func DecodeJSON(r *http.Request, v any) error {
	err := decodeBody(r, v)
	if errors.Is(err, errEmptyBody) {
		return domain.Errorf(domain.CodeInvalidArgument, "request body is empty; a JSON body is required")
	}
	return err
}

// DecodeOptionalJSON is DecodeJSON for routes where the body may be absent
// (e.g. checkout without a choice); it reports whether a body was present.
func DecodeOptionalJSON(r *http.Request, v any) (present bool, err error) {
	err = decodeBody(r, v)
	if errors.Is(err, errEmptyBody) {
		return false, nil
	}
	return err == nil, err
}

// ReadBody reads the whole request body, for a surface that must see the
// bytes before decoding them (a JSON-RPC envelope read twice, a signed
// webhook whose signature covers the raw body). Reading past the body limit
// answers payload_too_large, like DecodeJSON; any other read failure
// (a broken connection) answers invalid_argument without its internal text.
func ReadBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if e, ok := AsPayloadTooLarge(err); ok {
			return nil, e
		}
		return nil, domain.Errorf(domain.CodeInvalidArgument, "the request body could not be read")
	}
	return body, nil
}

func decodeBody(r *http.Request, v any) error {
	if r.Body == nil || r.Body == http.NoBody {
		return errEmptyBody
	}
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errEmptyBody
		}
		return describeDecodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if tooLarge, ok := AsPayloadTooLarge(err); ok {
			return tooLarge
		}
		return domain.Errorf(domain.CodeInvalidArgument, "request body must hold exactly one JSON value")
	}
	return nil
}

// describeDecodeError turns an encoding/json error into the answer a client
// can act on, naming the field and the JSON type expected, never a Go type.
func describeDecodeError(err error) error {
	if tooLarge, ok := AsPayloadTooLarge(err); ok {
		return tooLarge
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return domain.Errorf(domain.CodeInvalidArgument, "request body is not valid JSON: %s (at byte %d)", syntax.Error(), syntax.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return domain.Errorf(domain.CodeInvalidArgument, "request body ends before its JSON value is complete")
	case errors.As(err, &typ):
		if typ.Field == "" {
			return domain.Errorf(domain.CodeInvalidArgument, "request body must be %s, not %s", JSONKind(typ.Type), typ.Value)
		}
		return domain.Errorf(domain.CodeInvalidArgument, "field %s must be %s, not %s", strconv.Quote(typ.Field), JSONKind(typ.Type), typ.Value)
	default:
		// A domain type's UnmarshalJSON refused the value with a message
		// written for clients; anything else (a broken connection, a library
		// type's parse error) may carry internals and is not echoed.
		var de *domain.Error
		if errors.As(err, &de) {
			return de
		}
		return domain.Errorf(domain.CodeInvalidArgument, "request body cannot be read as JSON").Wrap(err)
	}
}

// JSONKind names the JSON type that decodes into t, for a refusal that
// speaks to the client, never in Go types.
func JSONKind(t reflect.Type) string {
	if t == nil {
		return "a different type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return JSONKind(t.Elem())
	default:
		return "a different type"
	}
}
