package diagnose

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// digestVia reads a snapshot with decodePickle or, with gp, gopickle.
func digestVia(t *testing.T, data []byte, gp bool) *Snapshot {
	t.Helper()
	refs, err := prescan(data)
	if err != nil {
		t.Fatal(err)
	}
	var top pval
	tabs := newTraceTables()
	if gp {
		v, err := unpickle(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		top = fromGo(v)
	} else if top, tabs, err = decodePickle(data, refs); err != nil {
		t.Fatal(err)
	}
	s, err := digest(top, tabs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDecodePickleMatchesGopickle reads every fixture snapshot and a
// generated one both ways: the subset decoder must give the digest
// gopickle gives.
func TestDecodePickleMatchesGopickle(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "crashes", "*", "snapshot.pickle.gz"))
	if len(files) == 0 {
		t.Fatal("no fixture snapshots")
	}
	inputs := map[string][]byte{"generated": bigSnapshot(2000), "torch-shaped": torchSnapshot(20000)}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(fh)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(zr)
		fh.Close()
		if err != nil {
			continue // a fixture cut short on purpose
		}
		inputs[f] = data
	}
	for name, data := range inputs {
		t.Run(name, func(t *testing.T) {
			if _, err := prescan(data); err != nil {
				t.Skip(err)
			}
			fast, slow := digestVia(t, data, false), digestVia(t, data, true)
			if !reflect.DeepEqual(fast, slow) {
				t.Errorf("decodePickle digest %+v, gopickle %+v", fast, slow)
			}
		})
	}
}

// TestDecodePickleSubset checks that an opcode outside the subset (here
// BINPUT) is refused with errSubset, and that ReadSnapshot then falls back
// to gopickle.
func TestDecodePickleSubset(t *testing.T) {
	data := []byte("\x80\x04}q\x00(\x8c\x08segments]q\x01u.")
	refs, err := prescan(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := decodePickle(data, refs); err != errSubset {
		t.Errorf("decodePickle(BINPUT) = %v, want errSubset", err)
	}
	s, err := ReadSnapshot(bytes.NewReader(data))
	if err != nil || s.Segments != 0 {
		t.Errorf("ReadSnapshot(BINPUT) = %+v, %v; want an empty snapshot", s, err)
	}
}

// TestFromGoSelfReference: a list that holds itself (BINPUT, BINGET,
// APPEND through gopickle) must not recurse without end.
func TestFromGoSelfReference(t *testing.T) {
	data := []byte("\x80\x02]q\x00h\x00a.")
	if _, err := ReadSnapshot(bytes.NewReader(data)); err == nil {
		t.Error("ReadSnapshot(self-referencing list) = nil error, want not a dict")
	}
}

// TestReadMapped: a large uncompressed snapshot, decoded from the file
// mapped into memory, digests as it does from a reader, leak sites
// included.
func TestReadMapped(t *testing.T) {
	data := torchSnapshot(60000)
	p := filepath.Join(t.TempDir(), "snapshot.pickle")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ReadSnapshot(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(e.Snapshot, want) {
		t.Errorf("Read(mapped) = %+v, ReadSnapshot = %+v", e.Snapshot, want)
	}
	if g := want.Growth; g == nil || len(g.Sites) == 0 || g.Sites[0].Frame != "u/train.py:87 in step" || g.PerStep != 20<<20 {
		t.Errorf("ReadSnapshot growth = %+v, want 20 MiB a step from u/train.py:87 in step", g)
	}
}

// TestFromGoShared: a list that holds the one before it twice, forty deep
// (BINPUT sends it to gopickle), is 2^40 lists if each reference is
// converted anew; shared, it is forty-one. The fuzzer found a 98 KB file
// that never finished that way.
func TestFromGoShared(t *testing.T) {
	var p bytes.Buffer
	p.WriteString("\x80\x02]q\x000")
	for k := 1; k <= 40; k++ {
		fmt.Fprintf(&p, "]q%c(h%ch%ce0", k, k-1, k-1)
	}
	fmt.Fprintf(&p, "}(\x8c\x08segmentsh%cu.", 40)
	done := make(chan error, 1)
	go func() {
		_, err := ReadSnapshot(bytes.NewReader(p.Bytes()))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "segment is not a dict") {
			t.Errorf("ReadSnapshot(shared lists) = %v, want a segment is not a dict", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ReadSnapshot(shared lists) did not finish in 20 s")
	}
}

// TestEmptyDictFrame: a trace entry whose frames list holds an empty dict
// (never filled, so without items) reads as an entry without frames. The
// fuzzer found the nil dereference.
func TestEmptyDictFrame(t *testing.T) {
	data := []byte("\x80\x04}(\x8c\x08segments]\x8c\x0ddevice_traces](](}(\x8c\x06action\x8c\x05alloc\x8c\x04size\x4b\x07\x8c\x06frames](}eueeu.")
	s, err := ReadSnapshot(bytes.NewReader(data))
	if err != nil || s.Events != 1 {
		t.Errorf("ReadSnapshot = %+v, %v; want one trace entry", s, err)
	}
}

// TestDecodeReadBeforeFilled: a list memoized, read back by a GET and
// only then filled with a frame (Python's pickler never does this) must be
// the same list everywhere: it is not folded into a stack, whose copies
// would go stale.
func TestDecodeReadBeforeFilled(t *testing.T) {
	frame := "}(\x8c\x04name\x8c\x01f\x8c\x08filename\x8c\x04a.py\x8c\x04line\x4b\x07u"
	// P = []; L = [] (memo 0); P.append(L); push L; L.extend([frame]); P.append(L)
	data := []byte("\x80\x04]]\x94ah\x00(" + frame + "ea.")
	refs, err := prescan(data)
	if err != nil {
		t.Fatal(err)
	}
	top, tabs, err := decodePickle(data, refs)
	if err != nil {
		t.Fatal(err)
	}
	n := func(v pval) int {
		if v.kind == pStack {
			return len(tabs.stackFrames(int32(v.i)))
		}
		return len(v.list())
	}
	items := top.list()
	if len(items) != 2 || n(items[0]) != 1 || n(items[1]) != 1 {
		t.Errorf("decoded %d items, holding %v; want the one list twice, holding the frame", len(items), []int{n(items[0]), n(items[1])})
	}
}
