// The compact binary encoding of receipts: what the server keeps for
// /v1/settle (in memory and in Redis), about a third of the JSON's size.
package limiter

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"strings"
)

// compactVersion opens a compact receipt (JSON opens with '[' or
// whitespace, so UnmarshalReceipt tells them apart by the first byte).
const compactVersion = 0x01

// MarshalCompact encodes the receipt as MarshalBinary does, in a compact
// binary form (some 80 bytes for two limits, against 210 in JSON): the
// form the server keeps for settle. UnmarshalReceipt reads both.
//
// The form: compactVersion, uvarint the number of entries, then per
// entry: uvarint nameLen<<1|shared
// (shared: the key starts with the limit's name, which is then not
// repeated), the name unless shared, uvarint keyLen and the key, uvarint
// the cost, and varint the RefundBefore (the first entry's; each next one
// as its difference from the previous one).
func (r Receipt) MarshalCompact() ([]byte, error) {
	n, prev := 1+uvarintLen(uint64(len(r.taken))), int64(0)
	for i, t := range r.taken { // the exact size: a kept receipt holds no spare capacity
		x := uint64(len(r.limits[i])) << 1
		if !strings.HasPrefix(t.Key, r.limits[i]) {
			n += len(r.limits[i])
		}
		d := t.RefundBefore - prev
		n += uvarintLen(x) + uvarintLen(uint64(len(t.Key))) + len(t.Key) + uvarintLen(uint64(max(t.Delta, 0))) + uvarintLen(uint64(d<<1)^uint64(d>>63))
		prev = t.RefundBefore
	}
	b := make([]byte, 1, n)
	b[0] = compactVersion
	b = binary.AppendUvarint(b, uint64(len(r.taken)))
	prev = 0
	for i, t := range r.taken {
		name := r.limits[i]
		shared := uint64(0)
		if strings.HasPrefix(t.Key, name) {
			shared = 1
		}
		b = binary.AppendUvarint(b, uint64(len(name))<<1|shared)
		if shared == 0 {
			b = append(b, name...)
		}
		b = binary.AppendUvarint(b, uint64(len(t.Key)))
		b = append(b, t.Key...)
		b = binary.AppendUvarint(b, uint64(max(t.Delta, 0)))
		b = binary.AppendVarint(b, t.RefundBefore-prev)
		prev = t.RefundBefore
	}
	return b, nil
}

// uvarintLen is the length of x as a uvarint.
func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

var errCompact = errors.New("truncated or malformed compact receipt")

// decodeCompact decodes the entries of a compact receipt (after its
// version byte): all of them, or an error.
func decodeCompact(b []byte) ([]receiptEntry, error) {
	var prev int64
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	str := func(n uint64) (string, bool) {
		if n > uint64(len(b)) {
			return "", false
		}
		s := string(b[:n])
		b = b[n:]
		return s, true
	}
	count, ok := uvarint()
	if !ok || count > uint64(len(b)) { // (an entry takes 4 bytes at least)
		return nil, errCompact
	}
	out := make([]receiptEntry, 0, count)
	for range count {
		var e receiptEntry
		x, ok := uvarint()
		if !ok {
			return nil, errCompact
		}
		nameLen, shared := x>>1, x&1 == 1
		if !shared {
			if e.Limit, ok = str(nameLen); !ok {
				return nil, errCompact
			}
		}
		keyLen, ok := uvarint()
		if !ok {
			return nil, errCompact
		}
		if e.Key, ok = str(keyLen); !ok {
			return nil, errCompact
		}
		if shared {
			if nameLen > uint64(len(e.Key)) {
				return nil, errCompact
			}
			e.Limit = e.Key[:nameLen]
		}
		cost, ok := uvarint()
		if !ok || cost > 1<<62 {
			return nil, errCompact
		}
		e.Cost = int64(cost)
		d, n := binary.Varint(b)
		if n <= 0 {
			return nil, errCompact
		}
		b = b[n:]
		prev += d
		e.RefundBefore = prev
		out = append(out, e)
	}
	if len(b) != 0 {
		return nil, errCompact
	}
	return out, nil
}
