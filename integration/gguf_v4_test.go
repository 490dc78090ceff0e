package integration

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsfs/dsfs/internal/ggufread"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/tokenizer"
)

// v4GGUFCheckpoint is synth's v4-tiny (the released V4-Flash layout at
// small size, with compress ratios 0, 4 and 128, the only ones llama.cpp's
// deepseek4 loader takes; testdata/trace/v4-tiny has an 8 and is refused)
// with what llama.cpp needs that the preset leaves out: the three
// config.json keys the released V4-Flash config has (max_position_embeddings
// 1048576, num_key_value_heads 1, norm_topk_prob true; trace/v4 reads the
// last from inference/config.json) and, when absent, a synthesised
// DeepSeek-style tokenizer of its vocabulary.
func v4GGUFCheckpoint(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "v4-tiny")
	if err := synth.Write("v4-tiny", dir); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["max_position_embeddings"], cfg["num_key_value_heads"], cfg["norm_topk_prob"] = 1048576, 1, true
	b, _ = json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		tok, err := tokenizer.Synthesize(int(cfg["vocab_size"].(float64)) - 259)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644)
		os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), tokenizer.SynthesizeConfig(), 0o644)
	}
	return dir
}

// v4Prompts are n prompts of random token ids, long enough (16) for the
// CSA layers' ratio-4 compression to run.
func v4Prompts(seed uint64, n, vocab int) [][]int {
	r := rand.New(rand.NewPCG(seed, 0))
	out := make([][]int, n)
	for i := range out {
		for range 16 {
			out[i] = append(out[i], 3+r.IntN(vocab-3))
		}
	}
	return out
}

// TestGGUFLlamaCppV4 loads gguf/MXFP4 of a V4-Flash-layout checkpoint
// through the mount with real llama.cpp (arch deepseek4: every key read,
// every tensor's name, type and shape checked at load) and evaluates
// prompts: a logit for every token of the vocabulary at every position,
// all finite. It does not compare the logits with dsfs's V4 forward: on
// this checkpoint they differ by about 40% of the largest logit already at
// position 0, with the experts in either order (see the README), a
// disagreement not yet traced to the file or to either engine.
func TestGGUFLlamaCppV4(t *testing.T) {
	needMount(t)
	llama := llamaCppDir(t)
	src := v4GGUFCheckpoint(t)
	prompts := v4Prompts(4, 3, 1024)
	m := startMount(t, src, "--views", "gguf")
	path := m.path("gguf", "MXFP4", "v4-tiny-MXFP4.gguf")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ggufread.Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if arch := f.KV["general.architecture"]; arch != "deepseek4" {
		t.Fatalf("general.architecture %v", arch)
	}
	got := llamaLogits(t, llama, path, prompts)
	if len(got) != len(prompts) {
		t.Fatalf("%d prompts of logits, want %d", len(got), len(prompts))
	}
	for i, rows := range got {
		if len(rows) != len(prompts[i]) {
			t.Fatalf("prompt %d: %d positions, want %d", i, len(rows), len(prompts[i]))
		}
		for p, row := range rows {
			if len(row) != 1024 {
				t.Fatalf("prompt %d position %d: %d logits, want 1024", i, p, len(row))
			}
			for v, x := range row {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					t.Fatalf("prompt %d position %d token %d: logit %v", i, p, v, x)
				}
			}
		}
	}
}
