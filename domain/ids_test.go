package domain

import (
	"strings"
	"testing"

	"github.com/google/uuid"
)

// TestNewIDIsTheDashlessUUID: the prefix, an underscore and the UUIDv7 in lower-case
// hex without dashes, as the dashed form with its dashes removed.
func TestNewIDIsTheDashlessUUID(t *testing.T) {
	for _, prefix := range []string{PrefixRequest, PrefixEvent, PrefixDevice, ""} {
		id := NewID(prefix)
		if prefix != "" && !HasPrefix(id, prefix) {
			t.Fatalf("NewID(%q) = %q: not shaped as an identifier", prefix, id)
		}
		body := strings.TrimPrefix(id, prefix+"_")
		u, err := uuid.Parse(body)
		if err != nil || u.Version() != 7 || strings.ReplaceAll(u.String(), "-", "") != body {
			t.Fatalf("NewID(%q) = %q: %q is not a UUIDv7 in hex (%v)", prefix, id, body, err)
		}
	}
}

func BenchmarkNewID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = NewID(PrefixRequest)
	}
}
