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

// TestFSDPSettings checks fsdp_init, fsdp_root and fsdp_experts (one
// reader, parseDefaulted): each default's name is stored as "", the other
// values as themselves, a flag wins over the spec's key, and anything else
// is refused with its line or flag.
func TestFSDPSettings(t *testing.T) {
	yaml := func(key, v string) string {
		s := "model:\n  type: gpt2\n  vocab: 64\n  hidden: 8\n  layers: 1\n  heads: 2\n  positions: 8\ntraining:\n  batch: 1\n  seq: 8\n  dp: 2\n  zero: 3\n"
		if v != "" {
			s += "  " + key + ": " + v + "\n"
		}
		return s
	}
	for _, st := range []struct {
		key  string
		flag func(string) Overrides
		got  func(*Training) string
		vals [3]string // the default's name and two others
	}{
		{"fsdp_init", func(v string) Overrides { return Overrides{FSDPInit: v} }, func(t *Training) string { return t.FSDPInit }, [3]string{"host", FSDPInitGPU, FSDPInitMeta}},
		{"fsdp_root", func(v string) Overrides { return Overrides{FSDPRoot: v} }, func(t *Training) string { return t.FSDPRoot }, [3]string{"reshard", FSDPRootKeep, FSDPRootKeep}},
		{"fsdp_experts", func(v string) Overrides { return Overrides{FSDPExperts: v} }, func(t *Training) string { return t.FSDPExperts }, [3]string{"dim0", FSDPExpertsDim1, FSDPExpertsAuto}},
	} {
		flagName := "--" + strings.ReplaceAll(st.key, "_", "-")
		want := st.vals[0] + ", " + st.vals[1] + " or " + st.vals[2]
		if st.vals[1] == st.vals[2] {
			want = st.vals[0] + " or " + st.vals[1]
		}
		for _, tc := range []struct {
			name, yaml, flag, want, err string
		}{
			{"default", yaml(st.key, ""), "", "", ""},
			{"yaml default", yaml(st.key, st.vals[0]), "", "", ""},
			{"yaml other", yaml(st.key, st.vals[1]), "", st.vals[1], ""},
			{"flag over yaml", yaml(st.key, st.vals[1]), st.vals[2], st.vals[2], ""},
			{"yaml bad", yaml(st.key, "never"), "", "", `x.yaml:13: ` + st.key + `: want ` + want + `, got "never"`},
			{"flag bad", yaml(st.key, ""), "1", "", flagName + `: want ` + want + `, got "1"`},
		} {
			t.Run(st.key+" "+tc.name, func(t *testing.T) {
				s := parseCase(t, tc.yaml, st.flag(tc.flag), tc.err)
				if s != nil && st.got(&s.Training) != tc.want {
					t.Errorf("%s %q, want %q", st.key, st.got(&s.Training), tc.want)
				}
			})
		}
	}
}

// TestExpertsPadding: ranks beyond a block's experts pad its dim0 shards
// only (ExpertsPadded), auto choosing dim1 exactly there.
func TestExpertsPadding(t *testing.T) {
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
