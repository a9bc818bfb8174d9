package receiptchain_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// decoderCanonical is the canonicaliser Canonical replaced (through
// commit 8d3c285), kept as the oracle FuzzCanonicalMatchesDecoder holds
// the byte-level one to: the token decoder of encoding/json reads the
// text, every string is decoded and escaped again, every number goes
// through strconv.ParseFloat and json.Marshal.
func decoderCanonical(data []byte) ([]byte, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("canonical json: invalid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var buf bytes.Buffer
	if err := decoderCanonicalValue(dec, &buf); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("canonical json: data after the value")
	}
	return buf.Bytes(), nil
}

func decoderCanonicalValue(dec *json.Decoder, buf *bytes.Buffer) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			type member struct {
				key  string
				u16  []uint16
				body []byte
			}
			var members []member
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				key, ok := kt.(string)
				if !ok {
					return fmt.Errorf("object member name %v is not a string", kt)
				}
				var vb bytes.Buffer
				if err := decoderCanonicalValue(dec, &vb); err != nil {
					return err
				}
				members = append(members, member{key: key, u16: utf16.Encode([]rune(key)), body: vb.Bytes()})
			}
			if _, err := dec.Token(); err != nil { // '}'
				return err
			}
			slices.SortFunc(members, func(a, b member) int { return slices.Compare(a.u16, b.u16) })
			buf.WriteByte('{')
			for i, m := range members {
				if i > 0 {
					if m.key == members[i-1].key {
						return fmt.Errorf("duplicate object member %q", m.key)
					}
					buf.WriteByte(',')
				}
				oracleWriteString(buf, m.key)
				buf.WriteByte(':')
				buf.Write(m.body)
			}
			buf.WriteByte('}')
		case '[':
			buf.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				if err := decoderCanonicalValue(dec, buf); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil { // ']'
				return err
			}
			buf.WriteByte(']')
		default:
			return fmt.Errorf("unexpected %v", t)
		}
	case string:
		oracleWriteString(buf, t)
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("number %s is not an IEEE 754 double", t)
		}
		if f == 0 {
			buf.WriteByte('0')
			break
		}
		b, _ := json.Marshal(f)
		buf.Write(b)
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case nil:
		buf.WriteString("null")
	}
	return nil
}

func oracleWriteString(buf *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	buf.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			buf.WriteString(`\"`)
		case r == '\\':
			buf.WriteString(`\\`)
		case r == '\b':
			buf.WriteString(`\b`)
		case r == '\t':
			buf.WriteString(`\t`)
		case r == '\n':
			buf.WriteString(`\n`)
		case r == '\f':
			buf.WriteString(`\f`)
		case r == '\r':
			buf.WriteString(`\r`)
		case r < 0x20:
			buf.WriteString(`\u00`)
			buf.WriteByte(hex[r>>4])
			buf.WriteByte(hex[r&0xf])
		default:
			buf.WriteRune(r)
		}
	}
	buf.WriteByte('"')
}
