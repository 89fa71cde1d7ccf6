package model

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestFSDPBF16 checks that the fsdp-bf16 precision is accepted with a
// ZeRO stage of 2 or 3 and refused, with the line, below it.
func TestFSDPBF16(t *testing.T) {
	spec := filepath.Join("..", "specs", "gpt2-124m.yaml")
	for _, tc := range []struct {
		name, zero, yaml, want string
	}{
		{"flag zero 3", "3", "", ""},
		{"flag zero 2", "2", "", ""},
		{"flag zero 1", "1", "", "needs ZeRO stage 2 or 3"},
		{"flag no zero", "", "", "needs ZeRO stage 2 or 3"},
		{"yaml zero 0", "", "model:\n  type: gpt2\n  vocab: 64\n  hidden: 8\n  layers: 1\n  heads: 2\n  positions: 8\ntraining:\n  batch: 1\n  seq: 8\n  precision: fsdp-bf16\n", "x.yaml:11: precision: fsdp-bf16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			var s *Spec
			if tc.yaml != "" {
				s, err = Parse("x.yaml", []byte(tc.yaml), Overrides{})
			} else {
				s, err = Load(spec, Overrides{Precision: "fsdp-bf16", DP: 2, Zero: tc.zero})
			}
			if tc.want == "" {
				if err != nil || s.Training.Precision != FSDPBF16 {
					t.Fatalf("got %v, %v", s, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestBucketViewStage checks that bucket_view (DDP's
// gradient_as_bucket_view) is refused, with its line, under FSDP.
func TestBucketViewStage(t *testing.T) {
	yaml := func(zero string) string {
		return "model:\n  type: gpt2\n  vocab: 64\n  hidden: 8\n  layers: 1\n  heads: 2\n  positions: 8\ntraining:\n  batch: 1\n  seq: 8\n  dp: 2\n  zero: " + zero + "\n  bucket_view: true\n"
	}
	for _, tc := range []struct {
		name, yaml, zero, want string
	}{
		{"yaml zero 0", yaml("0"), "", ""},
		{"yaml zero 1", yaml("1"), "", ""},
		{"yaml zero 2", yaml("2"), "", "x.yaml:13: bucket_view: DDP's gradient_as_bucket_view needs ZeRO stage 0 or 1"},
		{"flag zero 3", yaml("0"), "3", "bucket_view: DDP's gradient_as_bucket_view needs ZeRO stage 0 or 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(tc.yaml), Overrides{Zero: tc.zero})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestFSDPInit checks fsdp_init: host is the default (stored as ""), gpu
// and meta are kept, anything else is refused with its line or flag.
func TestFSDPInit(t *testing.T) {
	yaml := func(v string) string {
		s := "model:\n  type: gpt2\n  vocab: 64\n  hidden: 8\n  layers: 1\n  heads: 2\n  positions: 8\ntraining:\n  batch: 1\n  seq: 8\n  dp: 2\n  zero: 3\n"
		if v != "" {
			s += "  fsdp_init: " + v + "\n"
		}
		return s
	}
	for _, tc := range []struct {
		name, yaml, flag, want, err string
	}{
		{"default", yaml(""), "", FSDPInitHost, ""},
		{"yaml host", yaml("host"), "", FSDPInitHost, ""},
		{"yaml gpu", yaml("gpu"), "", FSDPInitGPU, ""},
		{"flag meta over yaml gpu", yaml("gpu"), "meta", FSDPInitMeta, ""},
		{"yaml bad", yaml("cpu"), "", "", `x.yaml:13: fsdp_init: want host, gpu or meta, got "cpu"`},
		{"flag bad", yaml(""), "disk", "", `--fsdp-init: want host, gpu or meta, got "disk"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parseCase(t, tc.yaml, Overrides{FSDPInit: tc.flag}, tc.err)
			if s != nil && s.Training.FSDPInit != tc.want {
				t.Errorf("FSDPInit %q, want %q", s.Training.FSDPInit, tc.want)
			}
		})
	}
}

// parseCase parses spec text as x.yaml under o: with wantErr set it
// checks that the error says so and returns nil, else it returns the spec.
func parseCase(t *testing.T, yaml string, o Overrides, wantErr string) *Spec {
	t.Helper()
	s, err := Parse("x.yaml", []byte(yaml), o)
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error %v, want one containing %q", err, wantErr)
		}
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFSDPRoot checks fsdp_root: reshard is the default (stored as ""),
// keep is kept, anything else is refused with its line or flag.
func TestFSDPRoot(t *testing.T) {
	yaml := func(v string) string {
		s := "model:\n  type: gpt2\n  vocab: 64\n  hidden: 8\n  layers: 1\n  heads: 2\n  positions: 8\ntraining:\n  batch: 1\n  seq: 8\n  dp: 2\n  zero: 3\n"
		if v != "" {
			s += "  fsdp_root: " + v + "\n"
		}
		return s
	}
	for _, tc := range []struct {
		name, yaml, flag, want, err string
	}{
		{"default", yaml(""), "", FSDPRootReshard, ""},
		{"yaml reshard", yaml("reshard"), "", FSDPRootReshard, ""},
		{"yaml keep", yaml("keep"), "", FSDPRootKeep, ""},
		{"flag reshard over yaml keep", yaml("keep"), "reshard", FSDPRootReshard, ""},
		{"yaml bad", yaml("never"), "", "", `x.yaml:13: fsdp_root: want reshard or keep, got "never"`},
		{"flag bad", yaml(""), "true", "", `--fsdp-root: want reshard or keep, got "true"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parseCase(t, tc.yaml, Overrides{FSDPRoot: tc.flag}, tc.err)
			if s != nil && s.Training.FSDPRoot != tc.want {
				t.Errorf("FSDPRoot %q, want %q", s.Training.FSDPRoot, tc.want)
			}
		})
	}
}

// TestFSDPExperts checks fsdp_experts: dim0 is the default (stored as ""),
// dim1 and auto are kept, anything else is refused with its line or flag;
// and the padding rule: ranks beyond a block's experts pad its dim0 shards
// only (ExpertsPadded), auto choosing dim1 exactly there.
func TestFSDPExperts(t *testing.T) {
	yaml := func(v string) string {
		s := "model:\n  type: gpt2\n  vocab: 64\n  hidden: 8\n  layers: 1\n  heads: 2\n  positions: 8\ntraining:\n  batch: 1\n  seq: 8\n  dp: 2\n  zero: 3\n"
		if v != "" {
			s += "  fsdp_experts: " + v + "\n"
		}
		return s
	}
	for _, tc := range []struct {
		name, yaml, flag, want, err string
	}{
		{"default", yaml(""), "", FSDPExpertsDim0, ""},
		{"yaml dim0", yaml("dim0"), "", FSDPExpertsDim0, ""},
		{"yaml dim1", yaml("dim1"), "", FSDPExpertsDim1, ""},
		{"flag auto over yaml dim1", yaml("dim1"), "auto", FSDPExpertsAuto, ""},
		{"yaml bad", yaml("dim2"), "", "", `x.yaml:13: fsdp_experts: want dim0, dim1 or auto, got "dim2"`},
		{"flag bad", yaml(""), "1", "", `--fsdp-experts: want dim0, dim1 or auto, got "1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parseCase(t, tc.yaml, Overrides{FSDPExperts: tc.flag}, tc.err)
			if s != nil && s.Training.FSDPExperts != tc.want {
				t.Errorf("FSDPExperts %q, want %q", s.Training.FSDPExperts, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		mode           string
		experts, dp    int64
		padded, alongs bool
	}{
		{FSDPExpertsDim0, 2, 4, true, false},
		{FSDPExpertsDim0, 8, 4, false, false},
		{FSDPExpertsDim1, 8, 4, false, true},
		{FSDPExpertsAuto, 2, 4, false, true},
		{FSDPExpertsAuto, 8, 4, false, false},
	} {
		tr := &Training{Zero: 3, DP: tc.dp, FSDPExperts: tc.mode}
		if got := ExpertsPadded(tc.experts, tr); got != tc.padded {
			t.Errorf("%q, %d experts over %d ranks: padded %v, want %v", tc.mode, tc.experts, tc.dp, got, tc.padded)
		}
		if got := ExpertsAlongDim1(tc.mode, tc.experts, tc.dp); got != tc.alongs {
			t.Errorf("%q, %d experts over %d ranks: along dim 1 %v, want %v", tc.mode, tc.experts, tc.dp, got, tc.alongs)
		}
	}
}
