package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewKindErrors(t *testing.T) {
	const head = "name: x\nmodel:\n  type: sequential\n"
	tests := []struct {
		name, spec, want string
	}{
		{"groups divide channels", head + "  input: {image: {channels: 3}}\n  layers:\n    - conv2d: {in: 3, out: 48, kernel: 3}\n    - groupnorm: {groups: 32, channels: 48}\ntraining: {batch: 1}\n",
			"x.yaml:7: groupnorm: groups (32) must divide channels (48)"},
		{"groupnorm channels", head + "  input: {image: {channels: 3}}\n  layers:\n    - groupnorm: {groups: 1, channels: 4}\ntraining: {batch: 1}\n",
			"x.yaml:6: groupnorm: channels (4) does not match the input [3 224 224]"},
		{"conv1d needs a signal", head + "  input: {features: 8}\n  layers:\n    - conv1d: {in: 8, out: 8, kernel: 3}\ntraining: {batch: 1}\n",
			"x.yaml:6: conv1d: needs a [channels, length] input, got [8]"},
		{"conv1d channels", head + "  input: {signal: {channels: 80}}\n  layers:\n    - conv1d: {in: 8, out: 8, kernel: 3}\ntraining: {batch: 1, seq: 10}\n",
			"x.yaml:6: conv1d: in (8) does not match the input channels (80)"},
		{"conv1d kernel", head + "  input: {signal: {channels: 8}}\n  layers:\n    - conv1d: {in: 8, out: 8, kernel: 30}\ntraining: {batch: 1, seq: 10}\n",
			"x.yaml:6: conv1d: kernel 30 is longer than the input (10)"},
		{"signal needs seq", head + "  input: {signal: {channels: 8}}\n  layers:\n    - conv1d: {in: 8, out: 8, kernel: 3}\ntraining: {batch: 1}\n",
			"x.yaml:7: training: missing required field \"seq\" (the sequence length)"},
		{"groupnorm missing", head + "  input: {image: {channels: 3}}\n  layers:\n    - groupnorm\ntraining: {batch: 1}\n",
			"x.yaml:6: groupnorm: missing required field \"groups\""},
		{"two norms", "name: x\nmodel:\n  type: llama\n  layers: 2\n  hidden: 64\n  heads: 4\n  vocab: 100\n  intermediate: 128\n  plain_norm: true\n  layer_norm: true\ntraining: {batch: 1, seq: 8}\n",
			"x.yaml:10: model: plain_norm, layer_norm and centered_norm each choose the norm"},
		{"parallel block with post norms", "name: x\nmodel:\n  type: llama\n  layers: 2\n  hidden: 64\n  heads: 4\n  vocab: 100\n  intermediate: 128\n  parallel_block: true\n  post_norm: true\ntraining: {batch: 1, seq: 8}\n",
			"x.yaml:9: parallel_block: one norm under both branches"},
		{"moe router", head + "  input: {tokens: {vocab: 100}}\n  layers:\n    - embedding: {vocab: 100, dim: 64}\n    - moe: {dim: 64, hidden: 32, experts: 4, top_k: 2, router: sigmoid}\ntraining: {batch: 1, seq: 8}\n",
			"x.yaml:7: router: unknown choice \"sigmoid\" (valid: softmax_topk, softmax_topk_fp32, topk_softmax, sigmoid_group, softmax_greedy, softmax_group, topk_sigmoid)"},
		{"moe gate", head + "  input: {tokens: {vocab: 100}}\n  layers:\n    - embedding: {vocab: 100, dim: 64}\n    - moe: {dim: 64, hidden: 32, experts: 4, top_k: 2, gate: relu}\ntraining: {batch: 1, seq: 8}\n",
			"x.yaml:7: gate: unknown choice \"relu\" (valid: act, clamped)"},
		{"project_first with per-head norms", head + "  input: {tokens: {vocab: 100}}\n  layers:\n    - embedding: {vocab: 100, dim: 64}\n    - attention: {dim: 64, heads: 4, qk_norm: true, project_first: true}\ntraining: {batch: 1, seq: 8}\n",
			"x.yaml:7: attention: project_first with per-head qk_norm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(tt.spec), Overrides{})
			if err == nil {
				t.Fatalf("Parse() = nil error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse() error = %q, want %q", err, tt.want)
			}
		})
	}
}

func TestConv1dShape(t *testing.T) {
	l := L(&Conv1d{ConvArgs{In: 80, Out: 512, Kernel: 3, Stride: 2, Padding: 1}})
	got, err := l.Infer(Shape{80, 3000}, nil)
	if err != nil || got.String() != "[512 1500]" {
		t.Errorf("Infer([80 3000]) = %v, %v, want [512 1500]", got, err)
	}
	tr := L(&Transpose{})
	if got, _ := tr.Infer(Shape{512, 1500}, nil); got.String() != "[1500 512]" {
		t.Errorf("transpose Infer([512 1500]) = %v, want [1500 512]", got)
	}
}

// TestSpecDocListsKinds checks that docs/spec.md documents every
// registered layer kind, and no kind that is not registered.
func TestSpecDocListsKinds(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "spec.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	start := strings.Index(doc, "### The explicit form")
	end := strings.Index(doc, "## training")
	if start < 0 || end < start {
		t.Fatal("docs/spec.md: no explicit-form section")
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(doc[start:end], "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for _, f := range strings.Split(first, ",") {
			documented[strings.Trim(strings.TrimSpace(f), "`")] = true
		}
	}
	for k := range LayerKinds() {
		if !documented[k] {
			t.Errorf("docs/spec.md does not document layer kind %q", k)
		}
		delete(documented, k)
	}
	for k := range documented {
		t.Errorf("docs/spec.md documents %q, which is not a layer kind", k)
	}
}

// TestLifetimeKeys: the keys that say how long Python keeps a tensor bound
// (docs/spec.md) decode into the kinds, and ViT's lowering uses them as
// torchvision's code does.
func TestLifetimeKeys(t *testing.T) {
	spec := "name: x\nmodel:\n  type: sequential\n  input: tokens\n  layers:\n" +
		"    - embedding: {vocab: 10, dim: 8}\n" +
		"    - positions: {max: 16, dim: 8, hold: true, parameter: true}\n" +
		"    - residual: {hold_first_body: true, layers: [{layernorm: {dim: 8}}, {linear: {in: 8, out: 8}}]}\n" +
		"    - residual: {hold: true, hold_chunk: true, layers: [{linear: {in: 8, out: 16}}, {gelu: {}}, {linear: {in: 16, out: 8}}]}\n" +
		"    - rmsnorm: {dim: 8, offset: true}\n" +
		"training: {batch: 1, seq: 4}\n"
	s, err := Parse("x.yaml", []byte(spec), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	ls := s.Model.Layers
	if p, ok := ls[1].Spec.(*Positions); !ok || !p.Hold || !p.Parameter {
		t.Errorf("positions = %+v, want hold and parameter", ls[1].Spec)
	}
	if r, ok := ls[2].Spec.(*Residual); !ok || !r.HoldFirstBody || r.HoldFirst || r.Hold {
		t.Errorf("residual = %+v, want hold_first_body only", ls[2].Spec)
	}
	if r, ok := ls[3].Spec.(*Residual); !ok || !r.Hold || !r.HoldChunk {
		t.Errorf("residual = %+v, want hold and hold_chunk", ls[3].Spec)
	}
	if n, ok := ls[4].Spec.(*RMSNorm); !ok || !n.Offset {
		t.Errorf("rmsnorm = %+v, want offset", ls[4].Spec)
	}
	// BERT's second residual keeps feed_forward_chunk's locals; Gemma's
	// norms and embedding follow Gemma (model.gemma).
	bert := (&Model{Type: BERT, NumLayers: 1, Hidden: 8, Heads: 2, Intermediate: 16, Vocab: 10, Positions: 16, TypeVocab: 2, Activation: "gelu"}).lowerBERT()
	gemma := (&Model{Type: Llama, NumLayers: 1, Hidden: 8, Heads: 2, KVHeads: 1, HeadDim: 4, Intermediate: 16, Vocab: 10, Gemma: true, Activation: "gelu"}).lowerLlama()
	var chunk, offset, scale bool
	var find func([]Layer)
	find = func(ls []Layer) {
		for _, l := range ls {
			switch k := l.Spec.(type) {
			case *Residual:
				chunk = chunk || k.HoldChunk
			case *RMSNorm:
				offset = offset || k.Offset
			case *Embedding:
				scale = scale || k.Scale
			}
			find(l.Body)
		}
	}
	find(bert)
	find(gemma)
	if !chunk || !offset || !scale {
		t.Errorf("hold_chunk in BERT %v, Gemma's offset norms %v and scaled embedding %v: want all", chunk, offset, scale)
	}

	vit := (&Model{Type: ViT, NumLayers: 1, Hidden: 8, Heads: 2, Intermediate: 16, Patch: 16, Channels: 3, Positions: 197, Classes: 10, Activation: "gelu"}).lowerViT()
	var pos *Positions
	var mlp *Residual
	var walk func([]Layer)
	walk = func(ls []Layer) {
		for _, l := range ls {
			switch k := l.Spec.(type) {
			case *Positions:
				pos = k
			case *Residual:
				if k.HoldFirstBody {
					mlp = k
				}
			}
			walk(l.Body)
		}
	}
	walk(vit)
	if pos == nil || !pos.Parameter || !pos.Hold {
		t.Errorf("ViT positions = %+v, want a held parameter", pos)
	}
	if mlp == nil {
		t.Error("ViT's MLP residual does not hold ln_2's output through the MLP")
	}
}
