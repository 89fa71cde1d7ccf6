package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/memplan/memplan/probe"
)

// The CLI's golden tests are scripts in testdata/script/*.txtar: each runs
// memplan commands and compares their standard output, standard error and
// exit status with the files at the end of the script (testscript's
// language: https://pkg.go.dev/github.com/rogpeppe/go-internal/testscript).
// Every script starts in a directory holding a copy of testdata/fixtures
// (specs/, bad/, hf/, bench/), so the tests read nothing outside this
// package.
//
// When an output changes on purpose, regenerate the golden files inside
// the scripts and review the diff:
//
//	go test ./cmd/memplan -run TestScript -update
//	git diff cmd/memplan/testdata/script
//
// -update rewrites the file a failing `cmp stdout NAME` or `cmp stderr
// NAME` names inside the script; exit statuses (`exits N memplan ...`,
// below) are checked, not rewritten: fix those by hand.
var update = flag.Bool("update", false, "rewrite the golden files in testdata/script/*.txtar")

// fakeGPUEnv, when set to "h100" in a script's environment (env
// MEMPLAN_TEST_FAKE_GPU=h100), makes --probe and memplan probe use
// probe.Fake sized as the H100 instead of the CUDA driver.
const fakeGPUEnv = "MEMPLAN_TEST_FAKE_GPU"

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"memplan": func() {
			if os.Getenv(fakeGPUEnv) == "h100" {
				openDriver = func() (probe.Driver, error) { return fakeH100(), nil }
			}
			os.Exit(run(os.Args, os.Stdout, os.Stderr))
		},
	})
}

func fakeH100() *probe.Fake {
	return &probe.Fake{Name: "Fake H100", Total: 85_017_493_504, ContextBytes: 527 << 20, Granularity: 2 << 20}
}

func TestScript(t *testing.T) {
	fixtures, err := filepath.Abs(filepath.Join("testdata", "fixtures"))
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("testdata", "script"),
		UpdateScripts:       *update,
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("SOURCE_DATE_EPOCH", "1795392000") // 2026-11-23: reports carry a fixed date
			return os.CopyFS(env.WorkDir, os.DirFS(fixtures))
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits": exits,
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "cuda": // a CUDA driver loads here
				_, err := probe.Open()
				return err == nil, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
	})
}

// exits N CMD ARGS... runs CMD like exec and checks that it exits with
// status N: testscript's `! exec` tells only success from failure, and
// memplan's codes (1 run-time failure, 2 bad input, 3 and 4 for check and
// tune) mean different things. Its standard output and error are kept for
// cmp, as after exec.
func exits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits N CMD [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: %q is not an exit status", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}
