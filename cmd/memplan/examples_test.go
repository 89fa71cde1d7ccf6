package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLauncherExamples runs docs/examples against a memplan built from
// this tree: the Python launcher, and the Slurm script with a stand-in
// srun. They are skipped where python3 or bash is missing.
func TestLauncherExamples(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "memplan")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	root, _ := filepath.Abs("../..")
	if py, err := exec.LookPath("python3"); err == nil {
		cmd := exec.Command(py, "docs/examples/launcher.py", "specs/gpt2-124m.yaml", "h100-80gb", bin)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), ": fits (") {
			t.Errorf("launcher.py: %v\n%s", err, out)
		}
		cmd = exec.Command(py, "docs/examples/launcher.py", "specs/llama-3-8b.yaml", "h100-80gb", bin)
		cmd.Dir = root
		out, _ = cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 4 || !strings.Contains(string(out), "cheapest fix") {
			t.Errorf("launcher.py on a model that does not fit: exit %d\n%s", cmd.ProcessState.ExitCode(), out)
		}
	} else {
		t.Log("python3 not found: launcher.py not run")
	}
	if sh, err := exec.LookPath("bash"); err == nil {
		// A stand-in srun that records it was called.
		srun := filepath.Join(dir, "srun")
		os.WriteFile(srun, []byte("#!/bin/sh\necho srun \"$@\"\n"), 0o755)
		for _, tt := range []struct {
			batch, want string
			code        int
		}{{"4", "srun python train.py --batch 4", 0}, {"64", "does not fit", 4}} {
			cmd := exec.Command(sh, "docs/examples/slurm-preflight.sh")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "BATCH="+tt.batch)
			out, _ := cmd.CombinedOutput()
			if cmd.ProcessState.ExitCode() != tt.code || !strings.Contains(string(out), tt.want) {
				t.Errorf("slurm-preflight.sh BATCH=%s: exit %d\n%s", tt.batch, cmd.ProcessState.ExitCode(), out)
			}
		}
	}
}
