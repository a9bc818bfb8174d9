package receiptchain

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

// Canonical returns the JSON Canonicalization Scheme form (RFC 8785) of
// the JSON text data: no insignificant white space, object members sorted
// by the UTF-16 code units of their names, numbers as ECMAScript prints
// them, strings with the minimal escapes. Two texts with the same JSON
// value have the same canonical form, so a hash over it does not depend on
// who serialised the value. Duplicate member names and invalid UTF-8 are
// refused, as the scheme requires.
func Canonical(data []byte) ([]byte, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("canonical json: invalid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var buf bytes.Buffer
	if err := canonicalValue(dec, &buf); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	// Anything after the value, a token or not, is refused: only the end
	// of the text (io.EOF) may follow it.
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("canonical json: data after the value")
	}
	return buf.Bytes(), nil
}

func canonicalValue(dec *json.Decoder, buf *bytes.Buffer) error {
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
				if err := canonicalValue(dec, &vb); err != nil {
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
				writeString(buf, m.key)
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
				if err := canonicalValue(dec, buf); err != nil {
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
		writeString(buf, t)
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("number %s is not an IEEE 754 double", t)
		}
		writeNumber(buf, f)
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case nil:
		buf.WriteString("null")
	}
	return nil
}

// writeNumber prints f as ECMAScript's Number.prototype.toString does
// (RFC 8785 section 3.2.2.3); encoding/json follows the same rules.
func writeNumber(buf *bytes.Buffer, f float64) {
	if f == 0 {
		buf.WriteByte('0') // also -0
		return
	}
	b, _ := json.Marshal(f)
	buf.Write(b)
}

// writeString escapes only what RFC 8785 section 3.2.2.2 escapes: the
// quote, the backslash and control characters (with the short forms
// \b \t \n \f \r where they exist).
func writeString(buf *bytes.Buffer, s string) {
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
