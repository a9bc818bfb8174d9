package identity

import (
	"strings"
	"testing"
)

func TestParseBearer(t *testing.T) {
	tests := []struct {
		name   string
		header string
		want   string // "" means refused
	}{
		{"api key", "Bearer pbk_abc_def", "pbk_abc_def"},
		{"jwt", "Bearer eyJh.eyJz.c2ln", "eyJh.eyJz.c2ln"},
		{"scheme in lower case", "bearer tok", "tok"},
		{"scheme in upper case", "BEARER tok", "tok"},
		{"several spaces", "Bearer    tok", "tok"},
		{"trailing whitespace", "Bearer tok \t", "tok"},
		{"token68 padding", "Bearer abc==", "abc=="},
		{"every token68 character", "Bearer aZ09-._~+/", "aZ09-._~+/"},
		{"empty", "", ""},
		{"scheme only", "Bearer", ""},
		{"scheme and space", "Bearer ", ""},
		{"basic scheme", "Basic dXNlcjpwdw==", ""},
		{"no space", "Bearertok", ""},
		{"tab separator", "Bearer\ttok", ""},
		{"two tokens", "Bearer a b", ""},
		{"comma", "Bearer a,b", ""},
		{"padding in the middle", "Bearer a=b", ""},
		{"only padding", "Bearer ==", ""},
		{"non-ASCII", "Bearer tökén", ""},
		{"control character", "Bearer to\x00k", ""},
		{"ten kilobytes", "Bearer " + strings.Repeat("a", 10<<10), ""},
		{"quoted", `Bearer "tok"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseBearer(tt.header)
			if tt.want == "" {
				if err != ErrMalformedBearer {
					t.Fatalf("ParseBearer(%q): got (%q, %v); want ErrMalformedBearer", tt.header, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseBearer(%q): got (%q, %v); want %q", tt.header, got, err, tt.want)
			}
		})
	}
}

// FuzzParseBearer checks that no input panics and that an accepted token is
// a non-empty token68 no longer than MaxBearerLen found in the header.
func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{"Bearer pbk_abc_def", "Bearer eyJh.eyJz.c2ln", "bearer x==", "Basic x", "", "Bearer ",
		"Bearer " + strings.Repeat("a", MaxBearerLen+1), "Bearer tökén", "Bearer a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok, err := ParseBearer(header)
		if err != nil {
			return
		}
		if tok == "" || len(tok) > MaxBearerLen || !strings.Contains(header, tok) {
			t.Fatalf("ParseBearer(%q) accepted %q", header, tok)
		}
		for i := 0; i < len(tok); i++ {
			if tok[i] <= ' ' || tok[i] >= 0x7f {
				t.Fatalf("ParseBearer(%q) accepted %q with byte %#x", header, tok, tok[i])
			}
		}
	})
}
