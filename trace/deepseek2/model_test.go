package deepseek2

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"github.com/dsfs/dsfs/trace"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/trace/backend"
)

func readConfig(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata.Dir(t), "trace", name, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestParseConfig(t *testing.T) {
	// A ModelArgs config as DeepSeek's inference/configs/config_671B.json
	// writes it, shrunk: YaRN is on (max_seq_len defaults past
	// original_seq_len), sigmoid scoring brings the bias and noaux_tc.
	modelArgs := map[string]any{
		"vocab_size": 512, "dim": 128, "inter_dim": 384, "moe_inter_dim": 48, "n_layers": 4,
		"n_dense_layers": 1, "n_heads": 4, "n_routed_experts": 16, "n_shared_experts": 1,
		"n_activated_experts": 4, "n_expert_groups": 4, "n_limited_groups": 2, "route_scale": 2.5,
		"score_func": "sigmoid", "q_lora_rank": 96, "kv_lora_rank": 64, "qk_nope_head_dim": 32,
		"qk_rope_head_dim": 16, "v_head_dim": 32, "dtype": "fp8", "original_seq_len": 4096,
		"rope_factor": 40, "mscale": 1.0,
	}
	tests := []struct {
		name    string
		cfg     map[string]any
		edit    func(map[string]any)
		check   func(*testing.T, *Config)
		err     string // substring of the error
		missing string // substring of a *trace.Unsupported's list
	}{
		{name: "v2lite", cfg: readConfig(t, "v2lite-tiny"), check: func(t *testing.T, c *Config) {
			if c.QLoRA != 0 || c.TopKMethod != TopKGreedy || c.ScoringFunc != ScoreSoftmax || c.YaRN == nil || c.YaRN.MScaleAllDim != 0.707 {
				t.Errorf("%+v", c)
			}
		}},
		{name: "v3", cfg: readConfig(t, "v3-tiny"), check: func(t *testing.T, c *Config) {
			if c.QLoRA != 96 || c.TopKMethod != TopKNoAuxTC || c.Groups != 4 || c.TopKGroups != 2 || !c.NormTopKProb || c.RoutedScale != 2.5 {
				t.Errorf("%+v", c)
			}
		}},
		{name: "model args", cfg: modelArgs, check: func(t *testing.T, c *Config) {
			if c.Hidden != 128 || c.TopKMethod != TopKNoAuxTC || c.YaRN == nil || c.YaRN.Factor != 40 || c.weightRule() != ruleModelPy {
				t.Errorf("%+v, yarn %+v", c, c.YaRN)
			}
		}},
		{name: "model args without yarn", cfg: modelArgs, edit: func(m map[string]any) { m["max_seq_len"] = 4096 },
			check: func(t *testing.T, c *Config) {
				if c.YaRN != nil {
					t.Errorf("YaRN on: %+v", c.YaRN)
				}
			}},
		{name: "gready", cfg: readConfig(t, "v2lite-tiny"), edit: func(m map[string]any) { m["topk_method"] = "gready" },
			check: func(t *testing.T, c *Config) {
				if c.TopKMethod != TopKGreedy {
					t.Errorf("topk_method %q", c.TopKMethod)
				}
			}},
		{name: "missing kv_lora_rank", cfg: readConfig(t, "v3-tiny"), edit: func(m map[string]any) { delete(m, "kv_lora_rank") }, err: "missing kv_lora_rank"},
		{name: "groups", cfg: readConfig(t, "v3-tiny"), edit: func(m map[string]any) { m["n_group"] = 3 }, err: "n_group 3"},
		{name: "odd rope", cfg: readConfig(t, "v3-tiny"), edit: func(m map[string]any) { m["qk_rope_head_dim"] = 15 }, err: "odd"},
		{name: "top-k", cfg: readConfig(t, "v3-tiny"), edit: func(m map[string]any) { m["num_experts_per_tok"] = 17 }, err: "num_experts_per_tok"},
		{name: "not json", cfg: nil, err: "config.json"},
		{name: "linear rope", cfg: readConfig(t, "v2lite-tiny"), edit: func(m map[string]any) {
			m["rope_scaling"] = map[string]any{"type": "linear", "factor": 2}
		}, missing: `rope_scaling type "linear"`},
		{name: "v4.1", cfg: readConfig(t, "v3-tiny"), edit: func(m map[string]any) {
			m["model_type"] = "deepseek_v41"
			m["hc_mult"] = 4
			m["engram_layer_ids"] = []int{1, 14}
			m["o_groups"] = 8
			m["compress_ratios"] = []int{0, 4}
			m["scoring_func"] = "sqrtsoftplus"
		}, missing: "hyper-connections"},
		{name: "unknown type", cfg: readConfig(t, "v3-tiny"), edit: func(m map[string]any) { m["model_type"] = "llama" }, missing: `model_type "llama"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte("[1, 2]")
			if tt.cfg != nil {
				m := make(map[string]any)
				for k, v := range tt.cfg {
					m[k] = v
				}
				if tt.edit != nil {
					tt.edit(m)
				}
				var err error
				if data, err = json.Marshal(m); err != nil {
					t.Fatal(err)
				}
			}
			c, err := ParseConfig(data)
			var ue *trace.Unsupported
			switch {
			case tt.missing != "":
				if !errors.As(err, &ue) || !strings.Contains(strings.Join(ue.Missing, "\n"), tt.missing) {
					t.Fatalf("error %v, want a *trace.Unsupported listing %q", err, tt.missing)
				}
			case tt.err != "":
				if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one mentioning %q", err, tt.err)
				}
			case err != nil:
				t.Fatal(err)
			default:
				tt.check(t, c)
			}
		})
	}
}

// TestUnsupportedV41 opens the synthetic DeepSeek-V4.1 checkpoint, whose
// architecture the engine does not run, and checks that the error names
// the missing pieces.
func TestUnsupportedV41(t *testing.T) {
	dir := t.TempDir()
	spec := synth.TinySpec()
	spec.Sparse = true
	if err := synth.WriteSpec(spec, dir); err != nil {
		t.Fatal(err)
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	_, err = Open(cat)
	var ue *trace.Unsupported
	if !errors.As(err, &ue) {
		t.Fatalf("Open: %v, want a *trace.Unsupported", err)
	}
	all := strings.Join(ue.Missing, "\n")
	for _, want := range []string{"hyper-connections", "Engram", "compressed sparse attention", "o_groups", "MXFP4", "sqrtsoftplus"} {
		if !strings.Contains(all, want) {
			t.Errorf("missing list lacks %q:\n%s", want, all)
		}
	}
}

// source is a tensor of a checkpoint read whole.
type source struct {
	dtype safetensors.DType
	shape []int64
	data  []byte
}

func readCheckpoint(t *testing.T, dir string) (map[string]source, []byte) {
	t.Helper()
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	out := make(map[string]source)
	for _, ts := range cat.Tensors {
		b := make([]byte, ts.Size)
		if _, err := ts.Shard.ReadAt(b, ts.Offset); err != nil {
			t.Fatal(err)
		}
		out[ts.Name] = source{ts.DType, ts.Shape, b}
	}
	return out, cat.ConfigBytes
}

// writeCheckpoint writes tensors as one model.safetensors with config.
func writeCheckpoint(t *testing.T, dir string, tensors map[string]source, config []byte) {
	t.Helper()
	var ts []synth.Tensor
	for name, s := range tensors {
		ts = append(ts, synth.Tensor{Name: name, DType: s.dtype, Shape: s.shape, Data: s.data})
	}
	if err := synth.WriteShard(filepath.Join(dir, "model.safetensors"), []safetensors.Meta{{Key: "format", Value: "pt"}}, ts); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
		t.Fatal(err)
	}
}

func openDir(t *testing.T, dir string) *Model {
	t.Helper()
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	m, err := Open(cat)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBadTensors removes or reshapes a tensor of layer 2: layers 0 and 1
// still run, and the problem names the tensor.
func TestBadTensors(t *testing.T) {
	src, config := readCheckpoint(t, filepath.Join(testdata.Dir(t), "trace", "v2lite-tiny"))
	const victim = "model.layers.2.self_attn.kv_b_proj.weight"
	tests := []struct {
		name string
		edit func(map[string]source)
		want string
	}{
		{"missing", func(ts map[string]source) { delete(ts, victim) }, "tensor " + victim + ": missing"},
		{"shape", func(ts map[string]source) {
			s := ts[victim]
			s.shape = []int64{s.shape[1], s.shape[0]}
			ts[victim] = s
		}, "shape [64 256], want [256 64]"},
		{"dtype", func(ts map[string]source) {
			s := ts[victim]
			s.dtype = safetensors.I16
			ts[victim] = s
		}, "dtype I16"},
		{"expert", func(ts map[string]source) { delete(ts, "model.layers.2.mlp.experts.7.down_proj.weight") }, "experts.7.down_proj.weight: missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := make(map[string]source)
			for k, v := range src {
				ts[k] = v
			}
			tt.edit(ts)
			dir := t.TempDir()
			writeCheckpoint(t, dir, ts, config)
			m := openDir(t, dir)
			if got := m.Runnable(); got != 2 {
				t.Errorf("Runnable() = %d, want 2", got)
			}
			if p := strings.Join(m.Problems(2), "\n"); !strings.Contains(p, tt.want) {
				t.Errorf("problems of layer 2: %q, want %q", p, tt.want)
			}
			if len(m.Problems(1)) != 0 || len(m.Problems(3)) != 0 {
				t.Errorf("problems elsewhere: %v, %v", m.Problems(1), m.Problems(3))
			}
			if _, err := m.Forward(context.Background(), backend.NewCPU(), 2, make([]float32, m.Config.Hidden), []int{1}); err == nil {
				t.Error("layer 2 ran")
			}
		})
	}
}

// e4m3Values are the finite E4M3 values in ascending order with their
// bytes, to round to the nearest.
var e4m3Values = func() (v []struct {
	f float32
	b byte
}) {
	for b := range 256 {
		f := codecs.E4M3ToFloat32(byte(b))
		if f == f && (f != 0 || b == 0) {
			v = append(v, struct {
				f float32
				b byte
			}{f, byte(b)})
		}
	}
	sort.Slice(v, func(i, j int) bool { return v[i].f < v[j].f })
	return v
}()

func toE4M3(f float32) byte {
	i := sort.Search(len(e4m3Values), func(i int) bool { return e4m3Values[i].f >= f })
	switch {
	case i == len(e4m3Values):
		return e4m3Values[i-1].b
	case i > 0 && f-e4m3Values[i-1].f < e4m3Values[i].f-f:
		return e4m3Values[i-1].b
	}
	return e4m3Values[i].b
}

// quantizeFP8 quantises a BF16 matrix to E4M3 with power-of-two block
// scales (F32 or E8M0), and returns the quantised weight, its scale and
// the dequantised matrix as BF16, which holds it exactly (3 mantissa bits
// times a power of two).
func quantizeFP8(s source, br, bc int, e8m0 bool) (q, scale, deq source) {
	rows, cols := int(s.shape[0]), int(s.shape[1])
	sr, sc := (rows+br-1)/br, (cols+bc-1)/bc
	w := make([]float32, rows*cols)
	codecs.DecodeBF16(w, s.data)
	q = source{safetensors.F8E4M3, s.shape, make([]byte, rows*cols)}
	deq = source{safetensors.BF16, s.shape, make([]byte, 2*rows*cols)}
	if e8m0 {
		scale = source{safetensors.F8E8M0, []int64{int64(sr), int64(sc)}, make([]byte, sr*sc)}
	} else {
		scale = source{safetensors.F32, []int64{int64(sr), int64(sc)}, make([]byte, 4*sr*sc)}
	}
	for bi := range sr {
		for bj := range sc {
			var amax float64
			for r := bi * br; r < min(rows, (bi+1)*br); r++ {
				for c := bj * bc; c < min(cols, (bj+1)*bc); c++ {
					amax = math.Max(amax, math.Abs(float64(w[r*cols+c])))
				}
			}
			e := int(math.Ceil(math.Log2(amax / 448)))
			f := float32(math.Ldexp(1, e))
			if e8m0 {
				scale.data[bi*sc+bj] = byte(e + 127)
			} else {
				binary.LittleEndian.PutUint32(scale.data[4*(bi*sc+bj):], math.Float32bits(f))
			}
			for r := bi * br; r < min(rows, (bi+1)*br); r++ {
				for c := bj * bc; c < min(cols, (bj+1)*bc); c++ {
					b := toE4M3(w[r*cols+c] / f)
					q.data[r*cols+c] = b
					binary.LittleEndian.PutUint16(deq.data[2*(r*cols+c):], codecs.Float32ToBF16(codecs.E4M3ToFloat32(b)*f))
				}
			}
		}
	}
	return q, scale, deq
}

// flatName is DeepSeek's inference name of an HF tensor name
// (inference/convert.py's mapping).
func flatName(hf string) string {
	flat := map[string]string{
		"embed_tokens": "embed", "self_attn": "attn", "mlp": "ffn",
		"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
		"q_a_proj": "wq_a", "q_a_layernorm": "q_norm", "q_b_proj": "wq_b", "q_proj": "wq",
		"kv_a_proj_with_mqa": "wkv_a", "kv_a_layernorm": "kv_norm", "kv_b_proj": "wkv_b",
		"o_proj": "wo", "gate_proj": "w1", "down_proj": "w2", "up_proj": "w3",
		"e_score_correction_bias": "bias", "lm_head": "head",
	}
	parts := strings.Split(strings.TrimPrefix(hf, "model."), ".")
	for i, p := range parts {
		if f, ok := flat[p]; ok {
			parts[i] = f
		}
	}
	return strings.Join(parts, ".")
}

// TestFlatFP8 writes the v3-tiny checkpoint twice: with DeepSeek's flat
// names and FP8 weights (F32 128×128 scales, and E8M0 32×32 for the
// experts), and with HF names and the dequantised values in BF16. Both must
// give the same activations and routes, bit for bit.
func TestFlatFP8(t *testing.T) {
	for _, name := range goldenModels {
		t.Run(name, func(t *testing.T) {
			src, config := readCheckpoint(t, filepath.Join(testdata.Dir(t), "trace", name))
			flat := make(map[string]source)
			hf := make(map[string]source)
			for n, s := range src {
				if len(s.shape) != 2 || strings.Contains(n, "embed") || strings.Contains(n, "lm_head") {
					flat[flatName(n)], hf[n] = s, s
					continue
				}
				e8m0 := strings.Contains(n, "experts")
				b := 128
				if e8m0 {
					b = 32
				}
				q, scale, deq := quantizeFP8(s, b, b, e8m0)
				base := strings.TrimSuffix(flatName(n), ".weight")
				flat[base+".weight"], flat[base+".scale"] = q, scale
				hf[n] = deq
			}
			if flatName("model.layers.3.mlp.experts.5.gate_proj.weight") != "layers.3.ffn.experts.5.w1.weight" {
				t.Fatal(flatName("model.layers.3.mlp.experts.5.gate_proj.weight"))
			}
			dirs := []string{t.TempDir(), t.TempDir()}
			writeCheckpoint(t, dirs[0], flat, config)
			writeCheckpoint(t, dirs[1], hf, config)
			var outs [2][]*Output
			for i, dir := range dirs {
				m := openDir(t, dir)
				if want := []Naming{NamingFlat, NamingHF}[i]; m.Naming != want {
					t.Fatalf("%s: naming %v, want %v", dir, m.Naming, want)
				}
				if m.Runnable() != m.Config.Layers {
					for l := range m.Config.Layers {
						t.Log(m.Problems(l))
					}
					t.Fatalf("%s: %d runnable layers", dir, m.Runnable())
				}
				h, err := m.EmbedRows([]int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
				if err != nil {
					t.Fatal(err)
				}
				for l := range m.Config.Layers {
					out, err := m.Forward(context.Background(), backend.NewCPU(), l, h, []int{4, 6})
					if err != nil {
						t.Fatal(err)
					}
					outs[i] = append(outs[i], out)
					h = out.HiddenOut
				}
			}
			for l := range outs[0] {
				a, b := outs[0][l], outs[1][l]
				for _, c := range [][2][]float32{{a.AttnOut, b.AttnOut}, {a.FFNOut, b.FFNOut}, {a.HiddenOut, b.HiddenOut}, {a.KPE, b.KPE}} {
					if !slices.Equal(c[0], c[1]) {
						t.Fatalf("layer %d: FP8 and BF16 activations differ", l)
					}
				}
				if (a.Routes == nil) != (b.Routes == nil) || a.Routes != nil && !slices.Equal(a.Routes.IDs, b.Routes.IDs) {
					t.Fatalf("layer %d: routes differ", l)
				}
			}
		})
	}
}

// TestHostileCounts: counts in config.json far beyond the tensors cost
// work in proportion to the tensors, and one problem, not one per layer or
// expert named.
func TestHostileCounts(t *testing.T) {
	src, config := readCheckpoint(t, filepath.Join(testdata.Dir(t), "trace", "v2lite-tiny"))
	tests := []struct {
		key, value  string
		runnable    int
		problems    int // in all
		wantProblem string
	}{
		{"num_hidden_layers", "100000", 4, 1, "no tensors in the checkpoint, nor for layers 5-99999 (config.json num_hidden_layers 100000)"},
		{"num_hidden_layers", "1000000", 4, 1, "nor for layers 5-999999"},
		{"num_hidden_layers", "1000000000", 4, 1, "nor for layers 5-999999999"},
		// Per MoE layer: the router's shape, and the count, not three
		// lines per expert named.
		{"n_routed_experts", "1000000000", 1, 6, "n_routed_experts 1000000000: layer 1 holds only 35 tensors"},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			cfg, err := checkpoint.PatchConfig(config, []string{tt.key}, json.Number(tt.value))
			if err != nil {
				t.Fatal(err)
			}
			if tt.key == "n_routed_experts" { // keep the routing settings consistent
				if cfg, err = checkpoint.PatchConfig(cfg, []string{"n_group"}, json.Number("1")); err != nil {
					t.Fatal(err)
				}
			}
			dir := t.TempDir()
			writeCheckpoint(t, dir, src, cfg)
			m := openDir(t, dir)
			if got := m.Runnable(); got != tt.runnable {
				t.Errorf("Runnable() = %d, want %d", got, tt.runnable)
			}
			if got := m.Checked(); got > 5 {
				t.Errorf("Checked() = %d, want at most 5", got)
			}
			var all []string
			for l := range m.Checked() {
				all = append(all, m.Problems(l)...)
			}
			if len(all) != tt.problems || !strings.Contains(strings.Join(all, "\n"), tt.wantProblem) {
				t.Errorf("problems %q, want %d with %q", all, tt.problems, tt.wantProblem)
			}
		})
	}
}
