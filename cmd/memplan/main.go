// Command memplan predicts the GPU memory of a training run and the largest
// batch that fits, before the job starts.
//
// Exit codes: 0 success, 1 failure at run time, 2 bad usage or invalid
// input (a spec error names file:line).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/model"
)

func main() {
	tuneGC()
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// tuneGC sets the collector for a short run with a small heap, unless the
// user set GOGC or GOMEMLIMIT. Nothing is collected until the process
// holds firstCollection bytes: an estimate, check or tune command allocates
// 2 to 30 MB and exits, and a collection while it fills its simulation's
// fresh slabs costs it nearly a quarter of its time (write barriers on every
// pointer stored, then a mark of slabs full of pointers: Llama-3-70B's
// estimate command 27 → 19 ms on one core, docs/performance.md). After the
// first collection (a report, a plan, diagnose's 100 MB snapshot) the
// collector runs at five times the live heap instead of twice (13–15% off
// a command that collects often), under a 1 GiB soft limit that brings
// collection back before large inputs grow the heap far.
func tuneGC() {
	// ours: the settings the user left to memplan.
	oursGOGC, oursLimit := os.Getenv("GOGC") == "", os.Getenv("GOMEMLIMIT") == ""
	steady := func() {
		if oursGOGC {
			debug.SetGCPercent(400)
		}
		if oursLimit {
			debug.SetMemoryLimit(1 << 30)
		}
	}
	if !oursGOGC || !oursLimit {
		steady()
		return
	}
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(firstCollection)
	// The cleanup runs once the first collection has found the sentinel
	// unreachable.
	runtime.AddCleanup(&gcSentinel{}, func(struct{}) { steady() }, struct{}{})
}

// firstCollection is the memory the process may hold before its first
// collection.
const firstCollection = 64 << 20

// gcSentinel is allocated only to be collected (tuneGC); its pointer keeps
// it out of the tiny allocator, whose objects may never be collected.
type gcSentinel struct{ _ *int }

// usageError marks bad flags or arguments (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// run is main without os.Exit, so tests can call it.
func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.Run(flagsFirst(app, args))
	if err == nil {
		return 0
	}
	code := 1
	var ue usageError
	var ec exitCode
	switch {
	case model.IsSpecError(err) || errors.As(err, &ue) || isFlagError(err):
		code = 2
	case errors.As(err, &ec):
		code = ec.code
	}
	if msg := err.Error(); msg != "" {
		for _, line := range strings.Split(msg, "\n") {
			fmt.Fprintf(stderr, "memplan: error: %s\n", line)
		}
	}
	var h interface{ Hint() string }
	if errors.As(err, &h) {
		fmt.Fprintf(stderr, "memplan: hint: %s\n", h.Hint())
	}
	return code
}

// flagsFirst moves a command's flags before its arguments, so that
// "memplan estimate SPEC --batch 8" works: urfave/cli stops reading flags
// at the first argument.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	find := func(cs []*cli.Command, name string) *cli.Command {
		for _, c := range cs {
			if c.Name == name {
				return c
			}
		}
		return nil
	}
	cmd := find(app.Commands, args[1])
	if cmd == nil {
		return args
	}
	at := 2
	for at < len(args) && len(cmd.Subcommands) > 0 {
		sub := find(cmd.Subcommands, args[at])
		if sub == nil {
			break
		}
		cmd, at = sub, at+1
	}
	bools := map[string]bool{"help": true, "h": true}
	for _, f := range cmd.Flags {
		if _, ok := f.(*cli.BoolFlag); ok {
			for _, n := range f.Names() {
				bools[n] = true
			}
		}
	}
	var flags, pos []string
	rest := args[at:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && !bools[name] && i+1 < len(rest) {
			flags = append(flags, rest[i+1])
			i++
		}
	}
	out := append(append([]string(nil), args[:at]...), flags...)
	return append(out, pos...)
}

func isFlagError(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "flag provided but not defined") || strings.HasPrefix(s, "invalid value") ||
		strings.Contains(s, "Required flag") || strings.HasPrefix(s, "No help topic")
}

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      "memplan",
		Usage:     "predict the GPU memory of a training run before it starts",
		Writer:    stdout,
		ErrWriter: stderr,
		// Errors are printed once, by run, with their exit code.
		ExitErrHandler: func(*cli.Context, error) {},
		Description: `memplan reads a spec (a YAML file describing a model and how it is trained)
and predicts peak allocated and reserved memory as PyTorch reports them, and
the device total with the CUDA context, for a chosen GPU.

Exit codes: 0 success, 1 failure at run time, 2 bad usage or invalid input;
memplan check and memplan tune add 3 (fits, above the target band) and 4
(does not fit).`,
		Commands: []*cli.Command{estimateCmd(), tuneCmd(), checkCmd(), planCmd(), probeCmd(), reportCmd(), diagnoseCmd(), importCmd(), validateCmd(), devicesCmd(), benchCmd()},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{err.Error()}
		},
	}
	for _, cmd := range app.Commands {
		cmd.Before = positiveCounts
		// A command's own flags (a boolean given a value it cannot read:
		// --sp=maybe) are parsed by the command, not the app.
		cmd.OnUsageError = app.OnUsageError
	}
	return app
}

// countFlags are the flags that count something (samples, tokens, GPUs,
// steps): a spec reads 0 as "not given", so a 0 on the command line would
// be dropped without a word.
var countFlags = []string{"batch", "seq", "image", "grad-accum", "microbatches", "dp", "tp", "cp", "ep", "pp", "pp-virtual", "steps"}

// positiveCounts refuses a count flag given as 0, before the command runs
// (a negative one the spec's checks refuse, naming the spec).
func positiveCounts(c *cli.Context) error {
	for _, name := range c.LocalFlagNames() { // those given: one pass
		if slices.Contains(countFlags, name) && c.Int64(name) == 0 {
			return usageError{fmt.Sprintf("%s: --%s: must be positive, got 0", c.Command.Name, name)}
		}
	}
	return nil
}
