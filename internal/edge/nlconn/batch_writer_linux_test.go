package nlconn

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadAcks: acknowledgements of a batch are matched to its requests by
// sequence number, errors kept, duplicates and other batches' skipped.
func TestReadAcks(t *testing.T) {
	ack := func(seq uint32, errno int32) []byte {
		b := binary.NativeEndian.AppendUint32(nil, 36)
		b = binary.NativeEndian.AppendUint16(b, unix.NLMSG_ERROR)
		b = binary.NativeEndian.AppendUint16(b, 0)
		b = binary.NativeEndian.AppendUint32(b, seq)
		b = binary.NativeEndian.AppendUint32(b, 4242)
		b = binary.NativeEndian.AppendUint32(b, uint32(-errno))
		return append(b, make([]byte, 16)...) // the request's header
	}
	w := &Writer{}
	w.acked, w.known = make([]error, 3), make([]bool, 3)
	var b []byte
	for _, a := range [][]byte{ack(9, 0), ack(10, 0), ack(11, int32(unix.EEXIST)), ack(10, int32(unix.ENOENT)), ack(13, 0)} {
		b = append(b, a...)
	}
	if got := w.readAcks(b, 10, 3); got != 2 {
		t.Fatalf("recorded %d, want 2", got)
	}
	if w.acked[0] != nil || w.acked[1] != unix.EEXIST || w.known[2] {
		t.Fatalf("acked %v known %v", w.acked, w.known)
	}
	w.settle(ErrNoAck)
	if w.acked[2] != ErrNoAck || w.acked[0] != nil {
		t.Fatalf("settled %v", w.acked)
	}
	if got := w.readAcks(b[:20], 10, 3); got != 0 {
		t.Fatalf("truncated message recorded %d", got)
	}
}
