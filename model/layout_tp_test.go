package model

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// kinds lists a layer tree's kinds in order, containers by their bodies.
func kinds(ls []Layer) []string {
	var out []string
	for _, l := range ls {
		if len(l.Body) > 0 {
			out = append(out, "["+strings.Join(kinds(l.Body), " ")+"]")
			continue
		}
		k := l.Kind
		if c, ok := l.Spec.(*Collective); ok {
			k = c.Op
		}
		out = append(out, k)
	}
	return out
}

// TestLowerRank checks the program one tensor-parallel rank runs: where
// DTensor's collectives sit with and without sequence parallelism, and the
// rank's shares of heads, columns and vocabulary.
func TestLowerRank(t *testing.T) {
	m := &Model{Type: Llama, NumLayers: 2, Hidden: 64, Heads: 8, KVHeads: 4, HeadDim: 8, Intermediate: 256, Vocab: 1001}
	for _, tc := range []struct {
		name string
		tr   Training
		want string
	}{
		{"one GPU", Training{}, "embedding [[rmsnorm attention] [rmsnorm gated_mlp]] rmsnorm lm_head"},
		{"tp", Training{TP: 2}, "vocab_parallel_embedding all_reduce [[rmsnorm replicate attention all_reduce] [rmsnorm replicate gated_mlp all_reduce]] rmsnorm replicate vocab_parallel_head"},
		{"tp+sp", Training{TP: 2, SP: true}, "vocab_parallel_embedding reduce_scatter_seq [[rmsnorm all_gather_seq attention reduce_scatter_seq] [rmsnorm all_gather_seq gated_mlp reduce_scatter_seq]] rmsnorm all_gather_seq vocab_parallel_head"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, err := m.LowerRank(&tc.tr)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(kinds(ls), " "); got != tc.want {
				t.Errorf("LowerRank = %s\nwant %s", got, tc.want)
			}
			if tc.tr.TP < 2 {
				return
			}
			if e := ls[0].Spec.(*VocabEmbedding); e.Vocab != 501 || e.Whole != 1001 {
				t.Errorf("embedding rows = %d of %d, want ceil(1001/2) = 501 of 1001", e.Vocab, e.Whole)
			}
			block := ls[2].Body
			if a := block[0].Body[2].Spec.(*Attention); a.Heads != 4 || a.KVHeads != 2 || a.HeadDim != 8 {
				t.Errorf("attention heads %d, kv %d, head_dim %d; want 4, 2, 8", a.Heads, a.KVHeads, a.HeadDim)
			}
			if g := block[1].Body[2].Spec.(*GatedMLP); g.Hidden != 128 {
				t.Errorf("MLP columns = %d, want 128", g.Hidden)
			}
			h := ls[len(ls)-1].Spec.(*VocabHead)
			if h.Vocab != 501 || !h.Gather || !h.Uneven {
				t.Errorf("head rows %d gather %v uneven %v, want 501 true true (1001 rows over 2)", h.Vocab, h.Gather, h.Uneven)
			}
		})
	}
	// A mixture of experts: torchtitan's plan without expert parallelism
	// splits each expert's columns (and the shared expert's) like a
	// dense MLP, between the same collectives; the router stays whole.
	moe := *m
	moe.Experts, moe.TopK, moe.SharedExpert = 4, 2, 96
	ls, err := moe.LowerRank(&Training{TP: 2, SP: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "[rmsnorm all_gather_seq " + KMoE + " reduce_scatter_seq]"
	if got := kinds(ls[2].Body)[1]; got != want {
		t.Errorf("LowerRank(moe) block = %s, want %s", got, want)
	}
	if x := ls[2].Body[1].Body[2].Spec.(*MoE); x.Hidden != 128 || x.Shared != 48 || x.Experts != 4 || x.TopK != 2 {
		t.Errorf("experts: hidden %d shared %d of %d experts, top %d; want 128, 48, 4, 2", x.Hidden, x.Shared, x.Experts, x.TopK)
	}
	moe.SharedExpert = 90 // 45 a rank: not an even split of the shared expert
	if _, err := moe.LowerRank(&Training{TP: 4}); err == nil || !strings.Contains(err.Error(), "does not split over 4 ranks") {
		t.Errorf("LowerRank(moe, shared 90, tp 4) = %v, want the shared expert's size named", err)
	}
}

// TestRankParams: a rank's parameters under expert parallelism keep E/ep
// of each block's routed experts (weights and biases), every block's, and
// leave the routers, the shared experts and the rest whole.
func TestRankParams(t *testing.T) {
	m := &Model{Type: Llama, NumLayers: 3, Hidden: 64, Heads: 8, KVHeads: 4, HeadDim: 8, Intermediate: 32, Vocab: 1001,
		Experts: 8, TopK: 2, SharedExpert: 16, MLPBias: true}
	ls := m.Lower()
	whole := Params(ls)
	routed := int64(3 * 8 * (3*64*32 + 2*32 + 64)) // blocks × experts × (weights + biases)
	for _, tc := range []struct{ ep, want int64 }{{1, whole}, {2, whole - routed/2}, {8, whole - routed*7/8}} {
		if got := RankParams(ls, tc.ep); got != tc.want {
			t.Errorf("ep %d: %d parameters, want %d", tc.ep, got, tc.want)
		}
	}
}

// TestTPRefusalInLowering: LowerRank refuses tensor and context
// parallelism for every model the spec's checks refuse them for, so that
// callers building a Training without those checks (the planner) get
// ErrNotSplittable rather than a plain Llama's program: context
// parallelism of the transformers-run families only without sliding
// windows (StarCoder2's, Gemma 2's).
func TestTPRefusalInLowering(t *testing.T) {
	for _, c := range []struct {
		file   string
		tp, cp bool // lowered, not refused
	}{
		{"llama-3-8b.json", true, true}, {"granite-3.1-2b.json", true, true}, {"olmo-1b.json", true, true},
		{"smollm3-3b.json", true, true}, {"starcoder2-3b.json", true, false}, {"aya-23-8b.json", true, true},
		{"gemma-2-2b.json", true, false}, {"phi-2.json", false, false}, {"phi-3-mini-4k.json", true, true},
		{"olmo2-1b.json", true, true},
		{"llama4-test-4layer.json", true, false}, {"llama4-test-maverick-4layer.json", true, false}, // CP: its experts
	} {
		s, err := LoadHF(filepath.Join("testdata", "hf", c.file), Overrides{Batch: 1, Seq: 1024})
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range []Training{{TP: 2, Seq: 1024}, {CP: 2, Seq: 1024}} {
			ok := c.tp
			if tr.CP > 1 {
				ok = c.cp
			}
			_, err := s.Model.LowerRank(&tr)
			if got := !errors.Is(err, ErrNotSplittable); got != ok || (ok && err != nil) {
				t.Errorf("%s tp %d cp %d: %v", c.file, tr.TP, tr.CP, err)
			}
		}
	}
}

// TestTPTransformersFamiliesParams: under tensor parallelism of 2 a rank of
// StarCoder2, Cohere (Aya 23), Phi-3, OLMo 2 and Llama 4 holds half of every split
// matrix and the whole of what hftp.py's plan replicates: the norms (OLMo
// 2's query and key norms over their whole widths), the biases of the
// row-split projections (StarCoder2's o_proj and c_proj) and Llama 4's
// routers.
func TestTPTransformersFamiliesParams(t *testing.T) {
	for _, c := range []struct {
		file string
		// replicated is the parameters each rank holds whole, from the
		// config: layers · (norms + row-split biases) + the final norm.
		replicated int64
	}{
		{"starcoder2-3b.json", 30*(2*2*3072+3072+3072) + 2*3072}, // two LayerNorms with bias, o_proj's and c_proj's biases
		{"aya-23-8b.json", 32*4096 + 4096},                       // one CohereLayerNorm (weight only) per parallel block
		{"phi-3-mini-4k.json", 32*2*3072 + 3072},                 // two RMSNorms
		{"olmo2-1b.json", 16*4*2048 + 2048},                      // q_norm and k_norm over the whole widths (OLMo-core's plan), two post-norms
		{"olmo-1b.json", 0},                                      // LayerNorms without weights
		// Llama 4: two RMSNorms a layer and the router (hidden × experts)
		// of each sparse layer, replicated on every token; the experts'
		// fused weights and the shared expert split, the query and key
		// norm without a weight.
		{"llama4-test-4layer.json", 4*2*2048 + 4*2048*8 + 2048},
		{"llama4-test-maverick-4layer.json", 4*2*2048 + 2*2048*16 + 2048}, // sparse every other layer
	} {
		s, err := LoadHF(filepath.Join("testdata", "hf", c.file), Overrides{Batch: 1, Seq: 1024})
		if err != nil {
			t.Fatal(err)
		}
		whole := Params(s.Model.Lower())
		ls, err := s.Model.LowerRank(&Training{TP: 2, SP: true, Seq: 1024})
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if got, want := Params(ls), (whole-c.replicated)/2+c.replicated; got != want {
			t.Errorf("%s: rank holds %d parameters, want %d (whole %d)", c.file, got, want, whole)
		}
	}
}
