package diagnose

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func seed(f *testing.F, file string) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "crashes", "*", file))
	for _, p := range paths[:min(len(paths), 4)] {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if filepath.Ext(p) == ".gz" {
			zr, err := gzip.NewReader(bytes.NewReader(data))
			if err != nil {
				f.Fatal(err)
			}
			if data, err = io.ReadAll(zr); err != nil {
				f.Fatal(err)
			}
			data = data[:min(len(data), 64<<10)]
		}
		f.Add(data)
	}
}

func nonNegative(t *testing.T, vs ...int64) {
	for _, v := range vs {
		if v < 0 {
			t.Fatalf("negative byte count %d", v)
		}
	}
}

func FuzzParseLog(f *testing.F) {
	seed(f, "log.txt")
	f.Fuzz(func(t *testing.T, data []byte) {
		ooms, err := ParseLog(data)
		if err != nil {
			return
		}
		for _, o := range ooms {
			nonNegative(t, o.Request, o.Total, o.Free, o.InUse, o.Others, o.Allowed, o.Allocated, o.Reserved)
		}
	})
}

func FuzzParseStats(f *testing.F) {
	seed(f, "stats.jsonl")
	f.Fuzz(func(t *testing.T, data []byte) {
		ss, err := ParseStats(data)
		if err != nil {
			return
		}
		for _, s := range ss {
			nonNegative(t, s.Allocated, s.Reserved, s.PeakAllocated, s.PeakReserved, s.InactiveSplit, s.Retries, s.OOMs)
		}
	})
}

func FuzzParseSummary(f *testing.F) {
	seed(f, "summary.txt")
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSummary(data)
		if err != nil {
			return
		}
		nonNegative(t, s.Allocated, s.Reserved, s.PeakAllocated, s.PeakReserved, s.InactiveSplit, s.Retries, s.OOMs)
	})
}

func FuzzReadSnapshot(f *testing.F) {
	seed(f, "snapshot.pickle.gz")
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadSnapshot(bytes.NewReader(data))
		if err != nil {
			return
		}
		nonNegative(t, s.Reserved, s.Free, s.LargestFree, s.Request, s.DeviceFree)
		if r := s.DDPRace; r != nil && (r.Old < minRaceBytes || 2*r.Old < r.New || r.New <= 0) {
			t.Errorf("race %+v found outside its rule", *r)
		}
	})
}

// FuzzDecodePickle fuzzes the subset decoder from small snapshots: it must
// not panic, and what it decodes must digest without one.
func FuzzDecodePickle(f *testing.F) {
	f.Add(bigSnapshot(3))
	f.Add(torchSnapshot(10)) // shared frames and stacks, folded through the memo
	f.Add([]byte("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01G?\xf0\x00\x00\x00\x00\x00\x00\x88N\x8a\x02\xff\xffh\x01\x86e\x94u."))
	f.Fuzz(func(t *testing.T, data []byte) {
		refs, err := prescan(data)
		if err != nil {
			return
		}
		if v, tabs, err := decodePickle(data, refs); err == nil {
			digest(v, tabs) //nolint:errcheck // only panics matter here
		}
	})
}
