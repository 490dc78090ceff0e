package synth

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/safetensors"
)

// written is a written checkpoint opened for tests.
type written struct {
	dir     string
	index   index
	headers map[string]*safetensors.Header // by shard name
	sizes   map[string]int64
}

func openCheckpoint(t *testing.T, dir string) *written {
	t.Helper()
	c := &written{dir: dir, headers: map[string]*safetensors.Header{}, sizes: map[string]int64{}}
	b, err := os.ReadFile(filepath.Join(dir, IndexName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &c.index); err != nil {
		t.Fatalf("%s: %v", IndexName, err)
	}
	for _, name := range c.shards() {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		h, err := safetensors.ReadHeader(f, st.Size())
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c.headers[name] = h
		c.sizes[name] = st.Size()
	}
	return c
}

// shards lists the shard names the index names, sorted.
func (c *written) shards() []string {
	var out []string
	for _, s := range c.index.WeightMap {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// tensor returns a tensor's header entry and its shard.
func (c *written) tensor(t *testing.T, name string) (safetensors.Tensor, string) {
	t.Helper()
	shard, ok := c.index.WeightMap[name]
	if !ok {
		t.Fatalf("tensor %s is not in the index", name)
	}
	tt, ok := c.headers[shard].Find(name)
	if !ok {
		t.Fatalf("tensor %s is not in %s", name, shard)
	}
	return tt, shard
}

// read returns a tensor's bytes.
func (c *written) read(t *testing.T, name string) []byte {
	t.Helper()
	tt, shard := c.tensor(t, name)
	f, err := os.Open(filepath.Join(c.dir, shard))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, tt.Len())
	if _, err := f.ReadAt(b, c.headers[shard].DataStart+tt.Begin); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

// names returns every tensor name in the headers, sorted.
func (c *written) names() []string {
	var out []string
	for _, h := range c.headers {
		for _, t := range h.Tensors {
			out = append(out, t.Name)
		}
	}
	slices.Sort(out)
	return out
}

// tinyDir writes v41-tiny once per test binary.
var tinyDir string

func writeTiny(t *testing.T) string {
	t.Helper()
	if tinyDir != "" {
		return tinyDir
	}
	dir, err := os.MkdirTemp("", "synth-tiny-")
	if err != nil {
		t.Fatal(err)
	}
	if err := Write("v41-tiny", dir); err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	tinyDir = dir
	return dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tinyDir != "" {
		os.RemoveAll(tinyDir)
	}
	os.Exit(code)
}

func TestTinyIndexCoversEveryTensorOnce(t *testing.T) {
	c := openCheckpoint(t, writeTiny(t))
	shards := c.shards()
	if len(shards) < 3 {
		t.Fatalf("%d shards, want at least 3", len(shards))
	}
	for i, s := range shards {
		want := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if s != want {
			t.Errorf("shard %d is %s, want %s", i, s, want)
		}
		if len(c.headers[s].Metadata) != 0 {
			t.Errorf("%s: __metadata__ %v; the releases' shards have none", s, c.headers[s].Metadata)
		}
	}
	seen := map[string]string{}
	var total int64
	for s, h := range c.headers {
		for _, tt := range h.Tensors {
			if prev, dup := seen[tt.Name]; dup {
				t.Errorf("tensor %s in both %s and %s", tt.Name, prev, s)
			}
			seen[tt.Name] = s
			if c.index.WeightMap[tt.Name] != s {
				t.Errorf("index maps %s to %q, header is in %s", tt.Name, c.index.WeightMap[tt.Name], s)
			}
			total += tt.Len()
		}
	}
	if len(seen) != len(c.index.WeightMap) {
		t.Errorf("headers hold %d tensors, the index names %d", len(seen), len(c.index.WeightMap))
	}
	if c.index.Metadata.TotalSize != total {
		t.Errorf("index total_size %d, tensors hold %d bytes", c.index.Metadata.TotalSize, total)
	}
	// Every scale sits in its weight's shard.
	for name, s := range c.index.WeightMap {
		if base, ok := strings.CutSuffix(name, ".scale"); ok {
			if ws := c.index.WeightMap[base+".weight"]; ws != s {
				t.Errorf("%s in %s, its weight in %q", name, s, ws)
			}
		}
	}
}

func TestTinyTensors(t *testing.T) {
	c := openCheckpoint(t, writeTiny(t))
	for _, tc := range []struct {
		name  string
		dtype safetensors.DType
		shape []int64
		shard int
	}{
		{"vision.patch_embed.proj.weight", safetensors.BF16, []int64{256, 588}, 1},
		{"vision.blocks.0.attn.wqkv.weight", safetensors.BF16, []int64{768, 256}, 1},
		{"vision.blocks.0.mlp.w1.weight", safetensors.BF16, []int64{1024, 256}, 1},
		{"vision.blocks.0.mlp.w2.weight", safetensors.BF16, []int64{256, 512}, 1},
		{"aligner.w1.weight", safetensors.BF16, []int64{512, 2304}, 1},
		{"aligner.w2.bias", safetensors.BF16, []int64{512}, 1},
		{"embed.weight", safetensors.BF16, []int64{1024, 512}, 2},
		{"image_newline", safetensors.BF16, []int64{512}, 2},
		{"layers.0.attn.wq_a.weight", safetensors.F8E4M3, []int64{256, 512}, 3},
		{"layers.0.attn.wq_a.scale", safetensors.F8E8M0, []int64{8, 16}, 3},
		{"layers.0.attn.wq_b.weight", safetensors.F8E4M3, []int64{1024, 256}, 3},
		{"layers.0.attn.wkv.weight", safetensors.F8E4M3, []int64{256, 512}, 3},
		{"layers.0.attn.wo_a.weight", safetensors.F8E4M3, []int64{512, 512}, 3},
		{"layers.0.attn.wo_b.scale", safetensors.F8E8M0, []int64{16, 16}, 3},
		{"layers.0.attn.q_norm.weight", safetensors.BF16, []int64{256}, 3},
		{"layers.0.attn.kv_norm.weight", safetensors.BF16, []int64{256}, 3},
		{"layers.0.attn.attn_sink", safetensors.F32, []int64{4}, 3},
		{"layers.0.hc_attn_fn", safetensors.F32, []int64{24, 2048}, 3},
		{"layers.0.hc_ffn_base", safetensors.F32, []int64{24}, 3},
		{"layers.0.hc_ffn_scale", safetensors.F32, []int64{3}, 3},
		{"layers.0.ffn.gate.weight", safetensors.BF16, []int64{8, 512}, 3},
		{"layers.0.ffn.gate.bias", safetensors.F32, []int64{8}, 3},
		{"layers.0.ffn.gate.bias_vl", safetensors.F32, []int64{8}, 3},
		{"layers.1.ffn.experts.0.w1.weight", safetensors.I8, []int64{256, 256}, 4},
		{"layers.1.ffn.experts.0.w1.scale", safetensors.F8E8M0, []int64{256, 16}, 4},
		{"layers.3.ffn.experts.7.w2.weight", safetensors.I8, []int64{512, 128}, 6},
		{"layers.3.ffn.experts.7.w2.scale", safetensors.F8E8M0, []int64{512, 8}, 6},
		{"layers.2.ffn.shared_experts.w2.weight", safetensors.F8E4M3, []int64{512, 256}, 5},
		{"layers.2.ffn.shared_experts.w2.scale", safetensors.F8E8M0, []int64{16, 8}, 5},
		{"layers.2.attn.compressor.wgate.weight", safetensors.BF16, []int64{256, 512}, 5},
		{"layers.2.attn.indexer.wk.weight", safetensors.BF16, []int64{128, 256}, 5},
		{"layers.4.attn.compressor.wkv.weight", safetensors.BF16, []int64{256, 512}, 7},
		{"layers.5.attn.indexer.wq_b.weight", safetensors.F8E4M3, []int64{512, 256}, 8},
		{"layers.5.attn.indexer.weights_proj.weight", safetensors.BF16, []int64{4, 512}, 8},
		{"head.weight", safetensors.BF16, []int64{1024, 512}, 9},
		{"norm.weight", safetensors.BF16, []int64{512}, 9},
		{"mtp.0.main_proj.weight", safetensors.F8E4M3, []int64{512, 1536}, 10},
		{"mtp.0.main_proj.scale", safetensors.F8E8M0, []int64{16, 48}, 10},
		{"mtp.0.ffn.experts.7.w1.weight", safetensors.I8, []int64{256, 256}, 10},
		{"mtp.1.ffn.gate.bias_vl", safetensors.F32, []int64{8}, 11},
		{"mtp.2.norm.weight", safetensors.BF16, []int64{512}, 12},
		{"mtp.2.markov_head.embed.weight", safetensors.BF16, []int64{1024, 64}, 12},
		{"mtp.2.confidence_head.proj.weight", safetensors.BF16, []int64{1, 576}, 12},
		{"layers.1.engram.embed.weight", safetensors.F8E4M3, []int64{3911, 256}, 13},
		{"layers.1.engram.embed.scale", safetensors.F8E8M0, []int64{3911, 8}, 13},
		{"layers.1.engram.wkv.weight", safetensors.F8E4M3, []int64{2560, 768}, 13},
		{"layers.1.engram.q_weight", safetensors.BF16, []int64{4, 512}, 13},
		{"layers.3.engram.embed.weight", safetensors.F8E4M3, []int64{3967, 256}, 14},
	} {
		tt, shard := c.tensor(t, tc.name)
		if tt.DType != tc.dtype || !slices.Equal(tt.Shape, tc.shape) {
			t.Errorf("%s: %s %v, want %s %v", tc.name, tt.DType, tt.Shape, tc.dtype, tc.shape)
		}
		if want := fmt.Sprintf("model-%05d-of-00014.safetensors", tc.shard); shard != want {
			t.Errorf("%s in %s, want %s", tc.name, shard, want)
		}
	}
	for _, absent := range []string{"layers.0.attn.compressor.wkv.weight", "layers.3.attn.indexer.wq_b.weight",
		"layers.4.attn.compressor.wgate.weight", "layers.5.attn.indexer.wk.weight", "layers.0.engram.embed.weight",
		"mtp.0.attn.compressor.wkv.weight", "mtp.1.main_proj.weight", "mtp.0.markov_head.embed.weight", "hc_head_fn"} {
		if _, ok := c.index.WeightMap[absent]; ok {
			t.Errorf("%s should not exist", absent)
		}
	}
	// Every expert matrix has logical dimensions that are multiples of 256.
	for name := range c.index.WeightMap {
		if strings.Contains(name, ".ffn.experts.") && strings.HasSuffix(name, ".weight") {
			tt, _ := c.tensor(t, name)
			if tt.Shape[0]%256 != 0 || 2*tt.Shape[1]%256 != 0 {
				t.Errorf("%s: logical shape [%d, %d] not multiples of 256", name, tt.Shape[0], 2*tt.Shape[1])
			}
		}
	}
}

func TestTinyConfig(t *testing.T) {
	dir := writeTiny(t)
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["model_type"] != "deepseek_v41" || cfg["image_token_id"] != 129264.0 {
		t.Errorf("model_type %v, image_token_id %v", cfg["model_type"], cfg["image_token_id"])
	}
	tc, _ := cfg["text_config"].(map[string]any)
	for key, want := range map[string]any{
		"model_type": "deepseek_v41_text", "hidden_size": 512.0, "num_hidden_layers": 6.0,
		"n_routed_experts": 8.0, "num_experts_per_tok": 2.0, "moe_intermediate_size": 256.0,
		"vocab_size": 1024.0, "num_nextn_predict_layers": 3.0, "dspark_n_routed_experts": 8.0,
	} {
		if tc[key] != want {
			t.Errorf("text_config.%s = %v, want %v", key, tc[key], want)
		}
	}
	if vc, _ := cfg["vision_config"].(map[string]any); vc["num_hidden_layers"] != 1.0 || vc["hidden_size"] != 256.0 {
		t.Errorf("vision_config %v", vc)
	}
	q, _ := cfg["quantization_config"].(map[string]any)
	for key, want := range map[string]any{"quant_method": "fp8", "scale_fmt": "ue8m0", "expert_dtype": "fp4",
		"activation_scheme": "dynamic"} {
		if q[key] != want {
			t.Errorf("quantization_config.%s = %v, want %v", key, q[key], want)
		}
	}
	if bs, _ := q["weight_block_size"].([]any); len(bs) != 2 || bs[0] != 32.0 || bs[1] != 32.0 {
		t.Errorf("weight_block_size = %v, want [32 32]", q["weight_block_size"])
	}
	b, err = os.ReadFile(filepath.Join(dir, "inference", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var args map[string]any
	if err := json.Unmarshal(b, &args); err != nil {
		t.Fatal(err)
	}
	if args["dim"] != 512.0 || args["n_layers"] != 6.0 || args["expert_dtype"] != "fp4" || args["n_mtp_layers"] != 3.0 {
		t.Errorf("inference/config.json: %s", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer_config.json")); err != nil {
		t.Error(err)
	}
}

// hashDir returns the sha256 of every file in dir (and inference/).
func hashDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if e.IsDir() {
			for name, h := range hashDir(t, filepath.Join(dir, e.Name())) {
				out[e.Name()+"/"+name] = h
			}
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = hex.EncodeToString(h.Sum(nil))
	}
	return out
}

func TestDeterministic(t *testing.T) {
	// One worker and three give the same bytes: chunks are seeded by
	// position, not by who generates them.
	a, b := t.TempDir(), t.TempDir()
	if err := writeSpec(TinySpec(), a, 1); err != nil {
		t.Fatal(err)
	}
	if err := writeSpec(TinySpec(), b, 3); err != nil {
		t.Fatal(err)
	}
	ha, hb := hashDir(t, a), hashDir(t, b)
	if len(ha) < 6 {
		t.Fatalf("only %d files written", len(ha))
	}
	for name, h := range ha {
		if hb[name] != h {
			t.Errorf("%s differs between two writes: %s vs %s", name, h, hb[name])
		}
	}
	// Another seed: the same headers, other values.
	s := TinySpec()
	s.Seed++
	d := t.TempDir()
	if err := WriteSpec(s, d); err != nil {
		t.Fatal(err)
	}
	hd := hashDir(t, d)
	if hd[IndexName] != ha[IndexName] {
		t.Error("the index changed with the seed")
	}
	for name, h := range ha {
		if strings.HasSuffix(name, ".safetensors") && hd[name] == h {
			t.Errorf("%s is the same under another seed", name)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, p := range Presets() {
		if err := p.Validate(); err != nil {
			t.Errorf("preset %s: %v", p.Name, err)
		}
	}
	for _, tc := range []struct {
		name string
		edit func(*Spec)
	}{
		{"zero hidden", func(s *Spec) { s.Hidden = 0 }},
		{"hidden not /32", func(s *Spec) { s.Hidden = 520 }},
		{"inter not /32", func(s *Spec) { s.MoEInter = 100 }},
		{"too many dense", func(s *Spec) { s.DenseLayers = 5 }},
		{"MoE without experts", func(s *Spec) { s.Experts = 0 }},
		{"ratios length", func(s *Spec) { s.CompressRatios = []int{0, 4} }},
		{"engram layer out of range", func(s *Spec) { s.EngramLayers = []int{6} }},
		{"engram layer repeated", func(s *Spec) { s.EngramLayers = []int{1, 1} }},
		{"engram rows", func(s *Spec) { s.EngramRowsByLayer = []int64{3911, 0} }},
		{"engram vocab", func(s *Spec) { s.EngramVocab = -1 }},
		{"tokenizer fill", func(s *Spec) { s.TokenizerFill = 800 }},
		{"MTP without experts", func(s *Spec) { s.MTPExperts = 0 }},
		{"o groups", func(s *Spec) { s.OGroups = 3 }},
		{"shard size", func(s *Spec) { s.MaxShardBytes = -1 }},
		{"source layer out of range", func(s *Spec) { s.KVSourceLayers = []int{6} }},
		{"DSpark without targets", func(s *Spec) { s.DSparkTargets = nil }},
		{"engram rows by layer", func(s *Spec) { s.EngramRowsByLayer = []int64{1} }},
		{"hash id type", func(s *Spec) { s.HashIDType = safetensors.F32 }},
		{"arch", func(s *Spec) { s.Arch = 7 }},
		{"indexer", func(s *Spec) { s.IndexHeads = 0 }},
	} {
		s := TinySpec()
		tc.edit(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
		if err := WriteSpec(s, t.TempDir()); err == nil {
			t.Errorf("%s: WriteSpec wrote an invalid spec", tc.name)
		}
	}
	if err := Write("no-such-preset", t.TempDir()); err == nil {
		t.Error("an unknown preset was written")
	}
}
