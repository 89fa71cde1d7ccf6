package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
)

// TestNoDriverBuildIsStatic builds memplan for Linux with -tags nodriver
// and checks that it is fully static (no program interpreter, no shared
// library), so that it runs in a container without a C library (Alpine,
// distroless; docs/probe.md), and that the default build, which loads the
// driver with purego, needs nothing but the C library's libc, libdl and
// libpthread, which dlopen needs and every GPU node has. On linux/amd64 it
// runs both: their estimates are the same.
func TestNoDriverBuildIsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds memplan twice")
	}
	dir := t.TempDir()
	build := func(name string, flags ...string) *elf.File {
		t.Helper()
		out := filepath.Join(dir, name)
		// -pgo=off: the packages as the tests compiled them, from the cache.
		cmd := exec.Command("go", append(append([]string{"build", "-pgo=off", "-o", out}, flags...), ".")...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", flags, err, b)
		}
		f, err := elf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	libs := func(f *elf.File) []string {
		t.Helper()
		l, err := f.ImportedLibraries()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	interp := func(f *elf.File) bool {
		return slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	}
	static := build("static", "-tags", "nodriver")
	if interp(static) || len(libs(static)) > 0 {
		t.Errorf("-tags nodriver: interpreter %v, shared libraries %v; want a static binary", interp(static), libs(static))
	}
	def := build("default")
	if !interp(def) {
		t.Errorf("default build has no program interpreter: purego's dlopen needs one")
	}
	for _, l := range libs(def) {
		if !slices.Contains([]string{"libc.so.6", "libdl.so.2", "libpthread.so.0"}, l) {
			t.Errorf("default build needs %s; docs/probe.md names libc, libdl and libpthread only", l)
		}
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return
	}
	// Built without the loader, it estimates as the default build does.
	for _, spec := range []string{"mlp.yaml", "gpt2-124m.yaml", "llama-3.2-1b.yaml"} {
		var outs [2]string
		for i, bin := range []string{"static", "default"} {
			b, err := exec.Command(filepath.Join(dir, bin), "estimate", filepath.Join("..", "..", "specs", spec), "--format", "json").Output()
			if err != nil {
				t.Fatalf("%s estimate %s: %v", bin, spec, err)
			}
			outs[i] = string(b)
		}
		if outs[0] != outs[1] {
			t.Errorf("%s: the nodriver build's estimate differs from the default build's", spec)
		}
	}
}
