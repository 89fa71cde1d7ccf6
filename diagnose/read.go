package diagnose

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
)

// Kind is the kind of an evidence file.
type Kind string

// The kinds of evidence file Read recognizes.
const (
	KindLog      Kind = "log"      // a log or stderr with torch.OutOfMemoryError messages
	KindStats    Kind = "stats"    // torch.cuda.memory_stats() as JSON or JSON lines
	KindSummary  Kind = "summary"  // torch.cuda.memory_summary() text
	KindSnapshot Kind = "snapshot" // torch.cuda.memory._dump_snapshot() pickle
)

// Evidence is what one file says. Only the fields of its Kind are set.
type Evidence struct {
	File string `json:"file"`
	Kind Kind   `json:"kind"`
	// OOMs are the out-of-memory messages of a log, in order.
	OOMs []OOM `json:"ooms,omitempty"`
	// Stats are the memory_stats() dumps of a stats file, or the one
	// state a summary shows.
	Stats []Stats `json:"stats,omitempty"`
	// Snapshot is the digest of a snapshot pickle.
	Snapshot *Snapshot `json:"snapshot,omitempty"`
}

// ErrUnknownKind is returned (wrapped, with the file's name) when a file is
// none of the kinds diagnose reads.
var ErrUnknownKind = errors.New("not an out-of-memory log, memory_stats JSON, memory_summary text or memory snapshot pickle")

// InputError is a problem with a user's file: unreadable, truncated, or
// of no known kind. Its message names the file (and line, where known).
type InputError struct {
	File string
	Line int
	Err  error
}

func (e *InputError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *InputError) Unwrap() error { return e.Err }

// Read reads one evidence file, gzipped or not, and detects its kind.
func Read(path string) (*Evidence, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if ev, ok := readMapped(path, f); ok {
		return ev, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return parse(path, f, sizeHint(f))
}

// mapAbove is the size from which an uncompressed snapshot is mapped into
// memory rather than read.
const mapAbove = 4 << 20

// readMapped decodes a large uncompressed snapshot from the file mapped
// into memory; false when the file is not one (or cannot be mapped), to be
// read as any other. A snapshot that cannot be decoded is an error either
// way.
func readMapped(path string, f *os.File) (ev *Evidence, ok bool) {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() < mapAbove || int64(int(st.Size())) != st.Size() {
		return nil, false
	}
	var head [1]byte
	if _, err := f.ReadAt(head[:], 0); err != nil || head[0] != 0x80 {
		return nil, false
	}
	data, unmap, err := mapFile(f, st.Size())
	if err != nil {
		return nil, false
	}
	defer unmap()
	// A file cut short while mapped faults (SIGBUS) where the missing
	// pages were: a panic here, then read as any other file.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			ev, ok = nil, false
		}
	}()
	s, err := decodeSnapshot(data)
	if err != nil {
		return nil, false // read again, for the same error from the reader
	}
	return &Evidence{File: path, Kind: KindSnapshot, Snapshot: s}, true
}

// sizeHint is a file's size after decompression, for reading it into one
// buffer: the size on disk, or for a gzip file the size its trailer
// records (modulo 4 GiB; only a hint, bounded to 1 GiB). 0 when unknown.
func sizeHint(f *os.File) int64 {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return 0
	}
	var head, tail [4]byte
	if _, err := f.ReadAt(head[:2], 0); err != nil || head[0] != 0x1f || head[1] != 0x8b {
		return st.Size()
	}
	if _, err := f.ReadAt(tail[:], st.Size()-4); err != nil {
		return 0
	}
	n := int64(binary.LittleEndian.Uint32(tail[:]))
	if n < st.Size() || n > 1<<30 {
		return 0
	}
	return n
}

// Parse reads evidence from r; name is used in errors and in the result.
func Parse(name string, r io.Reader) (*Evidence, error) { return parse(name, r, 0) }

func parse(name string, r io.Reader, hint int64) (*Evidence, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, &InputError{File: name, Err: fmt.Errorf("gzip: %w", err)}
		}
		br = bufio.NewReaderSize(zr, 1<<16)
	}
	head, _ := br.Peek(1)
	if len(head) == 1 && head[0] == 0x80 {
		s, err := readSnapshot(br, hint)
		if err != nil {
			return nil, &InputError{File: name, Err: err}
		}
		return &Evidence{File: name, Kind: KindSnapshot, Snapshot: s}, nil
	}
	data, err := io.ReadAll(br)
	if err != nil {
		return nil, &InputError{File: name, Err: err}
	}
	ev, err := parseText(data)
	if err != nil {
		var ie *InputError
		if errors.As(err, &ie) {
			ie.File = name
			return nil, ie
		}
		return nil, &InputError{File: name, Err: err}
	}
	ev.File = name
	return ev, nil
}

func parseText(data []byte) (*Evidence, error) {
	t := bytes.TrimLeft(data, " \t\r\n\ufeff")
	switch {
	case len(t) > 0 && t[0] == '{':
		st, err := ParseStats(data)
		if err != nil {
			return nil, err
		}
		return &Evidence{Kind: KindStats, Stats: st}, nil
	case bytes.Contains(data, []byte("PyTorch CUDA memory summary")):
		st, err := ParseSummary(data)
		if err != nil {
			return nil, err
		}
		return &Evidence{Kind: KindSummary, Stats: []Stats{st}}, nil
	case bytes.Contains(data, []byte("out of memory")):
		ooms, err := ParseLog(data)
		if err != nil {
			return nil, err
		}
		return &Evidence{Kind: KindLog, OOMs: ooms}, nil
	}
	return nil, ErrUnknownKind
}
