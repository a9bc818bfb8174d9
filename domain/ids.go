package domain

import (
	"encoding/hex"
	"strings"

	"github.com/google/uuid"
)

// ID prefixes (ARCHITECTURE.md, "Identifiers"). An identifier is the prefix,
// an underscore and a time-ordered UUIDv7 in hex without dashes.
const (
	PrefixDevice       = "dev"
	PrefixLease        = "lse"
	PrefixRun          = "run"
	PrefixAgentRun     = "arun"
	PrefixFrame        = "frm"
	PrefixWebhook      = "whk"
	PrefixDelivery     = "dlv"
	PrefixOrder        = "ord"
	PrefixFulfilment   = "ful"
	PrefixOrganisation = "org"
	PrefixEvent        = "evt"
	PrefixRequest      = "req"
)

// NewID returns a fresh identifier with the given type prefix. It is
// written in one allocation (the identifier itself): every request, event
// and action mints some (BenchmarkNewID).
func NewID(prefix string) string {
	u := uuid.Must(uuid.NewV7())
	var digits [32]byte
	hex.Encode(digits[:], u[:])
	var b strings.Builder
	b.Grow(len(prefix) + 1 + len(digits))
	b.WriteString(prefix)
	b.WriteByte('_')
	b.Write(digits[:])
	return b.String()
}

// HasPrefix reports whether id is shaped as an identifier of the given prefix.
// It checks shape only; existence is the caller's question.
func HasPrefix(id, prefix string) bool {
	if !strings.HasPrefix(id, prefix+"_") {
		return false
	}
	body := id[len(prefix)+1:]
	if len(body) != 32 {
		return false
	}
	for _, c := range body {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
