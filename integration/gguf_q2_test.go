package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/internal/ggufread"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/tokenizer"
)

// synthV4GGUF writes synth's v4-tiny (the V4-Flash layout, every routed
// expert row whole 256-weight blocks, so q2/ quantises them) with the
// config.json keys the converter and llama.cpp need that the preset leaves
// out (max_position_embeddings, num_key_value_heads, norm_topk_prob) and a
// synthesised tokenizer of its 1024 tokens.
func synthV4GGUF(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "v4-synth")
	if err := synth.Write("v4-tiny", dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["max_position_embeddings"], cfg["num_key_value_heads"], cfg["norm_topk_prob"] = 65536, 1, true
	b, _ = json.MarshalIndent(cfg, "", "  ")
	tok, err := tokenizer.Synthesize(1024 - 259)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"config.json": b, "tokenizer.json": tok, "tokenizer_config.json": tokenizer.SynthesizeConfig()} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// ggufQ2Stats is what the sharing test reads from .dsfs/stats.json: the
// q2 blocks each view counts.
type ggufQ2Stats struct {
	ViewStats struct {
		Q2   blockCounts `json:"q2"`
		GGUF struct {
			Q2 blockCounts `json:"q2_blocks"`
		} `json:"gguf"`
	} `json:"view_stats"`
	DiskCache struct {
		Hits   int64 `json:"hits"`
		Writes int64 `json:"writes"`
	} `json:"disk_cache"`
}

type blockCounts struct {
	Blocks    int64 `json:"blocks"`
	Quantised int64 `json:"blocks_quantised"`
	FromDisk  int64 `json:"blocks_from_disk_cache"`
}

func readGGUFQ2Stats(t *testing.T, m *mount) (ggufQ2Stats, string) {
	t.Helper()
	b, err := os.ReadFile(m.path(".dsfs", "stats.json"))
	var s ggufQ2Stats
	if err != nil || json.Unmarshal(b, &s) != nil {
		t.Fatalf("stats.json: %v %s", err, b)
	}
	return s, string(b)
}

// q2ExpertBytes reads every quantised tensor of the q2/ shards of a mount,
// by source name.
func q2ExpertBytes(t *testing.T, m *mount) map[string][]byte {
	t.Helper()
	shards, _ := filepath.Glob(m.path("q2", "quant-*.safetensors"))
	out := make(map[string][]byte)
	for _, p := range shards {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h, err := safetensors.ReadHeader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, tt := range h.Tensors {
			if strings.Contains(tt.Name, ".ffn.experts.") && tt.DType == safetensors.U8 {
				out[tt.Name] = data[h.DataStart+tt.Begin : h.DataStart+tt.End]
			}
		}
	}
	return out
}

// TestGGUFQ2Shared checks that gguf/IQ2_XXS/ of a deepseek4 checkpoint
// and q2/ share their quantised blocks: after reading the GGUF file, q2/
// serves every expert without quantising a block (the block cache holds
// them under q2/'s IDs), byte for byte the expert's slice of the stacked
// GGUF tensor; a second mount on the same --cache-dir serves q2/ from the
// entries the GGUF read wrote, again quantising nothing.
func TestGGUFQ2Shared(t *testing.T) {
	src := synthV4GGUF(t)
	cacheDir := t.TempDir()
	m := startMount(t, src, "--views", "q2,gguf", "--cache-dir", cacheDir)
	path := m.path("gguf", "IQ2_XXS", "v4-synth-IQ2_XXS.gguf")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s1, raw := readGGUFQ2Stats(t, m)
	if s1.ViewStats.GGUF.Q2.Quantised == 0 || s1.ViewStats.GGUF.Q2.Quantised != s1.ViewStats.GGUF.Q2.Blocks || s1.ViewStats.Q2.Quantised != 0 {
		t.Fatalf("after reading the GGUF file: gguf/ quantised %d of %d q2 blocks, q2/ %d\n%s",
			s1.ViewStats.GGUF.Q2.Quantised, s1.ViewStats.GGUF.Q2.Blocks, s1.ViewStats.Q2.Quantised, raw)
	}
	q2 := q2ExpertBytes(t, m)
	s2, raw := readGGUFQ2Stats(t, m)
	if s2.ViewStats.Q2.Quantised != 0 || s2.ViewStats.Q2.FromDisk != 0 || s2.ViewStats.GGUF.Q2.Quantised != s1.ViewStats.GGUF.Q2.Quantised {
		t.Errorf("reading q2/ after gguf/: q2/ quantised %d blocks and read %d from disk, want 0 and 0 (block cache)\n%s",
			s2.ViewStats.Q2.Quantised, s2.ViewStats.Q2.FromDisk, raw)
	}
	f, err := ggufread.Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for _, ti := range f.Tensors {
		var l int
		var proj string
		if n, _ := fmt.Sscanf(ti.Name, "blk.%d.ffn_%s", &l, &proj); n != 2 || !strings.HasSuffix(proj, "_exps.weight") {
			continue
		}
		src := map[string]string{"gate_exps.weight": "w1", "down_exps.weight": "w2", "up_exps.weight": "w3"}[proj]
		b := data[f.DataStart+ti.Offset : f.DataStart+ti.Offset+ti.Size]
		per := ti.Size / ti.Ne[2]
		for e := range ti.Ne[2] {
			name := fmt.Sprintf("layers.%d.ffn.experts.%d.%s.weight", l, e, src)
			if want, ok := q2[name]; !ok || !bytes.Equal(b[e*per:(e+1)*per], want) {
				t.Errorf("%s expert %d: differs from q2/'s %s (found %v)", ti.Name, e, name, ok)
			}
			compared++
		}
	}
	if compared != len(q2) || compared == 0 {
		t.Errorf("compared %d experts, q2/ has %d quantised tensors", compared, len(q2))
	}
	m.stop(t)

	m2 := startMount(t, src, "--views", "q2,gguf", "--cache-dir", cacheDir)
	again := q2ExpertBytes(t, m2)
	s3, raw := readGGUFQ2Stats(t, m2)
	if s3.ViewStats.Q2.Quantised != 0 || s3.ViewStats.Q2.FromDisk != s1.ViewStats.GGUF.Q2.Blocks {
		t.Errorf("remount on the cache: q2/ quantised %d blocks and read %d from disk, want 0 and %d\n%s",
			s3.ViewStats.Q2.Quantised, s3.ViewStats.Q2.FromDisk, s1.ViewStats.GGUF.Q2.Blocks, raw)
	}
	for name, b := range q2 {
		if !bytes.Equal(again[name], b) {
			t.Errorf("%s: differs on the remount", name)
		}
	}
}
