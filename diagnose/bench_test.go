package diagnose

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pickler writes the subset of pickle protocol 4 a memory snapshot uses.
type pickler struct {
	bytes.Buffer
	memo map[string]uint32
}

func (p *pickler) str(s string) {
	if i, ok := p.memo[s]; ok {
		p.WriteByte('j') // LONG_BINGET
		binary.Write(&p.Buffer, binary.LittleEndian, i)
		return
	}
	p.WriteByte(0x8c) // SHORT_BINUNICODE
	p.WriteByte(byte(len(s)))
	p.WriteString(s)
	p.WriteByte(0x94) // MEMOIZE
	p.memo[s] = uint32(len(p.memo))
}

func (p *pickler) int(v int64) {
	if v >= 0 && v < 1<<31 {
		p.WriteByte('J') // BININT
		binary.Write(&p.Buffer, binary.LittleEndian, int32(v))
		return
	}
	p.WriteByte(0x8a) // LONG1
	p.WriteByte(8)
	binary.Write(&p.Buffer, binary.LittleEndian, v)
}

func (p *pickler) dict(kv func())    { p.WriteString("}("); kv(); p.WriteByte('u') }
func (p *pickler) list(items func()) { p.WriteString("]("); items(); p.WriteByte('e') }

// bigSnapshot is a snapshot whose trace has n entries with 12 frames each,
// in the shape torch 2.11 writes (two steps' worth of alloc/free pairs).
func bigSnapshot(n int) []byte {
	p := &pickler{memo: map[string]uint32{}}
	p.WriteString("\x80\x04")
	frames := func(i int) {
		p.list(func() {
			for f := 0; f < 12; f++ {
				p.dict(func() {
					p.str("name")
					p.str("forward")
					p.str("filename")
					p.str("/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py")
					p.str("line")
					p.int(int64(1700 + f + i%7))
				})
			}
		})
	}
	p.dict(func() {
		p.str("segments")
		p.list(func() {
			p.dict(func() {
				p.str("total_size")
				p.int(2 << 30)
				p.str("allocated_size")
				p.int(1 << 30)
				p.str("blocks")
				p.list(func() {
					p.dict(func() { p.str("size"); p.int(1 << 30); p.str("state"); p.str("active_allocated") })
					p.dict(func() { p.str("size"); p.int(1 << 30); p.str("state"); p.str("inactive") })
				})
			})
		})
		p.str("device_traces")
		p.list(func() {
			p.list(func() {
				for i := 0; i < n; i++ {
					p.dict(func() {
						act := "alloc"
						if i%2 == 1 {
							act = "free_completed"
						}
						p.str("action")
						p.str(act)
						p.str("addr")
						p.int(140023047389184 + int64(i/2)*4096)
						p.str("size")
						p.int(int64(1+i%50) << 20)
						p.str("stream")
						p.int(0)
						p.str("time_us")
						p.int(1795419152837214 + int64(i))
						p.str("frames")
						frames(i)
					})
				}
			})
		})
	})
	p.WriteByte('.')
	return p.Bytes()
}

// TestLargeSnapshot reads a generated snapshot of about 100 MB and reports
// how long it took (the target is under 2 s; the figure is indicative on a
// shared machine).
func TestLargeSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("large snapshot")
	}
	data := bigSnapshot(210_000)
	start := time.Now()
	s, err := ReadSnapshot(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read %d MB snapshot (%d trace entries) in %v", len(data)>>20, s.Events, time.Since(start))
	if s.Events != 210_000 || s.Reserved != 2<<30 || s.LargestFree != 1<<30 {
		t.Errorf("ReadSnapshot = %d events, %d reserved, %d largest free; want 210000, 2 GiB, 1 GiB", s.Events, s.Reserved, s.LargestFree)
	}
}

func BenchmarkReadSnapshot100MB(b *testing.B) {
	data := bigSnapshot(210_000)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ReadSnapshot(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDiagnoseTorchSnapshot100MB reads a 100 MB snapshot shaped as
// torch dumps one (torchSnapshot: shared frames, 820,000 trace entries, a
// leak to find) from a file, as memplan diagnose does, and diagnoses it.
func BenchmarkDiagnoseTorchSnapshot100MB(b *testing.B) {
	data := torchSnapshot(torchEntries)
	p := filepath.Join(b.TempDir(), "snapshot.pickle")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e, err := Read(p)
		if err != nil {
			b.Fatal(err)
		}
		if r := Diagnose([]*Evidence{e}, Job{}); r.Cause != Leak || len(r.Sites) == 0 {
			b.Fatalf("Diagnose = %s, %d sites; want a leak with its site", r.Cause, len(r.Sites))
		}
	}
}
