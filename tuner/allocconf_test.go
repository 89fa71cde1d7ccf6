package tuner

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/memplan/memplan/alloc"
	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// mlpSpec loads specs/mlp.yaml with a 1000-byte device, for fake oracles.
func mlpSpec(t testing.TB, conf string) *model.Spec {
	t.Helper()
	s, err := model.Load(filepath.Join("..", "specs", "mlp.yaml"), model.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	s.Device.Memory = 1000
	s.Training.AllocConf = conf
	return s
}

// perConf is a fake oracle: fixed[conf] + per·batch bytes, so each
// allocator setting has its own fixed cost.
func perConf(fixed map[string]int64, per int64) Oracle {
	return func(s *model.Spec) (int64, error) {
		f, ok := fixed[s.Training.AllocConf]
		if !ok {
			return 0, fmt.Errorf("unexpected alloc_conf %q", s.Training.AllocConf)
		}
		return f + per*s.Training.Batch, nil
	}
}

func TestWithExpandable(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "expandable_segments:True"},
		{"max_split_size_mb:256", "max_split_size_mb:256,expandable_segments:True"},
		{"expandable_segments:False", "expandable_segments:True"},
		{"expandable_segments:False,max_split_size_mb:256,", "max_split_size_mb:256,expandable_segments:True"},
		{"roundup_power2_divisions:[256:1,512:2,>:4], expandable_segments : False",
			"roundup_power2_divisions:[256:1,512:2,>:4],expandable_segments:True"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := WithExpandable(tt.in)
			if got != tt.want {
				t.Fatalf("WithExpandable(%q) = %q, want %q", tt.in, got, tt.want)
			}
			c, err := alloc.Parse(got)
			if err != nil || !c.ExpandableSegments {
				t.Errorf("WithExpandable(%q) = %q: parses to %+v, %v; want expandable", tt.in, got, c, err)
			}
		})
	}
}

func TestCandidates(t *testing.T) {
	tests := []struct {
		current      string
		advice, tune []string
	}{
		{"", []string{Expandable}, []string{"", Expandable}},
		{"expandable_segments:True", nil, []string{"", Expandable}},
		{"expandable_segments:False", []string{Expandable}, []string{"", Expandable}},
		{"max_split_size_mb:256", []string{"max_split_size_mb:256,expandable_segments:True", Expandable},
			[]string{"", Expandable, "max_split_size_mb:256", "max_split_size_mb:256,expandable_segments:True"}},
		{"backend:cudaMallocAsync", nil, []string{"", Expandable, "backend:cudaMallocAsync", "backend:cudaMallocAsync,expandable_segments:True"}},
		{"max_split_size_mb:8", nil, []string{"", Expandable, "max_split_size_mb:8", "max_split_size_mb:8,expandable_segments:True"}},
	}
	for _, tt := range tests {
		t.Run(tt.current, func(t *testing.T) {
			if got := AdviceCandidates(tt.current); !reflect.DeepEqual(got, tt.advice) {
				t.Errorf("AdviceCandidates(%q) = %q, want %q", tt.current, got, tt.advice)
			}
			if got := SearchCandidates(tt.current); !reflect.DeepEqual(got, tt.tune) {
				t.Errorf("SearchCandidates(%q) = %q, want %q", tt.current, got, tt.tune)
			}
		})
	}
}

func TestAdviseAllocConf(t *testing.T) {
	tests := []struct {
		name    string
		current string
		fixed   map[string]int64
		want    string // "" for no advice
	}{
		{"saves 5%", "", map[string]int64{"": 1000, Expandable: 950}, Expandable},
		{"saves exactly 2%", "", map[string]int64{"": 1000, Expandable: 980}, ""},
		{"saves 2.1%", "", map[string]int64{"": 1000, Expandable: 979}, Expandable},
		{"costs more", "", map[string]int64{"": 1000, Expandable: 1100}, ""},
		{"already expandable", Expandable, map[string]int64{Expandable: 1000}, ""},
		{"keeps the user's settings", "max_split_size_mb:256",
			map[string]int64{"max_split_size_mb:256": 1000, "max_split_size_mb:256,expandable_segments:True": 900, Expandable: 900},
			"max_split_size_mb:256,expandable_segments:True"},
		{"drops them when that is lower", "max_split_size_mb:256",
			map[string]int64{"max_split_size_mb:256": 1000, "max_split_size_mb:256,expandable_segments:True": 960, Expandable: 900},
			Expandable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mlpSpec(t, tt.current)
			o := perConf(tt.fixed, 0)
			cur, err := o(s)
			if err != nil {
				t.Fatal(err)
			}
			a, err := AdviseAllocConf(s, cur, o)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if a != nil {
				got = a.AllocConf
				if a.DeviceTotal != tt.fixed[got] || a.Saved != cur-a.DeviceTotal {
					t.Errorf("advice %+v: want device total %d, saved %d", a, tt.fixed[got], cur-tt.fixed[got])
				}
			}
			if got != tt.want {
				t.Errorf("AdviseAllocConf = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTuneAllocConf(t *testing.T) {
	tests := []struct {
		name    string
		current string
		fixed   map[string]int64
		want    string
		batch   int64
		noFit   bool
	}{
		// 90% of 1000, less no margin: batch ≤ (900 − fixed)/10.
		{"expandable wins", "", map[string]int64{"": 200, Expandable: 100}, Expandable, 80, false},
		{"tie keeps the default", "", map[string]int64{"": 100, Expandable: 95}, "", 80, false},
		{"default wins", "", map[string]int64{"": 100, Expandable: 200}, "", 80, false},
		{"spec's own setting", "max_split_size_mb:256",
			map[string]int64{"": 300, Expandable: 300, "max_split_size_mb:256": 100, "max_split_size_mb:256,expandable_segments:True": 200},
			"max_split_size_mb:256", 80, false},
		{"only expandable fits", "", map[string]int64{"": 950, Expandable: 880}, Expandable, 2, false},
		{"nothing fits", "", map[string]int64{"": 950, Expandable: 960}, "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ch, err := TuneAllocConf(mlpSpec(t, tt.current), DefaultBand, Constraints{}, perConf(tt.fixed, 10))
			if tt.noFit != errors.Is(err, ErrNoFit) || (err != nil && !tt.noFit) {
				t.Fatalf("TuneAllocConf: error %v, want no fit %v", err, tt.noFit)
			}
			if ch.Chosen != tt.want || r.Batch != tt.batch {
				t.Errorf("TuneAllocConf = %q at batch %d, want %q at %d; candidates %+v", ch.Chosen, r.Batch, tt.want, tt.batch, ch.Candidates)
			}
			if len(ch.Candidates) != len(tt.fixed) {
				t.Errorf("tried %d settings, want %d", len(ch.Candidates), len(tt.fixed))
			}
		})
	}
}

// FuzzWithExpandable: for any setting that parses, WithExpandable's result
// parses, is expandable, and otherwise simulates as the setting did.
func FuzzWithExpandable(f *testing.F) {
	for _, s := range []string{"", "max_split_size_mb:256", "roundup_power2_divisions:[256:1,>:4],expandable_segments:False"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := alloc.Parse(s)
		if err != nil {
			return
		}
		w := WithExpandable(s)
		d, err := alloc.Parse(w)
		if err != nil {
			t.Fatalf("WithExpandable(%q) = %q does not parse: %v", s, w, err)
		}
		c.ExpandableSegments, c.Source, d.Source = true, "", ""
		if !reflect.DeepEqual(c, d) {
			t.Fatalf("WithExpandable(%q) = %q: %+v, want %+v", s, w, d, c)
		}
	})
}

func ExampleAdviseAllocConf() {
	s, err := model.Load("../specs/gpt2-124m.yaml", model.Overrides{})
	if err != nil {
		panic(err)
	}
	cur, err := Analytic(s)
	if err != nil {
		panic(err)
	}
	a, err := AdviseAllocConf(s, cur, Analytic)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s saves %.1f%%\n", a.AllocConf, 100*a.Fraction)
	// Output: expandable_segments:True saves 4.6%
}

// The advice's re-estimates beside the spec's own, as memplan estimate
// makes them (nil on one core: then AnalyticStop).
func ExampleStartAdviceEstimates() {
	s, err := model.Load("../specs/gpt2-124m.yaml", model.Overrides{})
	if err != nil {
		panic(err)
	}
	bg := StartAdviceEstimates(s)
	r, err := estimate.Estimate(s)
	if err != nil {
		panic(err)
	}
	oracle := AnalyticStop
	if bg != nil {
		oracle = bg.Oracle
	}
	a, err := AdviseAllocConfStop(s, r.DeviceTotal, oracle)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s saves %.1f%%\n", a.AllocConf, 100*a.Fraction)
	// Output: expandable_segments:True saves 4.6%
}

func ExampleTuneAllocConf() {
	s, err := model.Load("../specs/gpt2-124m.yaml", model.Overrides{})
	if err != nil {
		panic(err)
	}
	_, ch, err := TuneAllocConf(s, DefaultBand, Constraints{Margin: DefaultMargin}, Analytic)
	if err != nil {
		panic(err)
	}
	for _, c := range ch.Candidates {
		fmt.Printf("%q: batch %d\n", c.AllocConf, c.Batch)
	}
	fmt.Printf("chosen %q\n", ch.Chosen)
	// Output:
	// "": batch 46
	// "expandable_segments:True": batch 45
	// chosen ""
}

// TestAdviceMayHelp holds the shortcut to the advice it skips: wherever
// AdviceMayHelp says no, AdviseAllocConf finds nothing, over every bundled
// spec at its own setting and at a batch twice as large.
func TestAdviceMayHelp(t *testing.T) {
	files, err := filepath.Glob("../specs/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no specs: %v", err)
	}
	skipped := 0
	for _, f := range files {
		for _, twice := range []bool{false, true} {
			s, err := model.Load(f, model.Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			if twice {
				s.Training.Batch *= 2
			}
			r, err := estimate.Estimate(s)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if AdviceMayHelp(s, r) {
				continue
			}
			skipped++
			a, err := AdviseAllocConf(s, r.DeviceTotal, Analytic)
			if err != nil || a != nil {
				t.Errorf("%s (batch %d): AdviceMayHelp false but AdviseAllocConf = %+v, %v", f, s.Training.Batch, a, err)
			}
		}
	}
	if skipped == 0 {
		t.Error("AdviceMayHelp never skipped: the test checks nothing")
	}
}

// TestAdviseAllocConfStop: through AnalyticStop the advice is
// AdviseAllocConf's with Analytic, over every bundled spec at its own
// batch and twice it, under the default setting and under one whose
// candidates are several; some estimates stop.
func TestAdviseAllocConfStop(t *testing.T) {
	files, err := filepath.Glob("../specs/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no specs: %v", err)
	}
	stopped := 0
	count := func(s *model.Spec, above int64) (int64, bool, error) {
		v, st, err := AnalyticStop(s, above)
		if st {
			stopped++
		}
		return v, st, err
	}
	for _, f := range files {
		for _, conf := range []string{"", "max_split_size_mb:256"} {
			for _, twice := range []bool{false, true} {
				s, err := model.Load(f, model.Overrides{AllocConf: conf})
				if err != nil {
					t.Fatal(err)
				}
				if twice {
					s.Training.Batch *= 2
				}
				cur, err := Analytic(s)
				if err != nil {
					t.Fatal(err)
				}
				want, err1 := AdviseAllocConf(s, cur, Analytic)
				got, err2 := AdviseAllocConfStop(s, cur, count)
				if (err1 == nil) != (err2 == nil) || !reflect.DeepEqual(got, want) {
					t.Errorf("%s %q batch %d: with stops %+v, %v; want %+v, %v", f, conf, s.Training.Batch, got, err2, want, err1)
				}
			}
		}
	}
	if stopped == 0 {
		t.Error("no estimate stopped: the test checks nothing")
	}
	t.Logf("%d estimates stopped", stopped)
}

// BenchmarkAdviseAllocConf times the allocator advice's re-estimates of
// two bundled specs for which no setting saves the threshold, whole
// (AdviseAllocConf with Analytic) and through AnalyticStop
// (AdviseAllocConfStop, as `memplan estimate` runs it; docs/performance.md,
// fifteenth session).
func BenchmarkAdviseAllocConf(b *testing.B) {
	for _, f := range []string{"gpt2-xl", "qwen2.5-7b"} {
		s, err := model.Load("../specs/"+f+".yaml", model.Overrides{})
		if err != nil {
			b.Fatal(err)
		}
		cur, err := Analytic(s)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(f+"/whole", func(b *testing.B) {
			for b.Loop() {
				if _, err := AdviseAllocConf(s, cur, Analytic); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(f+"/stop", func(b *testing.B) {
			for b.Loop() {
				if _, err := AdviseAllocConfStop(s, cur, AnalyticStop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestAdviceEstimates checks that the advice made from the background
// estimates (StartAdviceEstimates, whole) is AnalyticStop's, over every
// bundled spec at its own setting and under max_split_size_mb, and that
// one core starts none.
func TestAdviceEstimates(t *testing.T) {
	files, err := filepath.Glob("../specs/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no specs: %v", err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	for _, f := range files {
		for _, conf := range []string{"", "max_split_size_mb:256"} {
			s, err := model.Load(f, model.Overrides{AllocConf: conf})
			if err != nil {
				t.Fatal(err)
			}
			bg := StartAdviceEstimates(s)
			if bg == nil {
				t.Fatalf("%s %q: no background estimates on two cores", f, conf)
			}
			cur, err := Analytic(s)
			if err != nil {
				t.Fatal(err)
			}
			want, err1 := AdviseAllocConfStop(s, cur, AnalyticStop)
			got, err2 := AdviseAllocConfStop(s, cur, bg.Oracle)
			if (err1 == nil) != (err2 == nil) || !reflect.DeepEqual(got, want) {
				t.Errorf("%s %q: from the background %+v, %v; want %+v, %v", f, conf, got, err2, want, err1)
			}
		}
	}
	runtime.GOMAXPROCS(1)
	s, err := model.Load(files[0], model.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if StartAdviceEstimates(s) != nil {
		t.Error("background estimates started on one core")
	}
}
