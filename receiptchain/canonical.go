package receiptchain

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode"
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
//
// It reads the bytes once, writing as it goes: a string without escapes
// and an integer of up to 15 digits are copied as they are (they are
// their own canonical form), an object's members are reordered only when
// they are not in order already. It accepts and refuses exactly what the
// token decoder of encoding/json did before it (FuzzCanonicalMatchesDecoder
// holds it to that implementation, byte for byte), for a fraction of the
// time and allocations (BenchmarkCanonical; issue 28), except that arrays
// and objects nest at most 10,000 deep, as encoding/json's own limit.
func Canonical(data []byte) ([]byte, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("canonical json: invalid UTF-8")
	}
	p := canonParser{data: data}
	out := make([]byte, 0, len(data))
	p.skipSpace()
	out, err := p.value(out)
	if err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	p.skipSpace()
	if p.pos != len(data) {
		return nil, errors.New("canonical json: data after the value")
	}
	return out, nil
}

// canonParser reads one JSON text; members is a stack of the members of
// the objects being read (an object's members from its base up), keys
// holds the decoded names that had escapes, tmp is where an object's
// members are copied to be written back in order.
type canonParser struct {
	data    []byte
	pos     int
	depth   int // arrays and objects open
	members []canonMember
	keys    []byte
	tmp     []byte
}

// canonMember is one object member: its decoded name (in data, or in
// keys when the name had escapes) and where it was written in the output
// (the name, the colon and the value).
type canonMember struct {
	keyStart, keyEnd int
	escaped          bool
	outStart, outEnd int
}

func (p *canonParser) key(m canonMember) []byte {
	if m.escaped {
		return p.keys[m.keyStart:m.keyEnd]
	}
	return p.data[m.keyStart:m.keyEnd]
}

var errUnexpectedEnd = errors.New("unexpected end of JSON input")

// maxDepth is how deeply arrays and objects may nest: encoding/json's
// limit, so that Canonical still accepts exactly what its decoder does.
const maxDepth = 10000

func (p *canonParser) syntaxError(what string) error {
	if p.pos >= len(p.data) {
		return errUnexpectedEnd
	}
	return fmt.Errorf("invalid character %q %s at offset %d", p.data[p.pos], what, p.pos)
}

func (p *canonParser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value reads the value at p.pos (white space skipped already) and
// appends its canonical form to out.
func (p *canonParser) value(out []byte) ([]byte, error) {
	if p.pos >= len(p.data) {
		return out, errUnexpectedEnd
	}
	switch c := p.data[p.pos]; {
	case c == '{', c == '[':
		// Nested as deep as encoding/json allows, and no deeper: an
		// exported chain is untrusted input, and each level is a frame
		// of this recursion.
		if p.depth == maxDepth {
			return out, fmt.Errorf("exceeded max depth at offset %d", p.pos)
		}
		p.depth++
		var err error
		if c == '{' {
			out, err = p.object(out)
		} else {
			out, err = p.array(out)
		}
		p.depth--
		return out, err
	case c == '"':
		return p.stringValue(out)
	case c == '-' || '0' <= c && c <= '9':
		return p.number(out)
	case c == 't':
		return p.literal(out, "true")
	case c == 'f':
		return p.literal(out, "false")
	case c == 'n':
		return p.literal(out, "null")
	}
	return out, p.syntaxError("looking for beginning of value")
}

func (p *canonParser) literal(out []byte, lit string) ([]byte, error) {
	if !bytes.HasPrefix(p.data[p.pos:], []byte(lit)) {
		for i := 0; i < len(lit) && p.pos < len(p.data) && p.data[p.pos] == lit[i]; i++ {
			p.pos++
		}
		return out, p.syntaxError("in literal " + lit)
	}
	p.pos += len(lit)
	return append(out, lit...), nil
}

func (p *canonParser) array(out []byte) ([]byte, error) {
	p.pos++ // [
	out = append(out, '[')
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return append(out, ']'), nil
	}
	for {
		var err error
		if out, err = p.value(out); err != nil {
			return out, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return out, errUnexpectedEnd
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			out = append(out, ',')
			p.skipSpace()
		case ']':
			p.pos++
			return append(out, ']'), nil
		default:
			return out, p.syntaxError("after array element")
		}
	}
}

func (p *canonParser) object(out []byte) ([]byte, error) {
	p.pos++ // {
	start := len(out)
	out = append(out, '{')
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return append(out, '}'), nil
	}
	base := len(p.members)
	defer func() { p.members = p.members[:base] }()
	keysBase := len(p.keys)
	defer func() { p.keys = p.keys[:keysBase] }()
	sorted := true
	for {
		if p.pos >= len(p.data) {
			return out, errUnexpectedEnd
		}
		if p.data[p.pos] != '"' {
			return out, p.syntaxError("looking for beginning of object key string")
		}
		m := canonMember{outStart: len(out)}
		var err error
		if out, err = p.memberName(out, &m); err != nil {
			return out, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return out, errUnexpectedEnd
		}
		if p.data[p.pos] != ':' {
			return out, p.syntaxError("after object key")
		}
		p.pos++
		out = append(out, ':')
		p.skipSpace()
		if out, err = p.value(out); err != nil {
			return out, err
		}
		m.outEnd = len(out)
		if n := len(p.members); n > base && sorted {
			switch compareUTF16(p.key(p.members[n-1]), p.key(m)) {
			case 0:
				return out, fmt.Errorf("duplicate object member %q", p.key(m))
			case 1:
				sorted = false
			}
		}
		p.members = append(p.members, m)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return out, errUnexpectedEnd
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			out = append(out, ',')
			p.skipSpace()
			continue
		case '}':
			p.pos++
		default:
			return out, p.syntaxError("after object key:value pair")
		}
		break
	}
	if sorted {
		return append(out, '}'), nil
	}
	members := p.members[base:]
	slices.SortFunc(members, func(a, b canonMember) int { return compareUTF16(p.key(a), p.key(b)) })
	for i := 1; i < len(members); i++ {
		if bytes.Equal(p.key(members[i-1]), p.key(members[i])) {
			return out, fmt.Errorf("duplicate object member %q", p.key(members[i]))
		}
	}
	// Write the members back in order from a copy of what was written.
	p.tmp = append(p.tmp[:0], out[start:]...)
	out = append(out[:start], '{')
	for i, m := range members {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, p.tmp[m.outStart-start:m.outEnd-start]...)
	}
	return append(out, '}'), nil
}

// memberName reads the member name at p.pos, writes its canonical form and
// records its decoded bytes in m.
func (p *canonParser) memberName(out []byte, m *canonMember) ([]byte, error) {
	start := p.pos + 1
	end, escaped, err := p.scanString()
	if err != nil {
		return out, err
	}
	if !escaped {
		m.keyStart, m.keyEnd = start, end
		return append(out, p.data[start-1:p.pos]...), nil
	}
	m.escaped = true
	m.keyStart = len(p.keys)
	p.keys = unescape(p.keys, p.data[start:end])
	m.keyEnd = len(p.keys)
	return appendString(out, p.keys[m.keyStart:m.keyEnd]), nil
}

func (p *canonParser) stringValue(out []byte) ([]byte, error) {
	from := p.pos
	end, escaped, err := p.scanString()
	if err != nil {
		return out, err
	}
	if !escaped {
		return append(out, p.data[from:p.pos]...), nil
	}
	// The decoded text goes after out's end, then is written escaped.
	n := len(out)
	out = unescape(out, p.data[from+1:end])
	p.tmp = append(p.tmp[:0], out[n:]...)
	return appendString(out[:n], p.tmp), nil
}

// scanString checks the string at p.pos (its opening quote) and moves
// past its closing quote. It returns the end of its contents and whether
// they hold an escape. A string without escapes is its own canonical form:
// it can hold no control character, no quote and no backslash.
func (p *canonParser) scanString() (end int, escaped bool, err error) {
	d := p.data
	i := p.pos + 1
	for {
		j := bytes.IndexAny(d[i:], "\"\\")
		if j < 0 {
			for ; i < len(d); i++ {
				if d[i] < 0x20 {
					p.pos = i
					return 0, false, p.syntaxError("in string literal")
				}
			}
			p.pos = len(d)
			return 0, false, errUnexpectedEnd
		}
		for k := i; k < i+j; k++ {
			if d[k] < 0x20 {
				p.pos = k
				return 0, false, p.syntaxError("in string literal")
			}
		}
		i += j
		if d[i] == '"' {
			p.pos = i + 1
			return i, escaped, nil
		}
		escaped = true
		i++ // the backslash
		if i >= len(d) {
			p.pos = i
			return 0, false, errUnexpectedEnd
		}
		switch d[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i++
		case 'u':
			i++
			for k := 0; k < 4; k++ {
				if i >= len(d) {
					p.pos = i
					return 0, false, errUnexpectedEnd
				}
				if !isHex(d[i]) {
					p.pos = i
					return 0, false, p.syntaxError("in \\u hexadecimal character escape")
				}
				i++
			}
		default:
			p.pos = i
			return 0, false, p.syntaxError("in string escape code")
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// hex4 reads four hexadecimal digits (checked by scanString), or -1 when s
// does not start with them.
func hex4(s []byte) rune {
	if len(s) < 4 {
		return -1
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// unescape appends the decoded contents s of a checked string to out, as
// encoding/json decodes them: a \u escape of a surrogate that is not the
// first of a valid pair is U+FFFD.
func unescape(out, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			j := bytes.IndexByte(s[i:], '\\')
			if j < 0 {
				return append(out, s[i:]...)
			}
			out = append(out, s[i:i+j]...)
			i += j
			continue
		}
		i++
		switch s[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(s[i+1:])
			i += 4
			if utf16.IsSurrogate(r) {
				if i+2 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					if dec := utf16.DecodeRune(r, hex4(s[i+3:])); dec != unicode.ReplacementChar {
						out = utf8.AppendRune(out, dec)
						i += 7
						continue
					}
				}
				r = unicode.ReplacementChar
			}
			out = utf8.AppendRune(out, r)
		default: // " \ /
			out = append(out, s[i])
		}
		i++
	}
	return out
}

// number reads the number at p.pos and writes it as ECMAScript prints the
// IEEE 754 double it denotes. An integer of up to 15 digits is exact and
// prints as written (-0 as 0).
func (p *canonParser) number(out []byte) ([]byte, error) {
	d := p.data
	start := p.pos
	i := start
	if d[i] == '-' {
		i++
	}
	digits := i
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	default:
		p.pos = i
		return out, p.syntaxError("in numeric literal")
	}
	integer := i - digits
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			p.pos = i
			return out, p.syntaxError("after decimal point in numeric literal")
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		integer = 0
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			p.pos = i
			return out, p.syntaxError("in exponent of numeric literal")
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		integer = 0
	}
	p.pos = i
	text := d[start:i]
	if integer > 0 && integer <= 15 {
		if d[digits] == '0' {
			return append(out, '0'), nil // 0 and -0
		}
		return append(out, text...), nil
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil || math.IsInf(f, 0) {
		return out, fmt.Errorf("number %s is not an IEEE 754 double", text)
	}
	return appendNumber(out, f), nil
}

// compareUTF16 orders two UTF-8 texts by their UTF-16 code units, as
// RFC 8785 orders member names. Byte order is code point order, which is
// UTF-16 order but where a character of U+E000..U+FFFF (lead byte 0xEE or
// 0xEF) meets one above U+FFFF (lead byte 0xF0..0xF4, a surrogate pair in
// UTF-16, whose first unit is below 0xE000).
func compareUTF16(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return cmpInt(len(a), len(b))
	}
	x, y := a[i], b[i]
	switch {
	case x >= 0xEE && x <= 0xEF && y >= 0xF0:
		return 1
	case y >= 0xEE && y <= 0xEF && x >= 0xF0:
		return -1
	case x < y:
		return -1
	}
	return 1
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// appendNumber appends f as ECMAScript's Number.prototype.toString prints
// it (RFC 8785 section 3.2.2.3), which is what encoding/json writes for a
// float64: the shortest digits that read back as f, in exponent form below
// 1e-6 and from 1e21 up, with the exponent's leading zero dropped.
func appendNumber(out []byte, f float64) []byte {
	if f == 0 {
		return append(out, '0') // also -0
	}
	format := byte('f')
	if abs := math.Abs(f); abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	n0 := len(out)
	out = strconv.AppendFloat(out, f, format, -1, 64)
	if format == 'e' {
		// e-07 is e-7
		if n := len(out); n-n0 >= 4 && out[n-4] == 'e' && out[n-3] == '-' && out[n-2] == '0' {
			out[n-2] = out[n-1]
			out = out[:n-1]
		}
	}
	return out
}

// writeNumber writes f as appendNumber does.
func writeNumber(buf *bytes.Buffer, f float64) {
	buf.Write(appendNumber(buf.AvailableBuffer(), f))
}

// writeString writes s as appendString does.
func writeString(buf *bytes.Buffer, s string) {
	buf.Write(appendString(buf.AvailableBuffer(), s))
}

// appendString escapes only what RFC 8785 section 3.2.2.2 escapes: the
// quote, the backslash and control characters (with the short forms
// \b \t \n \f \r where they exist). A byte that is not UTF-8 is written as
// U+FFFD.
func appendString[S string | []byte](out []byte, s S) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			j := i + 1
			for j < len(s) && s[j] >= 0x20 && s[j] != '"' && s[j] != '\\' && s[j] < utf8.RuneSelf {
				j++
			}
			out = append(out, s[i:j]...)
			i = j
			continue
		}
		if c >= utf8.RuneSelf {
			var rb [utf8.UTFMax]byte
			r, size := utf8.DecodeRune(rb[:copy(rb[:], s[i:])])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, r)
			} else {
				out = append(out, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch c {
		case '"':
			out = append(out, `\"`...)
		case '\\':
			out = append(out, `\\`...)
		case '\b':
			out = append(out, `\b`...)
		case '\t':
			out = append(out, `\t`...)
		case '\n':
			out = append(out, `\n`...)
		case '\f':
			out = append(out, `\f`...)
		case '\r':
			out = append(out, `\r`...)
		default:
			out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
	}
	return append(out, '"')
}
