package gateway

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// reopen reads the state file at path as the next start of the gateway
// does, and closes it.
func reopen(t *testing.T, path string) (state []byte, found bool, err error) {
	t.Helper()
	sf, state, found, err := readStateFile(path)
	if err == nil {
		_ = sf.Close()
	}
	return state, found, err
}

func TestSimStateFile(t *testing.T) {
	big := bytes.Repeat([]byte("b"), 3*minSlotRoom)
	for _, c := range []struct {
		name string
		// before prepares the file (path) before it is opened.
		before func(t *testing.T, path string)
		// saves are saved in turn; then after may damage the file.
		saves [][]byte
		after func(t *testing.T, path string)
		// want is the state a start reads, or wantErr its error.
		want    string
		wantErr string
	}{
		{name: "none yet", want: ""},
		{name: "the last of many saves", saves: [][]byte{[]byte(`{"n":1}`), []byte(`{"n":2}`), []byte(`{"n":3}`), []byte(`{"n":4}`), []byte(`{"n":5}`)},
			want: `{"n":5}`},
		{name: "a save torn by a crash leaves the one before", saves: [][]byte{[]byte(`{"n":1}`), []byte(`{"n":2}`), []byte(`{"n":3}`)},
			after: func(t *testing.T, path string) { damage(t, path, []byte(`{"n":3}`)) }, want: `{"n":2}`},
		{name: "the earlier format is read", before: func(t *testing.T, path string) { write(t, path, []byte(`{"old":true}`)) },
			want: `{"old":true}`},
		{name: "the earlier format is replaced by the first save", before: func(t *testing.T, path string) { write(t, path, []byte(`{"old":true}`)) },
			saves: [][]byte{[]byte(`{"new":1}`), []byte(`{"new":2}`)}, want: `{"new":2}`},
		{name: "a state outgrowing its slot moves to a larger file", saves: [][]byte{[]byte(`{"n":1}`), big, []byte(`{"n":3}`)},
			want: `{"n":3}`},
		{name: "a state outgrowing its slot, read back", saves: [][]byte{[]byte(`{"n":1}`), big}, want: string(big)},
		{name: "no whole slot", saves: [][]byte{[]byte(`{"n":1}`), []byte(`{"n":2}`)},
			after: func(t *testing.T, path string) {
				damage(t, path, []byte(`{"n":1}`))
				damage(t, path, []byte(`{"n":2}`))
			},
			wantErr: "neither slot"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sim-1.state")
			if c.before != nil {
				c.before(t, path)
			}
			sf, _, _, err := readStateFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range c.saves {
				if err := sf.save(s); err != nil {
					t.Fatal(err)
				}
			}
			if err := sf.Close(); err != nil {
				t.Fatal(err)
			}
			if c.after != nil {
				c.after(t, path)
			}
			got, found, err := reopen(t, path)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %q, %v; want an error saying %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || string(got) != c.want || found != (c.want != "") {
				t.Fatalf("got %.40q (found %v), %v; want %.40q", got, found, err, c.want)
			}
		})
	}
}

// TestSimStateSavesInPlace: a save writes into the file as it is (no new
// file renamed into place, which costs the directory's sync too), once
// the file is in the slot format.
func TestSimStateSavesInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim-1.state")
	sf, _, _, err := readStateFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	if err := sf.save([]byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`{"n":2}`, `{"n":3}`} {
		if err := sf.save([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || before.Size() != after.Size() {
		t.Fatalf("the saves replaced or resized the file (same file %v, %d → %d bytes); want it written in place", os.SameFile(before, after), before.Size(), after.Size())
	}
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// damage changes a byte of the state s where the file holds it, as a
// write cut short would leave it.
func damage(t *testing.T, path string, s []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, s)
	if i < 0 {
		t.Fatalf("%s does not hold %s", path, s)
	}
	b[i+len(s)-2] ^= 0xff
	write(t, path, b)
}
