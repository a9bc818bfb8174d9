package gateway

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
)

// A sim phone's state file holds two slots, each a header and room for a
// state; a save writes the next state into the slot not holding the last
// one, in place, and syncs the file. A save thus costs one sync of data
// overwritten in place, where a new file renamed into place (the earlier
// format, still read) costs the file's sync, the rename and the
// directory's sync: two journal commits per action, the most of what an
// action on a gateway's sim spent beyond the tunnel's round trips. Atomic
// still: a save torn by a crash or power cut leaves a slot whose checksum
// fails, and the other slot holds the state before it. Durable still: the
// call that changed the phone answers only once the sync has returned.
//
// A slot: slotMagic, the save's sequence number (uint64), the state's
// length (uint32), the CRC-32C of those two and the state (uint32), then
// the state, padded to the slot's room. The room is fixed while the file
// lives; a state that outgrows it is written to a new file with twice the
// room, renamed into place (file and directory synced, as before).
const (
	slotMagic  = "pfsim\x00\x01\x00"
	slotHeader = len(slotMagic) + 8 + 4 + 4
	// minSlotRoom is the least room of a slot (a sim's state is a few
	// kilobytes).
	minSlotRoom = 16 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// stateFile is one sim phone's state file, open for its saves. It is not
// safe for concurrent use: the device's one-call-at-a-time lock (or its
// opening) serializes the saves.
type stateFile struct {
	path string
	f    *os.File // nil until the file is in the slot format
	room int      // bytes of state a slot holds
	seq  uint64   // the last save's sequence number
	next int      // the slot the next save writes
}

// readStateFile reads the state saved at path: the newest whole slot of
// a slot file, or the whole file in the earlier format (the state itself,
// JSON), which the first save replaces by a slot file. found is false when
// there is no file. Errors: the file cannot be read, or it is a slot file
// with no whole slot.
func readStateFile(path string) (sf *stateFile, state []byte, found bool, err error) {
	sf = &stateFile{path: path}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return sf, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	if !bytes.HasPrefix(raw, []byte(slotMagic)) {
		return sf, raw, true, nil // the earlier format
	}
	room := len(raw)/2 - slotHeader
	if room <= 0 || len(raw)%2 != 0 {
		return nil, nil, false, fmt.Errorf("a slot file of %d bytes", len(raw))
	}
	best := -1
	for i := range 2 {
		seq, st, ok := readSlot(raw[i*(slotHeader+room):(i+1)*(slotHeader+room)], room)
		if ok && (best < 0 || seq > sf.seq) {
			best, sf.seq, state = i, seq, st
		}
	}
	if best < 0 {
		return nil, nil, false, errors.New("neither slot holds a whole state")
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, false, err
	}
	sf.f, sf.room, sf.next = f, room, 1-best
	return sf, state, true, nil
}

// readSlot reads one slot of room bytes of state: its sequence number and
// state, ok when its magic, length and checksum hold.
func readSlot(b []byte, room int) (seq uint64, state []byte, ok bool) {
	if !bytes.HasPrefix(b, []byte(slotMagic)) {
		return 0, nil, false
	}
	h := b[len(slotMagic):slotHeader]
	seq = binary.BigEndian.Uint64(h[0:8])
	n := int(binary.BigEndian.Uint32(h[8:12]))
	if n > room {
		return 0, nil, false
	}
	state = b[slotHeader : slotHeader+n]
	if slotSum(h[0:12], state) != binary.BigEndian.Uint32(h[12:16]) {
		return 0, nil, false
	}
	return seq, bytes.Clone(state), true
}

func slotSum(seqAndLen, state []byte) uint32 {
	c := crc32.Update(0, castagnoli, seqAndLen)
	return crc32.Update(c, castagnoli, state)
}

// slot returns the slot saving state under seq, with room bytes of state.
func slot(seq uint64, state []byte, room int) []byte {
	b := make([]byte, slotHeader+room)
	copy(b, slotMagic)
	h := b[len(slotMagic):slotHeader]
	binary.BigEndian.PutUint64(h[0:8], seq)
	binary.BigEndian.PutUint32(h[8:12], uint32(len(state)))
	binary.BigEndian.PutUint32(h[12:16], slotSum(h[0:12], state))
	copy(b[slotHeader:], state)
	return b
}

// save makes state the saved one, durably (on disk once save returns).
func (sf *stateFile) save(state []byte) error {
	sf.seq++
	if sf.f == nil || len(state) > sf.room {
		return sf.replace(state)
	}
	if _, err := sf.f.WriteAt(slot(sf.seq, state, sf.room), int64(sf.next*(slotHeader+sf.room))); err != nil {
		return err
	}
	if err := sf.f.Sync(); err != nil {
		return err
	}
	sf.next = 1 - sf.next
	return nil
}

// replace writes a new slot file holding state, with room for twice it,
// through a temporary file renamed into place (saveFileAtomic), and opens
// it for the next saves. Its second slot is empty: an earlier state is
// not needed once the new file is in place.
func (sf *stateFile) replace(state []byte) error {
	room := max(minSlotRoom, 2*len(state))
	b := make([]byte, 2*(slotHeader+room)) // every block written now: the saves overwrite, never allocate
	copy(b, slot(sf.seq, state, room))
	if err := saveFileAtomic(sf.path, b, true); err != nil {
		return err
	}
	if sf.f != nil {
		_ = sf.f.Close()
	}
	f, err := os.OpenFile(sf.path, os.O_RDWR, 0)
	if err != nil {
		sf.f = nil // the next save replaces the file again
		return err
	}
	sf.f, sf.room, sf.next = f, room, 1
	return nil
}

// Close closes the file.
func (sf *stateFile) Close() error {
	if sf.f == nil {
		return nil
	}
	err := sf.f.Close()
	sf.f = nil
	return err
}
