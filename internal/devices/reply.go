package devices

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// The raw form of a forwarded call's reply. A reply in JSON carries a
// picture ([]byte) as base64 — a third larger, and encoded, scanned and
// decoded on the way — and its JSON results twice (the result's JSON
// inside the reply's). In the raw form the result's JSON travels once,
// without its byte fields, and each byte field travels after it as it is:
//
//	rawTag, 'e', the error's JSON (wireError)
//	rawTag, 'r', uvarint n, n bytes of the result's JSON (its byte fields
//	    null), then for each byte field: uvarint len(name), name,
//	    uvarint 0 for nil or len(bytes)+1, the bytes
//
// The byte fields are the exported top-level fields of a struct result
// whose type is a byte slice ([]byte, json.RawMessage), except those the
// JSON leaves out (`json:"-"`) and those with a JSON encoding of their own.
// A caller asks for the raw form (call.Raw); a holder of an earlier build
// ignores the ask and answers in JSON, which the caller still reads (a
// JSON reply starts with '{', never with rawTag). The reply's integrity is
// the transport's: internal/cluster signs every byte of it, bound to the
// call.
const (
	rawTag    = 0x00
	rawResult = 'r'
	rawError  = 'e'
)

// maxRawFields bounds the byte fields a raw reply may name.
const maxRawFields = 64

var errRawReply = errors.New("malformed raw reply")

// byteFields returns the indexes of t's byte fields (see above); nil for
// a type that is not a struct. Cached per type.
func byteFields(t reflect.Type) []int {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	if f, ok := byteFieldCache.Load(t); ok {
		return f.([]int)
	}
	var idx []int
	rawMsg := reflect.TypeFor[json.RawMessage]()
	marshaler := reflect.TypeFor[json.Marshaler]()
	unmarshaler := reflect.TypeFor[json.Unmarshaler]()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Anonymous || f.Type.Kind() != reflect.Slice || f.Type.Elem().Kind() != reflect.Uint8 {
			continue
		}
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag == "-" {
			continue
		}
		// A byte slice with a JSON form of its own travels in it; a
		// json.RawMessage is raw bytes already.
		if f.Type != rawMsg && (f.Type.Implements(marshaler) || reflect.PointerTo(f.Type).Implements(unmarshaler)) {
			continue
		}
		idx = append(idx, i)
	}
	byteFieldCache.Store(t, idx)
	return idx
}

var byteFieldCache sync.Map // reflect.Type → []int

// encodeRawReply returns the raw form of the reply to a call: res, or err
// when it is not nil.
func encodeRawReply(res any, err error) []byte {
	if err != nil {
		return rawErrorReply(err)
	}
	v := reflect.ValueOf(res)
	fields := byteFields(reflect.TypeOf(res))
	type blob struct {
		name string
		b    []byte
	}
	var blobs []blob
	if len(fields) > 0 {
		// A copy without the byte fields: the caller's value is left
		// as it is.
		c := reflect.New(v.Type()).Elem()
		c.Set(v)
		for _, i := range fields {
			f := c.Field(i)
			blobs = append(blobs, blob{c.Type().Field(i).Name, f.Bytes()})
			f.SetZero()
		}
		res = c.Interface()
	}
	js, merr := json.Marshal(res)
	if merr != nil {
		return rawErrorReply(merr)
	}
	size := 2 + binary.MaxVarintLen64 + len(js)
	for _, b := range blobs {
		size += 2*binary.MaxVarintLen64 + len(b.name) + len(b.b)
	}
	out := make([]byte, 0, size)
	out = append(out, rawTag, rawResult)
	out = binary.AppendUvarint(out, uint64(len(js)))
	out = append(out, js...)
	for _, b := range blobs {
		out = binary.AppendUvarint(out, uint64(len(b.name)))
		out = append(out, b.name...)
		if b.b == nil {
			out = binary.AppendUvarint(out, 0)
			continue
		}
		out = binary.AppendUvarint(out, uint64(len(b.b))+1)
		out = append(out, b.b...)
	}
	return out
}

func rawErrorReply(err error) []byte {
	js, _ := json.Marshal(toWire(err)) // plain data: it cannot fail
	return append([]byte{rawTag, rawError}, js...)
}

// decodeRawReply reads a raw reply (out starts with rawTag): the holder's
// error as a *wireError, or its result decoded into result (a pointer).
// A byte field the result's type does not have is ignored, as JSON
// ignores a field it does not know. The byte fields of result share out's
// memory. Errors wrap errRawReply (and JSON's, for the result's).
func decodeRawReply(out []byte, result any) (*wireError, error) {
	if len(out) < 2 || out[0] != rawTag {
		return nil, fmt.Errorf("%w: no raw tag", errRawReply)
	}
	switch out[1] {
	case rawError:
		var w wireError
		if err := json.Unmarshal(out[2:], &w); err != nil {
			return nil, fmt.Errorf("%w: error: %w", errRawReply, err)
		}
		return &w, nil
	case rawResult:
	default:
		return nil, fmt.Errorf("%w: kind %#x", errRawReply, out[1])
	}
	rest := out[2:]
	js, rest, err := rawChunk(rest, false)
	if err != nil {
		return nil, err
	}
	type blob struct {
		name string
		b    []byte
	}
	var blobs []blob
	for len(rest) > 0 {
		if len(blobs) == maxRawFields {
			return nil, fmt.Errorf("%w: more than %d byte fields", errRawReply, maxRawFields)
		}
		var name, b []byte
		if name, rest, err = rawChunk(rest, false); err != nil {
			return nil, err
		}
		if b, rest, err = rawChunk(rest, true); err != nil {
			return nil, err
		}
		blobs = append(blobs, blob{string(name), b})
	}
	if err := json.Unmarshal(js, result); err != nil {
		return nil, fmt.Errorf("%w: result: %w", errRawReply, err)
	}
	rv := reflect.ValueOf(result)
	if len(blobs) == 0 || rv.Kind() != reflect.Pointer || rv.IsNil() {
		return nil, nil
	}
	sv := rv.Elem()
	fields := byteFields(sv.Type())
	for _, b := range blobs {
		for _, i := range fields {
			if sv.Type().Field(i).Name == b.name {
				f := sv.Field(i)
				f.Set(reflect.ValueOf(b.b).Convert(f.Type()))
				break
			}
		}
	}
	return nil, nil
}

// rawChunk reads one uvarint-prefixed chunk of b. With nilable, a prefix
// of 0 is a nil chunk and n+1 a chunk of n bytes.
func rawChunk(b []byte, nilable bool) (chunk, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, nil, fmt.Errorf("%w: bad length", errRawReply)
	}
	b = b[k:]
	if nilable {
		if n == 0 {
			return nil, b, nil
		}
		n--
	}
	if n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%w: a chunk of %d bytes in %d", errRawReply, n, len(b))
	}
	return b[:n:n], b[n:], nil
}
