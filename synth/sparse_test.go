//go:build unix

package synth

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/dsfs/dsfs/tokenizer"
	v4 "github.com/dsfs/dsfs/trace/v4"
)

// releaseShard is one shard of a released checkpoint: tensors, data
// bytes, header bytes (length prefix included) and file bytes. The
// V4-Flash file sizes are those of its Git-LFS pointers; the V4.1-Flash
// ones follow from the same serializer (LAYOUTS.md §9, §13.3).
type releaseShard struct{ tensors, data, header, file int64 }

var v41FlashShards = []releaseShard{
	{263, 970506240, 27384, 970533624},
	{4, 1323857920, 352, 1323858272},
	{2334, 7389500888, 258144, 7389759032},
	{2334, 7389500888, 258144, 7389759032},
	{2342, 7405694680, 259104, 7405953784},
	{2334, 7389500888, 258144, 7389759032},
	{2334, 7389500888, 258144, 7389759032},
	{2334, 7389500888, 258144, 7389759032},
	{2334, 7389500888, 258144, 7389759032},
	{2334, 7389500888, 258144, 7389759032},
	{2342, 7405694680, 259104, 7405953784},
	{2334, 7389500888, 258144, 7389759032},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2342, 7405694680, 261448, 7405956128},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2341, 7400451800, 261288, 7400713088},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2337, 7395076568, 260816, 7395337384},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2337, 7395076568, 260816, 7395337384},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2337, 7395076568, 260816, 7395337384},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2337, 7395076568, 260816, 7395337384},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2334, 7389500888, 260480, 7389761368},
	{2, 1323837440, 184, 1323837624},
	{801, 2652643800, 84936, 2652728736},
	{798, 2573913560, 84616, 2573998176},
	{802, 2706317272, 85624, 2706402896},
	{6, 101535150272, 632, 101535150904},
	{6, 101537925968, 632, 101537926600},
}

var v4FlashShards = []releaseShard{
	{1, 1059061760, 96, 1059061856},
	{1565, 3566148952, 172240, 3566321192},
	{1565, 3566148952, 172240, 3566321192},
	{1576, 3596055640, 173632, 3596229272},
	{1569, 3568596312, 172664, 3568768976},
	{1576, 3589851224, 173552, 3590024776},
	{1569, 3568596312, 172664, 3568768976},
	{1576, 3589851224, 173552, 3590024776},
	{1569, 3568596312, 172664, 3568768976},
	{1576, 3589851224, 173552, 3590024776},
	{1569, 3568596312, 172664, 3568768976},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{1569, 3568596312, 174232, 3568770544},
	{1576, 3589851224, 175128, 3590026352},
	{5, 1059332116, 400, 1059332516},
	{1575, 3593787756, 168336, 3593956092},
}

// v41FlashPatterns is LAYOUTS.md §5: every name pattern of
// DeepSeek-V4.1-Flash with its dtype, shapes ("|" between alternatives)
// and tensor count.
var v41FlashPatterns = []struct {
	pattern, dtype, shapes string
	count                  int
}{
	{"vision.patch_embed.proj.weight", "BF16", "[1024, 588]", 1},
	{"vision.patch_embed.proj.bias", "BF16", "[1024]", 1},
	{"vision.blocks.{B}.norm1.weight", "BF16", "[1024]", 32},
	{"vision.blocks.{B}.norm2.weight", "BF16", "[1024]", 32},
	{"vision.blocks.{B}.attn.wqkv.weight", "BF16", "[3072, 1024]", 32},
	{"vision.blocks.{B}.attn.wqkv.bias", "BF16", "[3072]", 32},
	{"vision.blocks.{B}.attn.wo.weight", "BF16", "[1024, 1024]", 32},
	{"vision.blocks.{B}.attn.wo.bias", "BF16", "[1024]", 32},
	{"vision.blocks.{B}.mlp.w1.weight", "BF16", "[5632, 1024]", 32},
	{"vision.blocks.{B}.mlp.w2.weight", "BF16", "[1024, 2816]", 32},
	{"vision.norm.weight", "BF16", "[1024]", 1},
	{"aligner.w1.weight", "BF16", "[5120, 9216]", 1},
	{"aligner.w1.bias", "BF16", "[5120]", 1},
	{"aligner.w2.weight", "BF16", "[5120, 5120]", 1},
	{"aligner.w2.bias", "BF16", "[5120]", 1},
	{"embed.weight", "BF16", "[129280, 5120]", 1},
	{"image_start", "BF16", "[5120]", 1},
	{"image_newline", "BF16", "[5120]", 1},
	{"image_end", "BF16", "[5120]", 1},
	{"layers.{L}.hc_attn_fn", "F32", "[24, 20480]", 40},
	{"layers.{L}.hc_attn_base", "F32", "[24]", 40},
	{"layers.{L}.hc_attn_scale", "F32", "[3]", 40},
	{"layers.{L}.hc_ffn_fn", "F32", "[24, 20480]", 40},
	{"layers.{L}.hc_ffn_base", "F32", "[24]", 40},
	{"layers.{L}.hc_ffn_scale", "F32", "[3]", 40},
	{"layers.{L}.attn_norm.weight", "BF16", "[5120]", 40},
	{"layers.{L}.ffn_norm.weight", "BF16", "[5120]", 40},
	{"layers.{L}.attn.q_norm.weight", "BF16", "[1280]", 40},
	{"layers.{L}.attn.kv_norm.weight", "BF16", "[512]", 40},
	{"layers.{L}.attn.attn_sink", "F32", "[64]", 40},
	{"layers.{L}.attn.wq_a.weight", "F8_E4M3", "[1280, 5120]", 40},
	{"layers.{L}.attn.wq_a.scale", "F8_E8M0", "[40, 160]", 40},
	{"layers.{L}.attn.wq_b.weight", "F8_E4M3", "[32768, 1280]", 40},
	{"layers.{L}.attn.wq_b.scale", "F8_E8M0", "[1024, 40]", 40},
	{"layers.{L}.attn.wkv.weight", "F8_E4M3", "[512, 5120]", 40},
	{"layers.{L}.attn.wkv.scale", "F8_E8M0", "[16, 160]", 40},
	{"layers.{L}.attn.wo_a.weight", "F8_E4M3", "[8192, 4096]", 40},
	{"layers.{L}.attn.wo_a.scale", "F8_E8M0", "[256, 128]", 40},
	{"layers.{L}.attn.wo_b.weight", "F8_E4M3", "[5120, 8192]", 40},
	{"layers.{L}.attn.wo_b.scale", "F8_E8M0", "[160, 256]", 40},
	{"layers.{L}.ffn.gate.weight", "BF16", "[384, 5120]", 40},
	{"layers.{L}.ffn.gate.bias", "F32", "[384]", 40},
	{"layers.{L}.ffn.gate.bias_vl", "F32", "[384]", 40},
	{"layers.{L}.ffn.shared_experts.w1.weight", "F8_E4M3", "[2304, 5120]", 40},
	{"layers.{L}.ffn.shared_experts.w1.scale", "F8_E8M0", "[72, 160]", 40},
	{"layers.{L}.ffn.shared_experts.w2.weight", "F8_E4M3", "[5120, 2304]", 40},
	{"layers.{L}.ffn.shared_experts.w2.scale", "F8_E8M0", "[160, 72]", 40},
	{"layers.{L}.ffn.shared_experts.w3.weight", "F8_E4M3", "[2304, 5120]", 40},
	{"layers.{L}.ffn.shared_experts.w3.scale", "F8_E8M0", "[72, 160]", 40},
	{"layers.{L}.ffn.experts.{E}.w1.weight", "I8", "[2304, 2560]", 15360},
	{"layers.{L}.ffn.experts.{E}.w1.scale", "F8_E8M0", "[2304, 160]", 15360},
	{"layers.{L}.ffn.experts.{E}.w2.weight", "I8", "[5120, 1152]", 15360},
	{"layers.{L}.ffn.experts.{E}.w2.scale", "F8_E8M0", "[5120, 72]", 15360},
	{"layers.{L}.ffn.experts.{E}.w3.weight", "I8", "[2304, 2560]", 15360},
	{"layers.{L}.ffn.experts.{E}.w3.scale", "F8_E8M0", "[2304, 160]", 15360},
	{"layers.{L}.engram.embed.weight", "F8_E4M3", "[384006168, 256]|[384016682, 256]", 2},
	{"layers.{L}.engram.embed.scale", "F8_E8M0", "[384006168, 8]|[384016682, 8]", 2},
	{"layers.{L}.engram.q_weight", "BF16", "[4, 5120]", 2},
	{"layers.{L}.engram.k_weight", "BF16", "[4, 5120]", 2},
	{"layers.{L}.engram.wkv.weight", "F8_E4M3", "[25600, 6144]", 2},
	{"layers.{L}.engram.wkv.scale", "F8_E8M0", "[800, 192]", 2},
	{"layers.{L}.attn.compressor.norm.weight", "BF16", "[512]", 4},
	{"layers.{L}.attn.compressor.wkv.weight", "BF16", "[512, 5120]", 4},
	{"layers.{L}.attn.compressor.wgate.weight", "BF16", "[512, 5120]", 3},
	{"layers.{L}.attn.indexer.wq_b.weight", "F8_E4M3", "[4096, 1280]", 8},
	{"layers.{L}.attn.indexer.wq_b.scale", "F8_E8M0", "[128, 40]", 8},
	{"layers.{L}.attn.indexer.weights_proj.weight", "BF16", "[32, 5120]", 8},
	{"layers.{L}.attn.indexer.wk.weight", "BF16", "[128, 512]", 4},
	{"layers.{L}.attn.indexer.k_norm.weight", "BF16", "[128]", 4},
	{"head.weight", "BF16", "[129280, 5120]", 1},
	{"norm.weight", "BF16", "[5120]", 1},
	{"mtp.{M}.hc_attn_fn", "F32", "[24, 20480]", 3},
	{"mtp.{M}.hc_attn_base", "F32", "[24]", 3},
	{"mtp.{M}.hc_attn_scale", "F32", "[3]", 3},
	{"mtp.{M}.hc_ffn_fn", "F32", "[24, 20480]", 3},
	{"mtp.{M}.hc_ffn_base", "F32", "[24]", 3},
	{"mtp.{M}.hc_ffn_scale", "F32", "[3]", 3},
	{"mtp.{M}.attn_norm.weight", "BF16", "[5120]", 3},
	{"mtp.{M}.ffn_norm.weight", "BF16", "[5120]", 3},
	{"mtp.{M}.attn.q_norm.weight", "BF16", "[1280]", 3},
	{"mtp.{M}.attn.kv_norm.weight", "BF16", "[512]", 3},
	{"mtp.{M}.attn.attn_sink", "F32", "[64]", 3},
	{"mtp.{M}.attn.wq_a.weight", "F8_E4M3", "[1280, 5120]", 3},
	{"mtp.{M}.attn.wq_a.scale", "F8_E8M0", "[40, 160]", 3},
	{"mtp.{M}.attn.wq_b.weight", "F8_E4M3", "[32768, 1280]", 3},
	{"mtp.{M}.attn.wq_b.scale", "F8_E8M0", "[1024, 40]", 3},
	{"mtp.{M}.attn.wkv.weight", "F8_E4M3", "[512, 5120]", 3},
	{"mtp.{M}.attn.wkv.scale", "F8_E8M0", "[16, 160]", 3},
	{"mtp.{M}.attn.wo_a.weight", "F8_E4M3", "[8192, 4096]", 3},
	{"mtp.{M}.attn.wo_a.scale", "F8_E8M0", "[256, 128]", 3},
	{"mtp.{M}.attn.wo_b.weight", "F8_E4M3", "[5120, 8192]", 3},
	{"mtp.{M}.attn.wo_b.scale", "F8_E8M0", "[160, 256]", 3},
	{"mtp.{M}.ffn.gate.weight", "BF16", "[128, 5120]", 3},
	{"mtp.{M}.ffn.gate.bias", "F32", "[128]", 3},
	{"mtp.{M}.ffn.gate.bias_vl", "F32", "[128]", 3},
	{"mtp.{M}.ffn.shared_experts.w1.weight", "F8_E4M3", "[2304, 5120]", 3},
	{"mtp.{M}.ffn.shared_experts.w1.scale", "F8_E8M0", "[72, 160]", 3},
	{"mtp.{M}.ffn.shared_experts.w2.weight", "F8_E4M3", "[5120, 2304]", 3},
	{"mtp.{M}.ffn.shared_experts.w2.scale", "F8_E8M0", "[160, 72]", 3},
	{"mtp.{M}.ffn.shared_experts.w3.weight", "F8_E4M3", "[2304, 5120]", 3},
	{"mtp.{M}.ffn.shared_experts.w3.scale", "F8_E8M0", "[72, 160]", 3},
	{"mtp.{M}.ffn.experts.{E}.w1.weight", "I8", "[2304, 2560]", 384},
	{"mtp.{M}.ffn.experts.{E}.w1.scale", "F8_E8M0", "[2304, 160]", 384},
	{"mtp.{M}.ffn.experts.{E}.w2.weight", "I8", "[5120, 1152]", 384},
	{"mtp.{M}.ffn.experts.{E}.w2.scale", "F8_E8M0", "[5120, 72]", 384},
	{"mtp.{M}.ffn.experts.{E}.w3.weight", "I8", "[2304, 2560]", 384},
	{"mtp.{M}.ffn.experts.{E}.w3.scale", "F8_E8M0", "[2304, 160]", 384},
	{"mtp.{M}.main_proj.weight", "F8_E4M3", "[5120, 15360]", 1},
	{"mtp.{M}.main_proj.scale", "F8_E8M0", "[160, 480]", 1},
	{"mtp.{M}.main_norm.weight", "BF16", "[5120]", 1},
	{"mtp.{M}.norm.weight", "BF16", "[5120]", 1},
	{"mtp.{M}.markov_head.embed.weight", "BF16", "[129280, 256]", 1},
	{"mtp.{M}.markov_head.head.weight", "BF16", "[129280, 256]", 1},
	{"mtp.{M}.confidence_head.proj.weight", "BF16", "[1, 5376]", 1},
}

// canonical replaces layer, stage, expert and vision block numbers by
// their placeholders.
var canonical = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`^layers\.\d+\.`), "layers.{L}."},
	{regexp.MustCompile(`^mtp\.\d+\.`), "mtp.{M}."},
	{regexp.MustCompile(`experts\.\d+\.`), "experts.{E}."},
	{regexp.MustCompile(`blocks\.\d+\.`), "blocks.{B}."},
}

func patternOf(name string) string {
	for _, c := range canonical {
		name = c.re.ReplaceAllString(name, c.with)
	}
	return name
}

type patternStat struct {
	dtype  string
	shapes []string
	count  int
}

func patterns(c *written) map[string]*patternStat {
	out := map[string]*patternStat{}
	for _, h := range c.headers {
		for _, tt := range h.Tensors {
			p := patternOf(tt.Name)
			s := out[p]
			if s == nil {
				s = &patternStat{dtype: string(tt.DType)}
				out[p] = s
			}
			b, _ := json.Marshal(tt.Shape)
			if sh := strings.ReplaceAll(string(b), ",", ", "); !slices.Contains(s.shapes, sh) {
				s.shapes = append(s.shapes, sh)
			}
			s.count++
		}
	}
	for _, s := range out {
		slices.Sort(s.shapes)
	}
	return out
}

// checkRelease compares a written checkpoint with a release's shard table.
func checkRelease(t *testing.T, dir string, want []releaseShard, tensors int, data int64) *written {
	t.Helper()
	c := openCheckpoint(t, dir)
	shards := c.shards()
	if len(shards) != len(want) {
		t.Fatalf("%d shards, want %d", len(shards), len(want))
	}
	var n int
	var total, disk int64
	for i, name := range shards {
		h := c.headers[name]
		got := releaseShard{int64(len(h.Tensors)), c.sizes[name] - h.DataStart, h.DataStart, c.sizes[name]}
		if got != want[i] {
			t.Errorf("%s: tensors, data, header, file bytes %v, want %v", name, got, want[i])
		}
		if len(h.Metadata) != 0 {
			t.Errorf("%s: __metadata__ %v, the release has none", name, h.Metadata)
		}
		n += len(h.Tensors)
		total += got.data
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, name), &st); err != nil {
			t.Fatal(err)
		}
		disk += st.Blocks * 512
	}
	if n != tensors || total != data || c.index.Metadata.TotalSize != data || len(c.index.WeightMap) != tensors {
		t.Errorf("%d tensors, %d data bytes, index total_size %d over %d names; want %d and %d",
			n, total, c.index.Metadata.TotalSize, len(c.index.WeightMap), tensors, data)
	}
	// Headers only: the rest holes.
	if disk > 64<<20 {
		t.Errorf("shards take %d MiB of disk; not sparse", disk>>20)
	}
	return c
}

func TestV41FlashLayout(t *testing.T) {
	dir := t.TempDir()
	if err := Write("v41-full-sparse", dir); err != nil {
		t.Fatal(err)
	}
	c := checkRelease(t, dir, v41FlashShards, 96_085, 510_286_023_000)
	// The index as json.dumps(indent=2) writes it, no final newline.
	if st, err := os.Stat(filepath.Join(dir, IndexName)); err != nil || st.Size() != 7_470_294 {
		t.Errorf("%s: %v bytes (%v), want 7,470,294", IndexName, st.Size(), err)
	}
	got := patterns(c)
	if len(got) != len(v41FlashPatterns) {
		t.Errorf("%d name patterns, want %d", len(got), len(v41FlashPatterns))
	}
	for _, p := range v41FlashPatterns {
		s := got[p.pattern]
		want := strings.Split(p.shapes, "|")
		slices.Sort(want)
		if s == nil || s.dtype != p.dtype || !slices.Equal(s.shapes, want) || s.count != p.count {
			t.Errorf("%s: %+v, want %s %v x %d", p.pattern, s, p.dtype, want, p.count)
		}
	}
	// Per-layer counts in the index (Engram included): LAYOUTS.md §4.
	perLayer := map[string]int{}
	for name := range c.index.WeightMap {
		if m := regexp.MustCompile(`^layers\.(\d+)\.`).FindStringSubmatch(name); m != nil {
			perLayer[m[1]]++
		}
	}
	for l := range 40 {
		want := 2334
		switch l {
		case 1:
			want += 6
		case 2, 8:
			want += 8
		case 14:
			want += 14
		case 20:
			want += 7
		case 24, 28, 32, 36:
			want += 3
		}
		if n := perLayer[fmt.Sprint(l)]; n != want {
			t.Errorf("layer %d: %d tensors, want %d", l, n, want)
		}
	}
	// Engram tables live in shards 47 and 48, not their layers'.
	for name, shard := range map[string]string{"layers.1.engram.wkv.weight": "model-00047-of-00048.safetensors",
		"layers.14.engram.embed.weight":          "model-00048-of-00048.safetensors",
		"layers.14.attn.compressor.wgate.weight": "model-00017-of-00048.safetensors"} {
		if c.index.WeightMap[name] != shard {
			t.Errorf("%s in %s, want %s", name, c.index.WeightMap[name], shard)
		}
	}
	// Both config files: inference/config.json is the released text (1,982 B).
	b, err := os.ReadFile(filepath.Join(dir, "inference", "config.json"))
	if err != nil || len(b) != 1982 || !strings.HasPrefix(string(b), "{\n    \"vocab_size\": 129280,\n    \"dim\": 5120,") ||
		!strings.Contains(string(b), `"compress_ratios": [0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],`) {
		t.Errorf("inference/config.json: %d bytes (%v), want the released 1,982", len(b), err)
	}
	var cfg struct {
		ModelType  string `json:"model_type"`
		TextConfig struct {
			Layers         int     `json:"num_hidden_layers"`
			EngramRows     []int64 `json:"engram_num_embeddings"`
			CompressRatios []int   `json:"compress_ratios"`
		} `json:"text_config"`
		VisionConfig struct {
			Layers int `json:"num_hidden_layers"`
		} `json:"vision_config"`
	}
	if b, err = os.ReadFile(filepath.Join(dir, "config.json")); err != nil || json.Unmarshal(b, &cfg) != nil {
		t.Fatalf("config.json: %v", err)
	}
	if cfg.ModelType != "deepseek_v41" || cfg.TextConfig.Layers != 40 || len(cfg.TextConfig.CompressRatios) != 43 ||
		!slices.Equal(cfg.TextConfig.EngramRows, []int64{384006168, 384016682}) || cfg.VisionConfig.Layers != 32 {
		t.Errorf("config.json: %+v", cfg)
	}
	tok := checkReleaseTokenizer(t, dir)
	// Engram hashes compressed ids: the map must have the configured size.
	if _, n := v4.CompressedTokenMap(tok); n != 99_092 {
		t.Errorf("tokenizer.json: the Engram token map has %d compressed ids, want engram_compressed_vocab_size 99,092", n)
	}
}

// checkReleaseTokenizer checks the synthetic tokenizer.json both released
// layouts carry: its bytes, 129,280 ids (config vocab_size), and
// tokenizer_config.json's special tokens at ids 0, 1 and 2 (bos, eos and
// pad_token_id of config.json).
func checkReleaseTokenizer(t *testing.T, dir string) *tokenizer.Tokenizer {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if sum := fmt.Sprintf("%x", sha256.Sum256(b)); len(b) != 5_229_749 || sum != "95f64fe357b3efd5d20f656850210e8917efe413d4780bb259443532d1ac8b9b" {
		t.Errorf("tokenizer.json: %d bytes, sha256 %s; want 5,229,749 and 95f64fe3…", len(b), sum)
	}
	tok, err := tokenizer.Parse(b)
	if err != nil {
		t.Fatalf("tokenizer.json: %v", err)
	}
	if tok.VocabSize() != 129_280 {
		t.Errorf("tokenizer.json: %d ids, want 129,280", tok.VocabSize())
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.ParseConfig(cfg); err != nil {
		t.Fatalf("tokenizer_config.json: %v", err)
	}
	var sp struct {
		BOS string `json:"bos_token"`
		EOS string `json:"eos_token"`
		Pad string `json:"pad_token"`
	}
	if err := json.Unmarshal(cfg, &sp); err != nil {
		t.Fatalf("tokenizer_config.json: %v", err)
	}
	for id, s := range []string{sp.BOS, sp.EOS, sp.Pad} {
		if got := tok.Token(id); got != s {
			t.Errorf("tokenizer_config.json names %q, id %d is %q", s, id, got)
		}
	}
	return tok
}

func TestV4FlashLayout(t *testing.T) {
	dir := t.TempDir()
	if err := Write("v4-full-sparse", dir); err != nil {
		t.Fatal(err)
	}
	c := checkRelease(t, dir, v4FlashShards, 69_187, 159_609_485_896)
	if n := len(patterns(c)); n != 98 {
		t.Errorf("%d name patterns, want 98", n)
	}
	// The first shard is embed.weight alone: LAYOUTS.md §13.3 gives its header.
	f, err := os.Open(filepath.Join(dir, "model-00001-of-00046.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 96)
	if _, err := f.ReadAt(head, 0); err != nil {
		t.Fatal(err)
	}
	if want := "\x58\x00\x00\x00\x00\x00\x00\x00" + `{"embed.weight":{"dtype":"BF16","shape":[129280,4096],"data_offsets":[0,1059061760]}}   `; string(head) != want {
		t.Errorf("shard 1 header %q, want %q", head, want)
	}
	for name, dtype := range map[string]string{"layers.2.ffn.gate.tid2eid": "I64", "layers.3.ffn.gate.bias": "F32",
		"layers.2.attn.indexer.compressor.ape": "F32", "mtp.0.hc_head_fn": "F32", "mtp.0.e_proj.scale": "F8_E8M0"} {
		if tt, _ := c.tensor(t, name); string(tt.DType) != dtype {
			t.Errorf("%s: %s, want %s", name, tt.DType, dtype)
		}
	}
	if _, ok := c.index.WeightMap["layers.3.ffn.gate.tid2eid"]; ok {
		t.Error("layer 3 has a tid2eid; V4-Flash hashes layers 0-2 only")
	}
	checkReleaseTokenizer(t, dir)
}

// TestTinyPresetsHaveEveryPattern: v41-tiny holds every pattern of the
// release, and v4-tiny every pattern of v4-full-sparse.
func TestTinyPresetsHaveEveryPattern(t *testing.T) {
	for _, tc := range []struct{ tiny, full string }{{"v41-tiny", "v41-full-sparse"}, {"v4-tiny", "v4-full-sparse"}} {
		full := t.TempDir()
		if err := Write(tc.full, full); err != nil {
			t.Fatal(err)
		}
		tiny := t.TempDir()
		s := Presets()[slices.IndexFunc(Presets(), func(p Preset) bool { return p.Name == tc.tiny })].Spec
		s.Sparse = true
		if err := WriteSpec(s, tiny); err != nil {
			t.Fatal(err)
		}
		pf, pt := patterns(openCheckpoint(t, full)), patterns(openCheckpoint(t, tiny))
		for p, s := range pf {
			if q := pt[p]; q == nil || q.dtype != s.dtype {
				t.Errorf("%s: %s lacks %s %s (has %+v)", tc.tiny, tc.tiny, p, s.dtype, q)
			}
		}
		for p := range pt {
			if pf[p] == nil {
				t.Errorf("%s has %s, which %s lacks", tc.tiny, p, tc.full)
			}
		}
	}
}
