package v4

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/internal/testdata"
)

// tinyConfigs returns v4-tiny's config.json and inference/config.json.
func tinyConfigs(t *testing.T) (hf, args []byte) {
	t.Helper()
	dir := filepath.Join(testdata.Dir(t), "trace", "v4-tiny")
	hf, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	args, err = os.ReadFile(filepath.Join(dir, "inference", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	return hf, args
}

// edit returns doc with the top-level keys of set replaced (a nil value
// deletes the key).
func edit(t *testing.T, doc []byte, set map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseConfigTiny(t *testing.T) {
	hf, args := tinyConfigs(t)
	want := &Config{
		ModelType: "deepseek_v4", Hidden: 128, Vocab: 512, Layers: 5, MTPLayers: 0,
		Heads: 4, HeadDim: 128, RopeDim: 64, QLoRA: 128, OGroups: 2, OLoRA: 64, Window: 8,
		CompressRatios: []int{0, 0, 4, 8, 4}, RopeTheta: 10000, CompressRopeTheta: 160000,
		RopeFactor: 16, OrigSeqLen: 65536, BetaFast: 32, BetaSlow: 1,
		IndexHeads: 16, IndexDim: 128, IndexTopK: 4, HCMult: 4, HCSinkhornIters: 20,
		HCEps: 1e-6, NormEps: 1e-6, RoutedExperts: 16, SharedExperts: 1, TopK: 4, MoEInter: 128,
		ScoreFunc: ScoreSqrtSoftplus, RouteScale: 1.5, SwiGLULimit: 10, HashLayers: 3,
	}
	for _, tc := range []struct {
		name string
		args []byte
	}{{"config.json and inference/config.json", args}, {"config.json alone", nil}} {
		got, err := ParseConfig(hf, tc.args)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, want)
		}
	}
	if _, missing := Missing(hf); missing != nil {
		t.Errorf("the engine lacks %q to run v4-tiny", missing)
	}
}

func TestParseConfigInferenceWins(t *testing.T) {
	hf, args := tinyConfigs(t)
	c, err := ParseConfig(hf, edit(t, args, map[string]any{"n_hash_layers": 1, "window_size": 16}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HashLayers != 1 || c.Window != 16 {
		t.Errorf("hash layers %d, window %d: inference/config.json's 1 and 16 should win", c.HashLayers, c.Window)
	}
}

func TestParseConfigErrors(t *testing.T) {
	hf, _ := tinyConfigs(t)
	for _, tc := range []struct {
		name string
		set  map[string]any
		want string
	}{
		{"no compress_ratios", map[string]any{"compress_ratios": nil}, "missing compress_ratios"},
		{"ratios one short", map[string]any{"compress_ratios": []int{0, 0, 4, 8}}, "compress_ratios has 4 entries, want"},
		{"ratios without the MTP entry", map[string]any{"num_nextn_predict_layers": 1}, "compress_ratios has 5 entries, want"},
		{"negative ratio", map[string]any{"compress_ratios": []int{0, 0, 4, -8, 4}}, "is negative"},
		{"no hc_mult", map[string]any{"hc_mult": nil}, "missing hc_mult"},
		{"odd rope", map[string]any{"qk_rope_head_dim": 63}, "must be even"},
		{"kv quant block", map[string]any{"head_dim": 160}, "multiple of 64"},
		{"index dim", map[string]any{"index_head_dim": 96}, "power of two"},
		{"groups", map[string]any{"o_groups": 3}, "does not divide"},
		{"scoring", map[string]any{"scoring_func": "relu"}, `scoring_func "relu"`},
		{"rope scaling", map[string]any{"rope_scaling": map[string]any{"type": "linear", "factor": 2}}, `type "linear"`},
		{"two shared", map[string]any{"n_shared_experts": 2}, "exactly one shared expert"},
		{"hash layers", map[string]any{"num_hash_layers": 6}, "exceeds num_hidden_layers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(edit(t, hf, tc.set), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := ParseConfig([]byte("{"), nil); err == nil || !strings.HasPrefix(err.Error(), "config.json:") {
		t.Errorf("malformed config.json: %v", err)
	}
	if _, err := ParseConfig(hf, []byte("[1]")); err == nil || !strings.HasPrefix(err.Error(), "inference/config.json:") {
		t.Errorf("malformed inference/config.json: %v", err)
	}
}

func TestRoles(t *testing.T) {
	hf, args := tinyConfigs(t)
	c, err := ParseConfig(hf, args)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"sliding window only, hash-routed",
		"sliding window only, hash-routed",
		"compressed sparse attention (ratio 4, indexer), hash-routed",
		"heavily compressed attention (ratio 8), sqrtsoftplus routing",
		"compressed sparse attention (ratio 4, indexer), sqrtsoftplus routing",
	}
	for l, w := range want {
		if got := c.Role(l); got != w {
			t.Errorf("layer %d: %q, want %q", l, got, w)
		}
	}
}

// TestOpenChecksTensors opens v4-tiny with configurations that disagree
// with its tensors: the layers concerned report what is wrong, by name.
func TestOpenChecksTensors(t *testing.T) {
	dir := filepath.Join(testdata.Dir(t), "trace", "v4-tiny")
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	_, args := tinyConfigs(t)
	for _, tc := range []struct {
		name  string
		set   map[string]any
		layer int
		want  string
	}{
		{"hash layer without a bias", map[string]any{"n_hash_layers": 2}, 2, "tensor layers.2.ffn.gate.bias: missing"},
		{"learned layer without tid2eid", map[string]any{"n_hash_layers": 4}, 3, "tensor layers.3.ffn.gate.tid2eid: missing"},
		{"SWA layer made HCA", map[string]any{"compress_ratios": []int{0, 16, 4, 8, 4}}, 1, "tensor layers.1.attn.compressor.ape: missing"},
		{"HCA layer made CSA", map[string]any{"compress_ratios": []int{0, 0, 4, 4, 4}}, 3, "layers.3.attn.compressor.ape: shape [8 128], want [4 256]"},
		{"wider experts", map[string]any{"moe_inter_dim": 256}, 0, "layers.0.ffn.experts.0.w1.weight: shape [128 64], want [256 64]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Open(cat, edit(t, args, tc.set))
			if err != nil {
				t.Fatal(err)
			}
			p := strings.Join(m.Problems(tc.layer), "\n")
			if !strings.Contains(p, tc.want) {
				t.Errorf("layer %d problems:\n%s\nwant one containing %q", tc.layer, p, tc.want)
			}
			if m.Runnable() > tc.layer {
				t.Errorf("Runnable %d, want at most %d", m.Runnable(), tc.layer)
			}
		})
	}
	m, err := Open(cat, args)
	if err != nil {
		t.Fatal(err)
	}
	if m.Runnable() != 5 {
		t.Errorf("Runnable %d, want 5: %v", m.Runnable(), m.problems)
	}
}

func TestMissing(t *testing.T) {
	hf, _ := tinyConfigs(t)
	v3, err := os.ReadFile(filepath.Join(testdata.Dir(t), "trace", "v3-tiny", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  []byte
		what string
		want []string // substrings, one per line, in order
	}{
		{"V4 runs", hf, "", nil},
		{"V3 is not V4", v3, "", nil},
		{"V4 with Engram and a dense layer", edit(t, hf, map[string]any{"engram_layer_ids": []int{1}, "first_k_dense_replace": 1}),
			`model_type "deepseek_v4" (DeepseekV4ForCausalLM)`, []string{"Engram memory", "dense FFN layers"}},
		{"V4.1 nesting", []byte(`{"model_type":"deepseek_v41","architectures":["DeepseekV41ForCausalLM"],
			"quantization_config":{"weight_block_size":[32,32]},
			"text_config":{"hc_mult":4,"compress_ratios":[0,2],"engram_layer_ids":[1],"kv_source_layer_ids":[1],"candidate_source_layer_id":1}}`),
			`model_type "deepseek_v41" (DeepseekV41ForCausalLM)`,
			[]string{"Engram memory", "FP8 weight blocks of 32x32", "V4.1's CSA2 attention", "V4.1's multimodal config.json"}},
	} {
		what, got := Missing(tc.cfg)
		if what != tc.what || len(got) != len(tc.want) {
			t.Errorf("%s: %q %q, want %q and %d lines", tc.name, what, got, tc.what, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: line %d %q, want %q", tc.name, i, got[i], w)
			}
		}
	}
}

// TestParseConfigModelArgsSpelling reads a config.json written with
// ModelArgs' keys, as inference/config.json spells them.
func TestParseConfigModelArgsSpelling(t *testing.T) {
	hf, args := tinyConfigs(t)
	want, err := ParseConfig(hf, args)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseConfig(edit(t, args, map[string]any{"model_type": "deepseek_v4"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
}
