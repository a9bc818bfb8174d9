package receiptchain

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// What a Problem found.
const (
	// Altered: an entry's content no longer matches its hash, or (when its
	// hash was recomputed) the next entry's record of it.
	Altered = "altered"
	// Removed: an entry is missing and appears nowhere later.
	Removed = "removed"
	// Reordered: an entry is out of place.
	Reordered = "reordered"
	// Truncated: the export ends without its end line.
	Truncated = "truncated"
	// Malformed: a line that is not an entry or the end line at all.
	Malformed = "malformed"
	// Foreign: an entry of another organisation.
	Foreign = "foreign"
	// Forged: the chain was rewritten from an earlier entry and every
	// hash after it recomputed, so it holds together but no longer
	// reaches the head recorded earlier at that entry.
	Forged = "forged"
	// Unmatched: the head recorded earlier (a hash alone) is no entry of
	// the chain: entries were removed from its end, or it was forged.
	Unmatched = "unmatched head"
	// BadSignature: a checkpoint whose signature does not verify under
	// the published keys (or names no published key).
	BadSignature = "bad signature"
)

// Problem is the first break in an export's chain: the line where it shows
// (1-based), the receipt it concerns (its idempotency key, when known) and
// what is wrong.
type Problem struct {
	Line   int
	Key    string
	Seq    int64
	Kind   string
	Detail string
}

func (p *Problem) Error() string {
	who := "the export"
	if p.Key != "" {
		who = fmt.Sprintf("receipt %q", p.Key)
		if p.Seq > 0 {
			who += fmt.Sprintf(" (entry %d)", p.Seq)
		}
	}
	return fmt.Sprintf("line %d: %s %s: %s", p.Line, who, p.Kind, p.Detail)
}

// Report is what a successful verification saw.
type Report struct {
	OrgID string
	// Entries is the number of chain entries; Receipts the number of
	// distinct receipts they record.
	Entries  int64
	Receipts int
	// HeadHash is the last entry's hash: record it to check that a later
	// export extends this one, or compare it with the service's.
	HeadHash string
	// Checkpoints counts the signed checkpoints the export holds; Held
	// the checkpoints given in Options that it was checked against.
	Checkpoints, Held int
	// SignaturesChecked is true when the checkpoints' signatures were
	// checked against published keys (Options.Keys).
	SignaturesChecked bool
	// Latest is the checkpoint counting the most entries among those
	// seen (in the export or held), nil when there was none.
	Latest *Checkpoint
}

// Options adjust a verification.
type Options struct {
	// Head, when set, is a head recorded earlier (or read from the
	// service) that the chain must extend: without it, an export whose
	// last entries were removed and whose end line was rewritten to match,
	// or one rewritten and re-hashed whole, cannot be told from a genuine
	// one.
	Head ExpectedHead
	// Keys, when not nil, are the published signing keys: every
	// checkpoint's signature is checked against them. Without them a
	// checkpoint is checked against the chain only.
	Keys *KeySet
	// Checkpoints are checkpoints held apart from the export (received by
	// webhook, or read from GET /v1/receipts/checkpoints): each must
	// match the chain, and one counting more entries than the export
	// holds proves that entries were removed from its end, even when the
	// end line was rewritten to match.
	Checkpoints []Checkpoint
}

// ExpectedHead is a chain head recorded earlier: its entry number (0 when
// only the hash is known) and its hash.
type ExpectedHead struct {
	Seq  int64
	Hash string
}

// ParseHead reads a head as `receipts verify` prints it, SEQ:HASH, or a
// hash alone; empty is no head.
func ParseHead(s string) (ExpectedHead, error) {
	var h ExpectedHead
	if s == "" {
		return h, nil
	}
	seq, hash, ok := strings.Cut(s, ":")
	if !ok {
		seq, hash = "", s
	}
	if seq != "" {
		n, err := strconv.ParseInt(seq, 10, 64)
		if err != nil || n < 1 {
			return h, fmt.Errorf("%q: want SEQ:HASH, SEQ an entry number from 1", s)
		}
		h.Seq = n
	}
	h.Hash = strings.ToLower(hash)
	if !hashRE.MatchString(h.Hash) {
		return h, fmt.Errorf("%q: the hash is not 64 hexadecimal digits", s)
	}
	return h, nil
}

var hashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Verify checks an export read from r (NDJSON, as GET /v1/receipts/export
// streams it) and returns its report, or a *Problem naming the first
// receipt that was altered, removed or reordered. Other errors are read
// failures. Memory is bounded by the longest line, plus the set of
// receipt keys counted for the report.
func Verify(r io.Reader, opt Options) (Report, error) {
	in := &lines{r: bufio.NewReaderSize(r, 64<<10)}
	var rep Report
	head := Start()
	keys := map[string]struct{}{}
	// What the chain holds at the expected head: the entry numbered like
	// it (its line, key and hash), or whether any entry has its hash.
	var atHead struct {
		line       int
		key, hash  string
		hashSeenAt int64
	}
	held := map[int64][]Checkpoint{}
	for _, c := range opt.Checkpoints {
		if opt.Keys != nil {
			if err := opt.Keys.CheckSignature(c); err != nil {
				return rep, &Problem{Kind: BadSignature, Seq: c.Entries,
					Detail: fmt.Sprintf("the checkpoint held apart (entry %d, signed at %s) does not verify: %v", c.Entries, c.SignedAt, err)}
			}
		}
		held[c.Entries] = append(held[c.Entries], c)
		rep.Held++
		rep.Latest = later(rep.Latest, c)
	}
	rep.SignaturesChecked = opt.Keys != nil
	for {
		ln, raw, err := in.next()
		if err == io.EOF {
			return rep, &Problem{Line: ln, Key: head.Key, Seq: head.Seq, Kind: Truncated,
				Detail: fmt.Sprintf("the export ends after entry %d without its end line: it was cut short, entries after it may be missing", head.Seq)}
		}
		if err != nil {
			return rep, err
		}
		if bytes.HasPrefix(raw, checkpointPrefix) {
			if p := checkpointAt(ln, raw, head, &rep, opt.Keys); p != nil {
				return rep, p
			}
			continue
		}
		end, entry, perr := parse(raw)
		if perr != nil {
			key := keyIn(raw)
			if nxt, ok := in.peekEntry(); ok && nxt.Seq == head.Seq+2 && nxt.PrevKey != "" {
				key = nxt.PrevKey
			}
			return rep, &Problem{Line: ln, Key: key, Seq: head.Seq + 1, Kind: Altered, Detail: "the line is not a chain entry: " + perr.Error()}
		}
		if canon, err := Canonical(raw); err != nil || !bytes.Equal(canon, raw) {
			key := keyIn(raw)
			if end != nil {
				key = ""
			}
			return rep, &Problem{Line: ln, Key: key, Seq: head.Seq + 1, Kind: Malformed,
				Detail: "the line is not in the canonical form the export writes (RFC 8785 JSON): it was re-serialised or edited"}
		}
		if end != nil {
			if p := checkEnd(ln, end, head, rep, opt); p != nil {
				return rep, p
			}
			if p := checkHead(ln, head, opt.Head, atHead.line, atHead.key, atHead.hash, atHead.hashSeenAt); p != nil {
				return rep, p
			}
			if p := checkHeld(ln, head, rep.OrgID, opt.Checkpoints); p != nil {
				return rep, p
			}
			if ln2, raw2, err := in.next(); err == nil {
				return rep, &Problem{Line: ln2, Key: keyIn(raw2), Kind: Malformed, Detail: "a line follows the end line"}
			} else if err != io.EOF {
				return rep, err
			}
			rep.HeadHash, rep.Receipts = head.Hash, len(keys)
			return rep, nil
		}
		key := receiptKey(entry.Receipt)
		// The entry itself: its hash must cover its content.
		if h, err := HashOf(*entry); err != nil || h != entry.Hash {
			p := &Problem{Line: ln, Key: key, Seq: entry.Seq, Kind: Altered, Detail: "its content does not match its hash"}
			if nxt, ok := in.peekEntry(); ok && nxt.PrevHash == entry.Hash && nxt.PrevKey != "" && nxt.PrevKey != key {
				p.Key, p.Detail = nxt.PrevKey, fmt.Sprintf("its content does not match its hash (the line now names receipt %q)", key)
			}
			return rep, p
		}
		if entry.V != Version {
			return rep, &Problem{Line: ln, Key: key, Seq: entry.Seq, Kind: Malformed, Detail: fmt.Sprintf("chain format v%d; this verifier reads v%d", entry.V, Version)}
		}
		if rep.OrgID == "" {
			rep.OrgID = entry.OrgID
		} else if entry.OrgID != rep.OrgID {
			return rep, &Problem{Line: ln, Key: key, Seq: entry.Seq, Kind: Foreign,
				Detail: fmt.Sprintf("it belongs to organisation %q, the export to %q", entry.OrgID, rep.OrgID)}
		}
		// Its place: the next number, linked to the entry before it.
		want := head.Seq + 1
		switch {
		case entry.Seq > want:
			return rep, missing(in, ln, want, entry, key)
		case entry.Seq < want:
			return rep, &Problem{Line: ln, Key: key, Seq: entry.Seq, Kind: Reordered,
				Detail: fmt.Sprintf("entry %d comes after entry %d: it is repeated or out of order", entry.Seq, head.Seq)}
		case entry.PrevHash != head.Hash || entry.PrevKey != head.Key:
			// The previous line hashes correctly, yet this entry records a
			// different one: the previous line was changed and its hash
			// recomputed.
			return rep, &Problem{Line: ln - 1, Key: entry.PrevKey, Seq: head.Seq, Kind: Altered,
				Detail: fmt.Sprintf("its hash was recomputed: line %d records the original (prevHash %s), the line now hashes to %s",
					ln, short(entry.PrevHash), short(head.Hash))}
		}
		head = Head{Seq: entry.Seq, Hash: entry.Hash, Key: key}
		if entry.Seq == opt.Head.Seq {
			atHead.line, atHead.key, atHead.hash = ln, key, entry.Hash
		}
		if entry.Hash == opt.Head.Hash && atHead.hashSeenAt == 0 {
			atHead.hashSeenAt = entry.Seq
		}
		for _, c := range held[entry.Seq] {
			if c.OrgID == entry.OrgID && c.HeadHash != entry.Hash {
				return rep, &Problem{Line: ln, Key: key, Seq: entry.Seq, Kind: Forged,
					Detail: fmt.Sprintf("a checkpoint held apart (signed at %s) records entry %d with hash %s; the export's entry hashes to %s: the chain was rewritten at or before this entry",
						c.SignedAt, c.Entries, short(c.HeadHash), short(entry.Hash))}
			}
		}
		rep.Entries = entry.Seq
		keys[key] = struct{}{}
	}
}

// missing explains a gap before entry (at line ln), where entry want was
// expected: reordered when want appears later, removed otherwise.
func missing(in *lines, ln int, want int64, entry *Entry, key string) *Problem {
	for {
		ln2, raw, err := in.next()
		if err != nil {
			break
		}
		_, e, perr := parse(raw)
		if perr == nil && e != nil && e.Seq == want {
			return &Problem{Line: ln, Key: key, Seq: entry.Seq, Kind: Reordered,
				Detail: fmt.Sprintf("entry %d is at line %d, ahead of entry %d (receipt %q), which is at line %d", entry.Seq, ln, want, receiptKey(e.Receipt), ln2)}
		}
	}
	if entry.Seq == want+1 {
		return &Problem{Line: ln, Key: entry.PrevKey, Seq: want, Kind: Removed,
			Detail: fmt.Sprintf("entry %d is missing: line %d holds entry %d (receipt %q), which follows it", want, ln, entry.Seq, key)}
	}
	return &Problem{Line: ln, Key: entry.PrevKey, Seq: entry.Seq - 1, Kind: Removed,
		Detail: fmt.Sprintf("entries %d to %d are missing (this receipt's is the last of them): line %d holds entry %d (receipt %q)",
			want, entry.Seq-1, ln, entry.Seq, key)}
}

func checkEnd(ln int, end *End, head Head, rep Report, opt Options) *Problem {
	switch {
	case rep.OrgID != "" && end.OrgID != rep.OrgID:
		return &Problem{Line: ln, Kind: Foreign, Detail: fmt.Sprintf("the end line names organisation %q, the entries %q", end.OrgID, rep.OrgID)}
	case end.Entries > head.Seq:
		return &Problem{Line: ln, Key: "", Seq: head.Seq + 1, Kind: Removed,
			Detail: fmt.Sprintf("the end line counts %d entries; the export holds %d: entries %d to %d were removed", end.Entries, head.Seq, head.Seq+1, end.Entries)}
	case end.Entries < head.Seq || end.HeadHash != head.Hash:
		return &Problem{Line: ln, Kind: Altered,
			Detail: fmt.Sprintf("the end line (%d entries, head %s) does not match the chain (%d entries, head %s)", end.Entries, short(end.HeadHash), head.Seq, short(head.Hash))}
	}
	return nil
}

// checkHead checks a chain that holds together against the head recorded
// earlier, exp: the chain (ending at head, its end line at line ln) must
// reach it. With exp.Seq known, a chain shorter than it lost entries from
// its end (removed); one whose entry exp.Seq (at line line, receipt key)
// hashes otherwise was rewritten and re-hashed (forged). With a hash
// alone, some entry must have it (hashSeenAt).
func checkHead(ln int, head Head, exp ExpectedHead, line int, key, hash string, hashSeenAt int64) *Problem {
	switch {
	case exp.Hash == "":
		return nil
	case exp.Seq == 0 && hashSeenAt == 0:
		return &Problem{Line: ln, Key: head.Key, Seq: head.Seq, Kind: Unmatched,
			Detail: fmt.Sprintf("the expected head %s is no entry of this chain (%d entries, head %s): entries were removed from its end, or it was rewritten; give the head as SEQ:HASH to tell which",
				short(exp.Hash), head.Seq, short(head.Hash))}
	case exp.Seq == 0:
		return nil
	case head.Seq < exp.Seq:
		return &Problem{Line: ln, Key: head.Key, Seq: head.Seq, Kind: Removed,
			Detail: fmt.Sprintf("the chain ends at entry %d, not at the expected head (entry %d, hash %s): entries %d to %d were removed from its end",
				head.Seq, exp.Seq, short(exp.Hash), head.Seq+1, exp.Seq)}
	case hash != exp.Hash:
		return &Problem{Line: line, Key: key, Seq: exp.Seq, Kind: Forged,
			Detail: fmt.Sprintf("entry %d hashes to %s, not to the expected head %s, though the chain holds together: it was rewritten at or before this entry and every hash after the change recomputed",
				exp.Seq, short(hash), short(exp.Hash))}
	}
	return nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

// parse reads one line: the end line or an entry.
func parse(raw []byte) (*End, *Entry, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var l struct {
		End *End `json:"end"`
		Entry
	}
	if err := dec.Decode(&l); err != nil {
		return nil, nil, err
	}
	if dec.More() {
		return nil, nil, errors.New("more than one value on the line")
	}
	if l.End != nil {
		if l.Entry.Seq != 0 || l.Entry.Hash != "" {
			return nil, nil, errors.New("an entry and the end line at once")
		}
		return l.End, nil, nil
	}
	if l.Seq < 1 || l.Hash == "" || len(l.Receipt) == 0 {
		return nil, nil, errors.New("seq, hash or receipt is missing")
	}
	e := l.Entry
	return nil, &e, nil
}

func receiptKey(r json.RawMessage) string {
	var k struct {
		IdempotencyKey string `json:"idempotencyKey"`
	}
	_ = json.Unmarshal(r, &k)
	return k.IdempotencyKey
}

var keyRE = regexp.MustCompile(`"idempotencyKey":"((?:[^"\\]|\\.)*)"`)

// keyIn finds a receipt key in a line that does not parse.
func keyIn(raw []byte) string {
	if m := keyRE.FindSubmatch(raw); m != nil {
		var s string
		if json.Unmarshal(append(append([]byte{'"'}, m[1]...), '"'), &s) == nil {
			return s
		}
	}
	return ""
}

// lines reads an export's lines, numbered from 1, with one line of
// look-ahead.
type lines struct {
	r       *bufio.Reader
	n       int
	peeked  []byte
	peekErr error
	hasPeek bool
}

func (l *lines) read() ([]byte, error) {
	b, err := l.r.ReadBytes('\n')
	if err == io.EOF && len(b) > 0 {
		err = nil
	}
	return bytes.TrimRight(b, "\r\n"), err
}

// next returns the next line and its number; io.EOF after the last (a
// final newline does not make an empty last line).
func (l *lines) next() (int, []byte, error) {
	var b []byte
	var err error
	if l.hasPeek {
		b, err, l.hasPeek = l.peeked, l.peekErr, false
	} else {
		b, err = l.read()
	}
	if err != nil {
		return l.n, nil, err
	}
	l.n++
	return l.n, b, nil
}

// peekEntry parses the next line without consuming it.
func (l *lines) peekEntry() (*Entry, bool) {
	if !l.hasPeek {
		l.peeked, l.peekErr = l.read()
		l.hasPeek = true
	}
	if l.peekErr != nil {
		return nil, false
	}
	_, e, err := parse(l.peeked)
	return e, err == nil && e != nil
}

// checkpointPrefix starts a checkpoint line (its one member, in canonical
// form).
var checkpointPrefix = []byte(`{"checkpoint":`)

// checkpointAt checks the checkpoint line raw (line ln), which follows the
// entry at head: it must be canonical, of the export's organisation, sign
// that very entry (its number and hash) and, with keys, verify.
func checkpointAt(ln int, raw []byte, head Head, rep *Report, keys *KeySet) *Problem {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var l struct {
		Checkpoint *Checkpoint `json:"checkpoint"`
	}
	if err := dec.Decode(&l); err != nil || l.Checkpoint == nil || dec.More() {
		return &Problem{Line: ln, Key: head.Key, Seq: head.Seq, Kind: Malformed, Detail: "the line is not a checkpoint"}
	}
	if canon, err := Canonical(raw); err != nil || !bytes.Equal(canon, raw) {
		return &Problem{Line: ln, Key: head.Key, Seq: head.Seq, Kind: Malformed,
			Detail: "the checkpoint is not in the canonical form the export writes (RFC 8785 JSON): it was re-serialised or edited"}
	}
	c := *l.Checkpoint
	if keys != nil {
		if err := keys.CheckSignature(c); err != nil {
			return &Problem{Line: ln, Key: head.Key, Seq: c.Entries, Kind: BadSignature,
				Detail: fmt.Sprintf("the checkpoint of entry %d (signed at %s) does not verify: %v", c.Entries, c.SignedAt, err)}
		}
	}
	switch {
	case rep.OrgID != "" && c.OrgID != rep.OrgID:
		return &Problem{Line: ln, Key: head.Key, Seq: c.Entries, Kind: Foreign,
			Detail: fmt.Sprintf("the checkpoint is of organisation %q, the export of %q", c.OrgID, rep.OrgID)}
	case c.Entries > head.Seq:
		return &Problem{Line: ln, Key: head.Key, Seq: head.Seq, Kind: Removed,
			Detail: fmt.Sprintf("a checkpoint signed at %s counts %d entries, but only %d precede it: entries %d to %d were removed", c.SignedAt, c.Entries, head.Seq, head.Seq+1, c.Entries)}
	case c.Entries < head.Seq:
		return &Problem{Line: ln, Key: head.Key, Seq: c.Entries, Kind: Reordered,
			Detail: fmt.Sprintf("the checkpoint of entry %d stands after entry %d; it belongs right after the entry it signs", c.Entries, head.Seq)}
	case c.HeadHash != head.Hash:
		return &Problem{Line: ln, Key: head.Key, Seq: head.Seq, Kind: Forged,
			Detail: fmt.Sprintf("the checkpoint signed at %s records entry %d with hash %s; the entry hashes to %s: the chain was rewritten at or before this entry",
				c.SignedAt, c.Entries, short(c.HeadHash), short(head.Hash))}
	}
	rep.Checkpoints++
	rep.Latest = later(rep.Latest, c)
	return nil
}

// checkHeld checks the end of a chain (head, its end line at line ln)
// against the checkpoints held apart: one of another organisation does not
// belong to it, and one counting more entries proves that entries were
// removed from the export's end, whatever its end line says.
func checkHeld(ln int, head Head, orgID string, held []Checkpoint) *Problem {
	for _, c := range held {
		switch {
		case orgID != "" && c.OrgID != orgID:
			return &Problem{Line: ln, Kind: Foreign, Detail: fmt.Sprintf("a checkpoint held apart is of organisation %q, the export of %q", c.OrgID, orgID)}
		case c.Entries > head.Seq:
			return &Problem{Line: ln, Key: head.Key, Seq: head.Seq, Kind: Removed,
				Detail: fmt.Sprintf("the export ends at entry %d, but a checkpoint signed at %s counts %d entries: entries %d to %d were removed from its end (and its end line rewritten)",
					head.Seq, c.SignedAt, c.Entries, head.Seq+1, c.Entries)}
		}
	}
	return nil
}

// later returns whichever of a and c counts more entries.
func later(a *Checkpoint, c Checkpoint) *Checkpoint {
	if a == nil || c.Entries > a.Entries {
		return &c
	}
	return a
}
