package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"sync"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

// The answers of observe and get_frame are large: a screenshot is hundreds
// of kilobytes of base64, an element list tens of kilobytes of JSON said
// twice (structuredContent, and the text block). mcp-go writes a result by
// marshalling CallToolResult to a map (its MarshalJSON), which encoding/json
// then scans a second time to compact it into the JSON-RPC response: every
// byte of the picture is escape-checked twice, validated once and copied
// four times before it reaches the connection, where REST writes it once.
//
// So a tools/call served over HTTP puts a short token in the result where a
// large part goes, and the response writer writes the part itself where it
// meets the token: the picture's base64 encoded straight into the response,
// the JSON written as it was marshalled, and once more escaped as the text
// block's string. The bytes on the wire are exactly those of the result
// written whole (TestSplicedResultIsTheSameBytes).
//
// A token is the server's marker (random, never sent) and the part's index
// in two hex digits; a part that is JSON replaces its token with the quotes
// around it (structuredContent must be JSON while mcp-go holds it). A result
// built outside an HTTP request (no splices in the context) carries its parts
// inline, as before.

// spliceKind says how a part is written in place of its token.
type spliceKind uint8

const (
	// spliceJSON is JSON written as it is, in place of the quoted token.
	spliceJSON spliceKind = iota
	// spliceText is compact JSON written as a JSON string's content.
	spliceText
	// spliceBase64 is bytes written as standard base64, inside a string.
	spliceBase64
)

// maxSplices bounds the parts of one response (the index is two hex
// digits); past it a result carries its parts inline.
const maxSplices = 256

type splicePart struct {
	kind spliceKind
	data []byte
}

// splices are the parts of one tools/call response.
type splices struct {
	marker []byte
	mu     sync.Mutex
	parts  []splicePart
}

type splicesKey struct{}

// newSpliceMarker returns a server's marker: a fixed word and 128 random
// bits in hex, which nothing a client or a device sends can contain.
func newSpliceMarker() []byte {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return []byte("pfsplice" + hex.EncodeToString(b[:]))
}

// splicesFrom returns the splices of the response being built, nil when
// the result is not written by a spliceWriter.
func splicesFrom(ctx context.Context) *splices {
	sp, _ := ctx.Value(splicesKey{}).(*splices)
	return sp
}

// add registers data as a part and returns its token; ok is false when
// the response has as many parts as it can hold.
func (sp *splices) add(kind spliceKind, data []byte) (token string, ok bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	n := len(sp.parts)
	if n >= maxSplices {
		return "", false
	}
	sp.parts = append(sp.parts, splicePart{kind: kind, data: data})
	const digits = "0123456789abcdef"
	return string(sp.marker) + string([]byte{digits[n>>4], digits[n&15]}), true
}

// part returns the part whose index is the two hex digits h.
func (sp *splices) part(h []byte) (splicePart, bool) {
	hi, lo := unhex(h[0]), unhex(h[1])
	if hi < 0 || lo < 0 {
		return splicePart{}, false
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	n := hi<<4 | lo
	if n >= len(sp.parts) {
		return splicePart{}, false
	}
	return sp.parts[n], true
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

// result is the result of a screen (observe, get_frame) whose JSON is b,
// with the picture data of mimeType before the text block when data is not
// nil; ok is false when its parts do not fit (the caller builds it inline).
func (sp *splices) result(b, data []byte, mimeType string) (*mcpgo.CallToolResult, bool) {
	structuredTok, ok := sp.add(spliceJSON, b)
	if !ok {
		return nil, false
	}
	textTok, ok := sp.add(spliceText, b)
	if !ok {
		return nil, false
	}
	text := mcpgo.NewTextContent(textTok)
	if data == nil {
		return structured([]byte(`"`+structuredTok+`"`), text), true
	}
	imageTok, ok := sp.add(spliceBase64, data)
	if !ok {
		return nil, false
	}
	return structured([]byte(`"`+structuredTok+`"`), mcpgo.NewImageContent(imageTok, mimeType), text), true
}

// spliceWriter writes a response, each token of its splices replaced by
// the part. The end of a write that may be the beginning of a token is held
// until the next write (or finish).
type spliceWriter struct {
	http.ResponseWriter
	sp   *splices
	held []byte
	err  error
}

// flushingSpliceWriter is a spliceWriter over a writer that can flush: the
// transport streams (SSE) only when the writer it is given is an
// http.Flusher, as it would over the writer itself.
type flushingSpliceWriter struct{ *spliceWriter }

func (w flushingSpliceWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// newSpliceWriter returns the writer for w and the splices its tokens name.
func newSpliceWriter(w http.ResponseWriter, sp *splices) (http.ResponseWriter, *spliceWriter) {
	sw := &spliceWriter{ResponseWriter: w, sp: sp}
	if _, ok := w.(http.Flusher); ok {
		return flushingSpliceWriter{sw}, sw
	}
	return sw, sw
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *spliceWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *spliceWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n := len(p)
	if len(w.held) > 0 {
		p = append(w.held, p...)
		w.held = nil
	}
	w.held, w.err = w.sp.write(w.ResponseWriter, p)
	if w.err != nil {
		return 0, w.err
	}
	return n, nil
}

// finish writes what was held back.
func (w *spliceWriter) finish() {
	if len(w.held) > 0 && w.err == nil {
		_, w.err = w.ResponseWriter.Write(w.held)
		w.held = nil
	}
}

// write writes p to dst with every token replaced by its part, and returns
// (a copy of) the end of p that may begin a token, unwritten.
func (sp *splices) write(dst io.Writer, p []byte) (held []byte, err error) {
	mk := sp.marker
	pos := 0
	for {
		j := bytes.Index(p[pos:], mk)
		if j < 0 {
			break
		}
		i := pos + j
		end := i + len(mk) + 2
		if end+1 > len(p) {
			// The token, or the quote after it, is in the next write.
			from := i
			if from > pos && p[from-1] == '"' {
				from--
			}
			if _, err := dst.Write(p[pos:from]); err != nil {
				return nil, err
			}
			return bytes.Clone(p[from:]), nil
		}
		part, ok := sp.part(p[i+len(mk) : end])
		from, to := i, end
		if ok && part.kind == spliceJSON {
			ok = i > pos && p[i-1] == '"' && p[end] == '"'
			from, to = i-1, end+1
		}
		if !ok {
			// Not a token of this response: bytes like any others.
			if _, err := dst.Write(p[pos : i+len(mk)]); err != nil {
				return nil, err
			}
			pos = i + len(mk)
			continue
		}
		if _, err := dst.Write(p[pos:from]); err != nil {
			return nil, err
		}
		if err := part.writeTo(dst); err != nil {
			return nil, err
		}
		pos = to
	}
	rest := p[pos:]
	k := tokenPrefixSuffix(rest, mk)
	if _, err := dst.Write(rest[:len(rest)-k]); err != nil {
		return nil, err
	}
	if k > 0 {
		held = bytes.Clone(rest[len(rest)-k:])
	}
	return held, nil
}

// tokenPrefixSuffix returns the length of the longest end of p that is the
// beginning of a token (the marker, or a quote and the marker), cut short.
func tokenPrefixSuffix(p, mk []byte) int {
	for k := min(len(p), len(mk)); k > 0; k-- {
		s := p[len(p)-k:]
		if bytes.HasPrefix(mk, s) || s[0] == '"' && bytes.HasPrefix(mk, s[1:]) {
			return k
		}
	}
	return 0
}

// spliceBuffers hold the base64 and escaped text of a part on its way to
// the connection.
var spliceBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}

// base64Chunk is how many bytes of a picture are encoded at a time (a
// multiple of 3, so that only the last chunk is padded).
const base64Chunk = 24 << 10

// writeTo writes the part as it stands in place of its token.
func (part splicePart) writeTo(dst io.Writer) error {
	switch part.kind {
	case spliceJSON:
		_, err := dst.Write(part.data)
		return err
	case spliceBase64:
		bp := spliceBuffers.Get().(*[]byte)
		defer spliceBuffers.Put(bp)
		for data := part.data; len(data) > 0; {
			chunk := data[:min(len(data), base64Chunk)]
			data = data[len(chunk):]
			buf := (*bp)[:base64.StdEncoding.EncodedLen(len(chunk))]
			base64.StdEncoding.Encode(buf, chunk)
			if _, err := dst.Write(buf); err != nil {
				return err
			}
		}
		return nil
	default:
		bp := spliceBuffers.Get().(*[]byte)
		defer spliceBuffers.Put(bp)
		buf := appendJSONText((*bp)[:0], part.data)
		_, err := dst.Write(buf)
		*bp = buf[:0]
		return err
	}
}

// appendJSONText appends compact JSON b (as json.Marshal writes it) as the
// content of a JSON string, escaped as encoding/json escapes it: in such
// JSON every control character, '<', '>', '&', U+2028, U+2029 and invalid
// UTF-8 are already escaped inside its strings, and there is no space
// between tokens, so only '"' and '\' remain to escape.
func appendJSONText(dst, b []byte) []byte {
	for len(b) > 0 {
		i := bytes.IndexAny(b, `"\`)
		if i < 0 {
			return append(dst, b...)
		}
		dst = append(dst, b[:i]...)
		dst = append(dst, '\\', b[i])
		b = b[i+1:]
	}
	return dst
}
