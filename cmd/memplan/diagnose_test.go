package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const crashes = "../../diagnose/testdata/crashes/"

func TestDiagnoseCmd(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"log", []string{"diagnose", crashes + "frag-carve/log.txt"}, 0, "cause: fragmentation"},
		{"stats with the job", []string{"diagnose", crashes + "pressure-gpt2-b160/stats.jsonl", "--hf", "../../model/testdata/hf/gpt2.json",
			"--batch", "160", "--seq", "1024", "--precision", "amp-bf16", "--device", "h100-80gb"}, 0, "cause: pressure"},
		{"snapshot", []string{"diagnose", crashes + "leak-cache/snapshot.pickle.gz"}, 0, "crash.py:142 in leak_cache"},
		{"ranks", []string{"diagnose", crashes + "ranks/log.txt"}, 0, "rank 1: cause: pressure"},
		{"ddp race", []string{"diagnose", "../../diagnose/testdata/ddprace/race-rank0.pickle"}, 0, "DDP's old bucket, kept past its rebuild   16.00 MiB"},
		{"no files", []string{"diagnose"}, 2, "at least one evidence FILE"},
		{"missing file", []string{"diagnose", "nope.txt"}, 2, "nope.txt"},
		{"spec and hf", []string{"diagnose", crashes + "frag-carve/log.txt", "x.yaml", "--hf", "y.json", "--seq", "8"}, 2, "either SPEC or --hf"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"memplan"}, c.args...), &out, &errb)
			if code != c.code {
				t.Fatalf("memplan %v: exit %d, want %d\nstderr: %s", c.args, code, c.code, errb.String())
			}
			if got := out.String() + errb.String(); !strings.Contains(got, c.want) {
				t.Errorf("memplan %v: output lacks %q:\n%s", c.args, c.want, got)
			}
		})
	}
}

func TestDiagnoseTruncated(t *testing.T) {
	data, err := os.ReadFile(crashes + "leak-val-loss/stats.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "stats.jsonl")
	if err := os.WriteFile(p, data[:len(data)-100], 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"memplan", "diagnose", p}, &out, &errb); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(errb.String(), p+":") {
		t.Errorf("error does not name the file and line: %s", errb.String())
	}
}

func TestDiagnoseJSON(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"memplan", "diagnose", crashes + "other-gpt2/log.txt", "--format", "json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r struct {
		Cause   string           `json:"cause"`
		Figures map[string]int64 `json:"figures"`
		Fixes   []string         `json:"fixes"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Cause != "other-process" || r.Figures["other_processes_bytes"] < 70<<30 || len(r.Fixes) == 0 {
		t.Errorf("diagnose --format json = %s, %d other-process bytes, %d fixes; want other-process, ≥ 70 GiB, some fixes",
			r.Cause, r.Figures["other_processes_bytes"], len(r.Fixes))
	}
}
