package diagnose

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Argument sizes of pickle opcodes (Python's pickletools), indexed by
// opcode: a fixed size, the size of a length prefix, or a count of lines.
var fixedArg, lenArg, lineArg [256]int

// noArg[op] is set for opcodes without an argument.
var noArg [256]bool

func init() {
	for op, n := range map[byte]int{'J': 4, 'K': 1, 'M': 2, 'G': 8, 'h': 1, 'j': 4, 'q': 1, 'r': 4, 0x80: 1, 0x82: 1, 0x83: 2, 0x84: 4} {
		fixedArg[op] = n
	}
	for op, n := range map[byte]int{0x8a: 1, 0x8b: 4, 'T': 4, 'U': 1, 'B': 4, 'C': 1, 'X': 4, 0x8c: 1, 0x8d: 8, 0x8e: 8, 0x96: 8} {
		lenArg[op] = n
	}
	for op, n := range map[byte]int{'I': 1, 'L': 1, 'F': 1, 'S': 1, 'V': 1, 'P': 1, 'g': 1, 'p': 1, 'c': 2, 'i': 2} {
		lineArg[op] = n
	}
	for _, op := range []byte("(.012NRabdelostu)]}Q\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92\x93\x94\x97\x98") {
		noArg[op] = true
	}
}

// prescan walks a pickle's opcodes and rejects one whose lengths point
// past the end of the data, before gopickle (v0.2.0) allocates what a
// length asks for: a corrupt or hostile file must give an error, not
// exhaust memory. It also returns the memo indices that BINGET and
// LONG_BINGET read, for decodePickle to keep only those, and the number of
// EMPTY_DICTs (at most as many trace entries), to size its tables.
func prescan(data []byte) (memoRefs, error) {
	refs := memoRefs{0}
	for i := 0; i < len(data); {
		op := data[i]
		i++
		switch {
		case op == '.':
			return refs, nil
		case op == '}':
			refs[0]++
		case (op == 'h' || op == 'j') && i+fixedArg[op] <= len(data):
			idx := uint64(data[i])
			if op == 'j' {
				idx = uint64(binary.LittleEndian.Uint32(data[i:]))
			}
			refs.set(idx, len(data))
			i += fixedArg[op]
		case op == 0x95: // FRAME: an 8-byte length, then opcodes
			if i+8 > len(data) || binary.LittleEndian.Uint64(data[i:]) > uint64(len(data)-i-8) {
				return nil, errors.New("snapshot pickle cut short (a frame runs past the end)")
			}
			i += 8
		case fixedArg[op] > 0:
			i += fixedArg[op]
		case lenArg[op] > 0:
			n := lenArg[op]
			if i+n > len(data) {
				return nil, errors.New("snapshot pickle cut short")
			}
			var l uint64
			for k := n - 1; k >= 0; k-- {
				l = l<<8 | uint64(data[i+k])
			}
			if l > uint64(len(data)-i-n) {
				return nil, errors.New("snapshot pickle cut short (a string runs past the end)")
			}
			i += n + int(l)
		case lineArg[op] > 0:
			for k := 0; k < lineArg[op]; k++ {
				j := bytes.IndexByte(data[i:], '\n')
				if j < 0 {
					return nil, errors.New("snapshot pickle cut short")
				}
				i += j + 1
			}
		case noArg[op]:
		default:
			return nil, fmt.Errorf("snapshot pickle: unknown opcode 0x%02x at byte %d", op, i-1)
		}
	}
	return nil, errors.New("snapshot pickle cut short (no STOP)")
}

// memoRefs is a set of memo indices, as a bitset after a first word that
// holds the count of EMPTY_DICTs.
type memoRefs []uint64

// dicts is the number of EMPTY_DICT opcodes prescan saw.
func (m memoRefs) dicts() int { return int(m[0]) }

// set adds idx; an index beyond the data's length cannot have been stored
// (each MEMOIZE takes a byte) and is left out.
func (m *memoRefs) set(idx uint64, n int) {
	if idx >= uint64(n) {
		return
	}
	for uint64(len(*m)) <= 1+idx/64 {
		*m = append(*m, 0)
	}
	(*m)[1+idx/64] |= 1 << (idx % 64)
}

func (m memoRefs) has(idx uint64) bool {
	return 1+idx/64 < uint64(len(m)) && m[1+idx/64]&(1<<(idx%64)) != 0
}

// words is the bitset's words, index idx's at idx/64.
func (m memoRefs) words() []uint64 { return m[1:] }
