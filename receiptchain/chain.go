// Package receiptchain defines the hash chain that makes an organisation's
// receipts tamper-evident, and checks an export of it offline: it imports
// no database, HTTP or service package, so an auditor's tool (and
// `phonefleet receipts verify --file`) can use it alone.
//
// The chain. Every change of a receipt — its request (pending), its
// outcome (committed, failed, or outcome unknown) and each review — adds
// one entry to its organisation's chain, in the order of the event feed.
// Entry n of organisation O is the JSON object
//
//	{"v":1, "orgId":O, "seq":n, "event":E, "receipt":R, "prevKey":K, "prevHash":P, "hash":H}
//
// where E is the stable name of the event that changed the receipt
// ("action.requested", "action.committed", "action.failed",
// "action.outcome_unknown", "receipt.reviewed"), R the receipt as
// GET /v1/receipts/{idempotencyKey} shows it just after that event, K the
// idempotency key of entry n-1's receipt ("" for n = 1), P entry n-1's hash
// (64 zeros for n = 1) and
//
//	H = lower-case hex of SHA-256( RFC 8785 canonical JSON of the entry without "hash" )
//
// Because each entry carries the previous hash, changing, removing or
// moving any entry breaks every link after it; because it carries the
// previous entry's key, the entry after a removed one names what was
// removed. The chain is a function of the event feed alone, so a rebuilt
// read model has the same hashes.
//
// An export is the chain as NDJSON, oldest first, each line an entry in
// canonical form, followed by one end line
// {"end":{"orgId":O,"entries":N,"headHash":H}}, whose absence means the
// export was cut short.
package receiptchain

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// Version is the chain format this package writes and checks (the "v"
// member of every entry).
const Version = 1

// Genesis is the prevHash of an organisation's first entry.
var Genesis = strings.Repeat("0", 64)

// Entry is one link of an organisation's chain.
type Entry struct {
	V        int             `json:"v"`
	OrgID    string          `json:"orgId"`
	Seq      int64           `json:"seq"`
	Event    string          `json:"event"`
	Receipt  json.RawMessage `json:"receipt"`
	PrevKey  string          `json:"prevKey"`
	PrevHash string          `json:"prevHash"`
	Hash     string          `json:"hash"`
}

// End is the last line of an export.
type End struct {
	OrgID    string `json:"orgId"`
	Entries  int64  `json:"entries"`
	HeadHash string `json:"headHash"`
}

// Head is where an organisation's chain stands: its last entry's number,
// hash and receipt key (zero, Genesis and "" before the first entry).
type Head struct {
	Seq  int64
	Hash string
	Key  string
}

// Start is the head of an empty chain.
func Start() Head { return Head{Hash: Genesis} }

// body is an entry without its hash, the value that is hashed.
type body struct {
	V        int             `json:"v"`
	OrgID    string          `json:"orgId"`
	Seq      int64           `json:"seq"`
	Event    string          `json:"event"`
	Receipt  json.RawMessage `json:"receipt"`
	PrevKey  string          `json:"prevKey"`
	PrevHash string          `json:"prevHash"`
}

// HashOf computes e's hash from its other members (e.Hash is ignored).
func HashOf(e Entry) (string, error) {
	raw, err := json.Marshal(body{V: e.V, OrgID: e.OrgID, Seq: e.Seq, Event: e.Event, Receipt: e.Receipt, PrevKey: e.PrevKey, PrevHash: e.PrevHash})
	if err != nil {
		return "", err
	}
	canon, err := Canonical(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// Next links receipt (its JSON, as the receipts surface shows it), changed
// by event, after head in orgID's chain. It returns the new entry, with its
// receipt in canonical form, and the entry's line as an export writes it
// (canonical JSON, no newline).
//
// The receipt is the only part whose canonical form must be computed: the
// entry around it has fixed members, so its canonical form (members in
// RFC 8785 order, the receipt already canonical) is written directly —
// the same bytes HashOf and Line compute by canonicalising the whole entry
// again, each time (TestNextWritesWhatHashOfAndLineCompute), for a third of
// the work (issue 28: the chain's hashing was a sixth of the service's CPU
// per action).
func Next(orgID string, head Head, event string, receipt []byte, key string) (Entry, []byte, Head, error) {
	canon, err := Canonical(receipt)
	if err != nil {
		return Entry{}, nil, head, fmt.Errorf("receipt %q: %w", key, err)
	}
	e := Entry{V: Version, OrgID: orgID, Seq: head.Seq + 1, Event: event, Receipt: canon, PrevKey: head.Key, PrevHash: head.Hash}
	var buf bytes.Buffer
	buf.Grow(len(canon) + len(orgID) + len(event) + len(head.Key) + 256)
	writeEntry(&buf, e, "")
	sum := sha256.Sum256(buf.Bytes())
	e.Hash = hex.EncodeToString(sum[:])
	buf.Reset()
	writeEntry(&buf, e, e.Hash)
	return e, buf.Bytes(), Head{Seq: e.Seq, Hash: e.Hash, Key: key}, nil
}

// writeEntry writes the canonical form of e, whose receipt is canonical
// already: with its hash member when hash is not empty (the export line),
// without it (the hashed body) when it is. RFC 8785 orders the members by
// the UTF-16 code units of their names: event, hash, orgId, prevHash,
// prevKey, receipt, seq, v.
func writeEntry(buf *bytes.Buffer, e Entry, hash string) {
	buf.WriteString(`{"event":`)
	writeString(buf, e.Event)
	if hash != "" {
		buf.WriteString(`,"hash":`)
		writeString(buf, hash)
	}
	buf.WriteString(`,"orgId":`)
	writeString(buf, e.OrgID)
	buf.WriteString(`,"prevHash":`)
	writeString(buf, e.PrevHash)
	buf.WriteString(`,"prevKey":`)
	writeString(buf, e.PrevKey)
	buf.WriteString(`,"receipt":`)
	buf.Write(e.Receipt)
	buf.WriteString(`,"seq":`)
	writeNumber(buf, float64(e.Seq))
	buf.WriteString(`,"v":`)
	writeNumber(buf, float64(e.V))
	buf.WriteByte('}')
}

// Line is e as one export line: canonical JSON, without a newline.
func Line(e Entry) ([]byte, error) {
	raw, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return Canonical(raw)
}

// EndLine is the end line of an export of orgID's chain up to head.
func EndLine(orgID string, head Head) ([]byte, error) {
	raw, err := json.Marshal(struct {
		End End `json:"end"`
	}{End{OrgID: orgID, Entries: head.Seq, HeadHash: head.Hash}})
	if err != nil {
		return nil, err
	}
	return Canonical(raw)
}
