package gguf_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/codecs/iq2xxs"
	"github.com/dsfs/dsfs/codecs/q2k"
	"github.com/dsfs/dsfs/codecs/q8_0"
	"github.com/dsfs/dsfs/gguf"
	"github.com/dsfs/dsfs/internal/fp8ckpt"
	"github.com/dsfs/dsfs/internal/ggufread"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
	"github.com/x448/float16"
)

// openReference copies a reference checkpoint of testdata/trace and adds the
// tokenizer files of the synth preset of the same name; fp8 converts it to
// DeepSeek-V3's FP8 layout.
func openReference(t *testing.T, name string, fp8 bool) *checkpoint.Catalog {
	t.Helper()
	ref, _ := testdata.TraceSequences(t, name)
	dir := filepath.Join(t.TempDir(), name)
	tok := filepath.Join(t.TempDir(), "synth")
	if err := synth.Write(name, tok); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(dir, 0o755)
	for _, f := range []struct{ from, name string }{{ref, "config.json"}, {ref, "model.safetensors.index.json"},
		{ref, "model-00001-of-00002.safetensors"}, {ref, "model-00002-of-00002.safetensors"},
		{tok, "tokenizer.json"}, {tok, "tokenizer_config.json"}} {
		b, err := os.ReadFile(filepath.Join(f.from, f.name))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f.name), b, 0o644)
	}
	if fp8 {
		out := dir + "-fp8"
		if err := fp8ckpt.Write(dir, out); err != nil {
			t.Fatal(err)
		}
		dir = out
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

func recipe(t *testing.T, name string) gguf.Recipe {
	for _, r := range gguf.Recipes() {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no recipe %s", name)
	return gguf.Recipe{}
}

// tensorBytes computes a recipe tensor's bytes from its parts.
func tensorBytes(t *testing.T, ten gguf.Tensor) []byte {
	t.Helper()
	out := make([]byte, 0, ten.Bytes())
	for _, p := range ten.Parts {
		b := make([]byte, p.Rows*ten.RowBytes())
		if p.Decode == nil && p.Bytes == nil {
			if _, err := p.Src.Shard.ReadAt(b, p.Src.Offset); err != nil {
				t.Fatal(err)
			}
		} else {
			// In two halves, so that row ranges not starting at 0 are
			// exercised too.
			h := p.Rows / 2
			if err := ten.Fill(context.Background(), p, 0, h, b[:h*ten.RowBytes()]); err != nil {
				t.Fatal(err)
			}
			if err := ten.Fill(context.Background(), p, h, p.Rows, b[h*ten.RowBytes():]); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, b...)
	}
	return out
}

// refValues decodes a source tensor as the converter does, written out
// independently of the package: BF16 bits << 16, F32 as is, FP8 as the
// E4M3 value times its block's F32 scale_inv in float32.
func refValues(t *testing.T, cat *checkpoint.Catalog, name string) ([]float32, []int64) {
	t.Helper()
	ten := cat.Tensor(name)
	if ten == nil {
		t.Fatalf("source tensor %s missing", name)
	}
	b := make([]byte, ten.Size)
	ten.Shard.ReadAt(b, ten.Offset)
	n := int64(1)
	for _, d := range ten.Shape {
		n *= d
	}
	v := make([]float32, n)
	switch ten.DType {
	case safetensors.BF16:
		for i := range v {
			v[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	case safetensors.F32:
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case safetensors.F8E4M3:
		s := cat.Tensor(strings.TrimSuffix(name, ".weight") + ".weight_scale_inv")
		sb := make([]byte, s.Size)
		s.Shard.ReadAt(sb, s.Offset)
		cols := ten.Shape[1]
		for i := range v {
			r, c := int64(i)/cols, int64(i)%cols
			k := r/128*s.Shape[1] + c/128
			v[i] = codecs.E4M3ToFloat32(b[i]) * math.Float32frombits(binary.LittleEndian.Uint32(sb[4*k:]))
		}
	default:
		t.Fatalf("%s: dtype %s", name, ten.DType)
	}
	return v, ten.Shape
}

// bf16RNE rounds to bfloat16, to nearest with ties to even, by float64
// arithmetic on the significand (finite normal values and zeros).
func bf16RNE(v float32) uint16 {
	if v == 0 {
		return uint16(math.Float32bits(v) >> 16)
	}
	frac, exp := math.Frexp(float64(v)) // |frac| in [0.5, 1)
	r := math.Ldexp(math.RoundToEven(frac*256), exp-8)
	return uint16(math.Float32bits(float32(r)) >> 16)
}

// encodeRef encodes values as a GGUF type: F32 bits, BF16 by bf16RNE,
// F16 by x448/float16, Q8_0 by the codec checked against ggml's bytes.
func encodeRef(t *testing.T, v []float32, typ gguf.Type) []byte {
	switch typ {
	case gguf.F32:
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	case gguf.BF16:
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], bf16RNE(x))
		}
		return b
	case gguf.F16:
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], float16.Fromfloat32(x).Bits())
		}
		return b
	case gguf.Q8_0:
		b := make([]byte, len(v)/32*34)
		q8_0.Quantize(b, v)
		return b
	}
	t.Fatalf("type %s", typ.Name)
	return nil
}

// hfName maps a GGUF tensor name of layer l to its Hugging Face name.
var hfNames = map[string]string{
	"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
	"attn_q": "self_attn.q_proj", "attn_q_a": "self_attn.q_a_proj", "attn_q_a_norm": "self_attn.q_a_layernorm",
	"attn_q_b": "self_attn.q_b_proj", "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa",
	"attn_kv_a_norm": "self_attn.kv_a_layernorm", "attn_output": "self_attn.o_proj",
	"ffn_gate": "mlp.gate_proj", "ffn_down": "mlp.down_proj", "ffn_up": "mlp.up_proj",
	"ffn_gate_inp": "mlp.gate", "ffn_gate_shexp": "mlp.shared_experts.gate_proj",
	"ffn_down_shexp": "mlp.shared_experts.down_proj", "ffn_up_shexp": "mlp.shared_experts.up_proj",
}

// refTensor is a GGUF tensor's values by the converter's rules (numpy
// order), computed from the source: experts stacked in expert order, kv_b
// split with k_b transposed per head.
func refTensor(t *testing.T, cat *checkpoint.Catalog, name string, ne []int64) []float32 {
	t.Helper()
	switch name {
	case "token_embd.weight":
		v, _ := refValues(t, cat, "model.embed_tokens.weight")
		return v
	case "output_norm.weight":
		v, _ := refValues(t, cat, "model.norm.weight")
		return v
	case "output.weight":
		v, _ := refValues(t, cat, "lm_head.weight")
		return v
	}
	var l int
	var rest string
	fmt.Sscanf(name, "blk.%d.%s", &l, &rest)
	base, _, _ := strings.Cut(rest, ".")
	p := fmt.Sprintf("model.layers.%d.", l)
	switch base {
	case "ffn_gate_exps", "ffn_down_exps", "ffn_up_exps":
		proj := map[string]string{"ffn_gate_exps": "gate_proj", "ffn_down_exps": "down_proj", "ffn_up_exps": "up_proj"}[base]
		var out []float32
		for e := range ne[2] {
			v, _ := refValues(t, cat, fmt.Sprintf("%smlp.experts.%d.%s.weight", p, e, proj))
			out = append(out, v...)
		}
		return out
	case "attn_k_b", "attn_v_b":
		w, shape := refValues(t, cat, p+"self_attn.kv_b_proj.weight")
		kvr := shape[1]
		var out []float32
		if base == "attn_k_b" { // numpy [H, kvr, nope]: k_b[h][c][j] = W[h*(nope+v)+j][c]
			nope, heads := ne[0], ne[2]
			stride := shape[0] / heads
			for h := range heads {
				for c := range kvr {
					for j := range nope {
						out = append(out, w[(h*stride+j)*kvr+c])
					}
				}
			}
			return out
		}
		vd, heads := ne[1], ne[2]
		stride := shape[0] / heads
		for h := range heads {
			out = append(out, w[(h*stride+stride-vd)*kvr:(h+1)*stride*kvr]...)
		}
		return out
	case "exp_probs_b":
		v, _ := refValues(t, cat, p+"mlp.gate.e_score_correction_bias")
		return v
	}
	hf, ok := hfNames[base]
	if !ok {
		t.Fatalf("tensor %s: no reference", name)
	}
	v, _ := refValues(t, cat, p+hf+".weight")
	return v
}

// TestDeepseek2Tensors checks every tensor of the deepseek2 recipes
// against the converter's rule applied to the source, written out
// independently here, on BF16 and FP8 checkpoints of V2-Lite and V3 shape.
func TestDeepseek2Tensors(t *testing.T) {
	for _, tc := range []struct {
		name string
		fp8  bool
	}{{"v2lite-tiny", false}, {"v3-tiny", false}, {"v3-tiny", true}} {
		cat := openReference(t, tc.name, tc.fp8)
		for _, rn := range []string{"BF16", "Q8_0"} {
			t.Run(fmt.Sprintf("%s/fp8=%v/%s", tc.name, tc.fp8, rn), func(t *testing.T) {
				m, err := recipe(t, rn).Plan(cat)
				if err != nil {
					t.Fatal(err)
				}
				for _, ten := range m.Tensors {
					want := refTensor(t, cat, ten.Name, ten.Ne)
					wantType := gguf.BF16
					if rn == "Q8_0" {
						wantType = gguf.Q8_0
						if ten.Ne[0]%32 != 0 { // the converter's fallback for rows of partial blocks
							wantType = gguf.F16
						}
					}
					if len(ten.Ne) == 1 || strings.HasSuffix(ten.Name, "_norm.weight") || strings.Contains(ten.Name, "gate_inp") || strings.HasSuffix(ten.Name, ".bias") {
						wantType = gguf.F32
					}
					if ten.Type != wantType {
						t.Errorf("%s: type %s, want %s", ten.Name, ten.Type.Name, wantType.Name)
						continue
					}
					if got, w := tensorBytes(t, ten), encodeRef(t, want, ten.Type); !bytes.Equal(got, w) {
						t.Errorf("%s: bytes differ from the converter's rule", ten.Name)
					}
				}
			})
		}
	}
}

// TestDeepseek2Metadata lays out each recipe as one file and as shards and
// reads the headers back with the strict reader (offset rule included),
// checking the keys llama.cpp depends on.
func TestDeepseek2Metadata(t *testing.T) {
	for _, tc := range []struct {
		name                string
		gating              uint32
		pre                 string
		qLoRA               uint32
		yarnLogMul, scaling float32
		norm                bool
	}{
		{"v2lite-tiny", 1, "deepseek-llm", 0, float32(0.1 * 0.707), 40, false},
		{"v3-tiny", 2, "deepseek-v3", 96, float32(0.1 * 1.0), 40, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cat := openReference(t, tc.name, false)
			m, err := recipe(t, "BF16").Plan(cat)
			if err != nil {
				t.Fatal(err)
			}
			files, err := m.Files(0)
			if err != nil {
				t.Fatal(err)
			}
			f := readHeader(t, files[0])
			const a = "deepseek2."
			for k, want := range map[string]any{
				"general.architecture":                 "deepseek2",
				"general.alignment":                    uint32(4096),
				"general.file_type":                    uint32(32),
				a + "expert_gating_func":               tc.gating,
				a + "attention.q_lora_rank":            tc.qLoRA,
				a + "attention.kv_lora_rank":           uint32(64),
				a + "attention.key_length":             uint32(64 + 16),
				a + "attention.value_length":           uint32(64),
				a + "attention.key_length_mla":         uint32(32 + 16),
				a + "attention.value_length_mla":       uint32(32),
				a + "attention.head_count_kv":          uint32(1),
				a + "rope.dimension_count":             uint32(16),
				a + "rope.scaling.type":                "yarn",
				a + "rope.scaling.factor":              tc.scaling,
				a + "rope.scaling.yarn_log_multiplier": tc.yarnLogMul,
				a + "block_count":                      uint32(4),
				a + "leading_dense_block_count":        uint32(1),
				"tokenizer.ggml.model":                 "gpt2",
				"tokenizer.ggml.pre":                   tc.pre,
				"tokenizer.ggml.bos_token_id":          uint32(0),
				"tokenizer.ggml.eos_token_id":          uint32(1),
			} {
				if got := f.KV[k]; got != want {
					t.Errorf("%s = %v (%T), want %v (%T)", k, got, got, want, want)
				}
			}
			if got, ok := f.KV[a+"expert_weights_norm"]; ok != tc.norm || (ok && got != true) {
				t.Errorf("expert_weights_norm = %v (present %v), want present %v", got, ok, tc.norm)
			}
			if toks := f.KV["tokenizer.ggml.tokens"].([]any); len(toks) != 512 {
				t.Errorf("%d tokens, want the config's vocab_size 512", len(toks))
			}
			if merges := f.KV["tokenizer.ggml.merges"].([]any); len(merges) == 0 || !strings.Contains(merges[0].(string), " ") {
				t.Errorf("merges %v", merges[:min(3, len(merges))])
			}
			// Split at 1 MiB: several shards, the model keys in the first only.
			shards, err := m.Files(1 << 20)
			if err != nil {
				t.Fatal(err)
			}
			if len(shards) < 2 {
				t.Fatalf("%d shards", len(shards))
			}
			count := 0
			for i, sh := range shards {
				f := readHeader(t, sh)
				count += len(f.Tensors)
				if _, ok := f.KV["general.architecture"]; ok != (i == 0) {
					t.Errorf("shard %d: model keys present %v", i, ok)
				}
				if f.KV["split.no"] != uint16(i) || f.KV["split.count"] != uint16(len(shards)) || f.KV["split.tensors.count"] != int32(len(m.Tensors)) {
					t.Errorf("shard %d: split keys %v %v %v", i, f.KV["split.no"], f.KV["split.count"], f.KV["split.tensors.count"])
				}
			}
			if count != len(m.Tensors) {
				t.Errorf("shards hold %d tensors, the model %d", count, len(m.Tensors))
			}
		})
	}
}

// readHeader parses a laid-out file's header with the strict reader, the
// data section being zeros of the right size.
func readHeader(t *testing.T, f gguf.File) *ggufread.File {
	t.Helper()
	r := &zeroTail{head: bytes.Join(f.Layout.Header, nil), size: f.Layout.Size}
	h, err := ggufread.Read(r, f.Layout.Size)
	if err != nil {
		t.Fatalf("%s: %v", f.Name, err)
	}
	if h.DataStart != f.Layout.HeaderSize || int64(len(r.head)) != f.Layout.HeaderSize {
		t.Errorf("%s: data at %d, header %d bytes (%d in its pieces)", f.Name, h.DataStart, f.Layout.HeaderSize, len(r.head))
	}
	for i, ti := range h.Tensors {
		if ti.Name != f.Tensors[i].Name || ti.Size != f.Tensors[i].Bytes() {
			t.Errorf("%s: tensor %d is %s of %d bytes, want %s of %d", f.Name, i, ti.Name, ti.Size, f.Tensors[i].Name, f.Tensors[i].Bytes())
		}
	}
	return h
}

// zeroTail reads as head followed by zeros up to size.
type zeroTail struct {
	head []byte
	size int64
}

func (z *zeroTail) ReadAt(p []byte, off int64) (int, error) {
	for i := range p {
		switch o := off + int64(i); {
		case o >= z.size:
			return i, fmt.Errorf("read past %d", z.size)
		case o < int64(len(z.head)):
			p[i] = z.head[o]
		default:
			p[i] = 0
		}
	}
	return len(p), nil
}

// wideV3 is a V3-shaped checkpoint whose expert rows are whole 256-weight
// blocks (hidden and expert width 256), so that the IQ2_XXS recipe
// quantises its experts.
func wideV3(t testing.TB) string {
	spec := synth.V3TinySpec()
	spec.Hidden, spec.MoEInter, spec.MaxShardBytes = 256, 256, 4<<20
	dir := filepath.Join(t.TempDir(), "v3-wide")
	if err := synth.WriteMLA(spec, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestIQ2XXSRecipe checks the IQ2_XXS recipe: routed experts gate/up are
// IQ2_XXS and down Q2_K, the codecs' bytes (bit-identical to ggml's) of
// the converter's float values stacked in expert order; everything else
// is the BF16 recipe's.
func TestIQ2XXSRecipe(t *testing.T) {
	cat, err := checkpoint.Open(wideV3(t))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	m, err := recipe(t, "IQ2_XXS").Plan(cat)
	if err != nil {
		t.Fatal(err)
	}
	bf, err := recipe(t, "BF16").Plan(cat)
	if err != nil {
		t.Fatal(err)
	}
	quantised := 0
	for i, ten := range m.Tensors {
		got := tensorBytes(t, ten)
		var want []byte
		switch {
		case strings.HasSuffix(ten.Name, "ffn_down_exps.weight"):
			want = make([]byte, ten.Bytes())
			q2k.QuantizeRef(want, refTensor(t, cat, ten.Name, ten.Ne))
			quantised++
		case strings.HasSuffix(ten.Name, "_exps.weight"):
			want = make([]byte, ten.Bytes())
			iq2xxs.Quantize(want, refTensor(t, cat, ten.Name, ten.Ne), nil)
			quantised++
		default:
			if bf.Tensors[i].Name != ten.Name || bf.Tensors[i].Type != ten.Type {
				t.Fatalf("tensor %d: %s %s, the BF16 recipe has %s %s", i, ten.Name, ten.Type.Name, bf.Tensors[i].Name, bf.Tensors[i].Type.Name)
			}
			want = tensorBytes(t, bf.Tensors[i])
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s (%s): bytes differ", ten.Name, ten.Type.Name)
		}
	}
	if quantised != 9 {
		t.Errorf("%d quantised expert tensors, want 9 (3 MoE layers x 3)", quantised)
	}
}
