package identity

import (
	"errors"
	"strings"
)

// MaxBearerLen bounds an accepted bearer token. Real access tokens are a
// few kilobytes at most; anything longer is refused before any parsing.
const MaxBearerLen = 8 << 10

// ErrMalformedBearer is returned for an Authorization value that is not
// `Bearer <token68>`.
var ErrMalformedBearer = errors.New("malformed bearer credentials")

// ParseBearer returns the token of an Authorization header value of the form
// `Bearer <token>` (RFC 6750 2.1: the scheme in any case, one or more
// spaces, a token68, optional trailing whitespace). Any other shape —
// another scheme, an empty or over-long token, a character outside token68,
// non-ASCII — is ErrMalformedBearer. It never panics, whatever the input.
func ParseBearer(header string) (string, error) {
	if len(header) > MaxBearerLen+64 {
		return "", ErrMalformedBearer
	}
	const scheme = "bearer"
	if len(header) < len(scheme)+2 || !strings.EqualFold(header[:len(scheme)], scheme) || header[len(scheme)] != ' ' {
		return "", ErrMalformedBearer
	}
	tok := strings.TrimLeft(header[len(scheme):], " ")
	tok = strings.TrimRight(tok, " \t")
	if tok == "" || len(tok) > MaxBearerLen {
		return "", ErrMalformedBearer
	}
	// token68 = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
	i := 0
	for ; i < len(tok); i++ {
		c := tok[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/') {
			break
		}
	}
	if i == 0 {
		return "", ErrMalformedBearer
	}
	for ; i < len(tok); i++ {
		if tok[i] != '=' {
			return "", ErrMalformedBearer
		}
	}
	return tok, nil
}
