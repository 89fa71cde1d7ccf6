package model

import (
	"testing"
)

// TestStepPause reads training.step_pause and --step-pause: the flag
// replaces the spec's, and negative, too large or non-numeric values are
// errors with the line (the spec's) or the flag's name.
func TestStepPause(t *testing.T) {
	spec := func(pause string) string {
		s := "model:\n  type: gpt2\n  vocab: 64\n  hidden: 8\n  layers: 1\n  heads: 2\n  positions: 8\ntraining:\n  batch: 1\n  seq: 8\n  dp: 2\n"
		if pause != "" {
			s += "  step_pause: " + pause + "\n"
		}
		return s
	}
	for _, tc := range []struct {
		name, yaml, flag string
		want             float64
		err              string
	}{
		{"unset", spec(""), "", 0, ""},
		{"yaml", spec("0.5"), "", 0.5, ""},
		{"flag over yaml", spec("0.5"), "0", 0, ""},
		{"flag", spec(""), "1.5", 1.5, ""},
		{"yaml negative", spec("-1"), "", 0, "x.yaml:12: step_pause: must be between 0 and 3600"},
		{"yaml word", spec("soon"), "", 0, "x.yaml:12: step_pause: want a number"},
		{"flag negative", spec(""), "-0.1", 0, "--step-pause: want seconds between 0 and 3600"},
		{"flag huge", spec(""), "1e9", 0, "--step-pause: want seconds between 0 and 3600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parseCase(t, tc.yaml, Overrides{StepPause: tc.flag}, tc.err)
			if s != nil && s.Training.StepPause != tc.want {
				t.Errorf("step_pause %g, want %g", s.Training.StepPause, tc.want)
			}
		})
	}
}

// TestLoopBools reads the loop's boolean settings,
// training.loss_outside_autocast and training.empty_cache_after_wrap, and
// their flags: either the spec or the flag sets one; a value that is not
// a boolean is an error with its line.
func TestLoopBools(t *testing.T) {
	for _, k := range []struct {
		key  string
		flag func(bool) Overrides
		get  func(*Training) bool
	}{
		{"loss_outside_autocast", func(v bool) Overrides { return Overrides{LossOutsideAutocast: v} },
			func(t *Training) bool { return t.LossOutsideAutocast }},
		{"empty_cache_after_wrap", func(v bool) Overrides { return Overrides{EmptyCacheAfterWrap: v} },
			func(t *Training) bool { return t.EmptyCacheAfterWrap }},
	} {
		spec := func(v string) string {
			s := "model:\n  type: gpt2\n  vocab: 64\n  hidden: 8\n  layers: 1\n  heads: 2\n  positions: 8\ntraining:\n  batch: 1\n  seq: 8\n"
			if v != "" {
				s += "  " + k.key + ": " + v + "\n"
			}
			return s
		}
		for _, tc := range []struct {
			name, yaml string
			flag, want bool
			err        string
		}{
			{"unset", spec(""), false, false, ""},
			{"yaml", spec("true"), false, true, ""},
			{"flag", spec(""), true, true, ""},
			{"yaml false, flag", spec("false"), true, true, ""},
			{"yaml word", spec("later"), false, false, "x.yaml:11: " + k.key + ":"},
		} {
			t.Run(k.key+"/"+tc.name, func(t *testing.T) {
				s := parseCase(t, tc.yaml, k.flag(tc.flag), tc.err)
				if s != nil && k.get(&s.Training) != tc.want {
					t.Errorf("%s %v, want %v", k.key, k.get(&s.Training), tc.want)
				}
			})
		}
	}
}

// TestSteps reads training.steps and --steps, the run's length: the flag
// replaces the spec's; a negative count is an error with the line (the
// spec's) or the flag's name.
func TestSteps(t *testing.T) {
	spec := func(v string) string {
		s := "model:\n  type: gpt2\n  vocab: 64\n  hidden: 8\n  layers: 1\n  heads: 2\n  positions: 8\ntraining:\n  batch: 1\n  seq: 8\n"
		if v != "" {
			s += "  steps: " + v + "\n"
		}
		return s
	}
	for _, tc := range []struct {
		name, yaml string
		flag, want int64
		err        string
	}{
		{"unset", spec(""), 0, 0, ""},
		{"yaml", spec("500"), 0, 500, ""},
		{"flag over yaml", spec("500"), 20, 20, ""},
		{"yaml negative", spec("-3"), 0, 0, "x.yaml:11: steps: must be positive"},
		{"flag negative", spec(""), -1, 0, "--steps: want a count of optimizer steps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parseCase(t, tc.yaml, Overrides{Steps: tc.flag}, tc.err)
			if s != nil && s.Training.Steps != tc.want {
				t.Errorf("steps %d, want %d", s.Training.Steps, tc.want)
			}
		})
	}
}
