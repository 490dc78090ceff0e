package integration

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
)

// goldenArray is an array of golden.json.
type goldenArray struct {
	Shape []int  `json:"shape"`
	Data  []byte `json:"data"`
}

func (a *goldenArray) f32() []float32 {
	v := make([]float32, len(a.Data)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(a.Data[4*i:]))
	}
	return v
}

func (a *goldenArray) i32() []int32 {
	v := make([]int32, len(a.Data)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(a.Data[4*i:]))
	}
	return v
}

type goldenSeq struct {
	TokenIDs []int                        `json:"token_ids"`
	Layers   []map[string]json.RawMessage `json:"layers"`
}

// array returns a layer's array of the given kind, nil when it has none.
func (s *goldenSeq) array(t *testing.T, layer int, kind string) *goldenArray {
	t.Helper()
	raw, ok := s.Layers[layer][kind]
	if !ok {
		return nil
	}
	var a goldenArray
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("golden layer %d %s: %v", layer, kind, err)
	}
	return &a
}

func readGolden(t *testing.T, dir string) []goldenSeq {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Sequences []goldenSeq `json:"sequences"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g.Sequences
}

// readSafetensors reads a safetensors file with os.ReadFile (through the
// mount) and returns its tensors' raw bytes with their headers.
func readSafetensors(t *testing.T, path string) map[string]readTensor {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := make(map[string]readTensor)
	for _, ts := range h.Tensors {
		out[ts.Name] = readTensor{ts, b[h.DataStart+ts.Begin : h.DataStart+ts.End]}
	}
	return out
}

// readTensor is one tensor of a file readSafetensors read.
type readTensor struct {
	meta safetensors.Tensor
	data []byte
}

// viewStat reads a trace counter from .dsfs/stats.json.
func layerForwards(t *testing.T, m *mount) int {
	t.Helper()
	b, err := os.ReadFile(m.path(".dsfs", "stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		ViewStats struct {
			Trace struct {
				LayerForwards int `json:"layer_forwards"`
			} `json:"trace"`
		} `json:"view_stats"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("stats.json: %v\n%s", err, b)
	}
	return s.ViewStats.Trace.LayerForwards
}

// writePrompts writes a --trace-prompts file.
func writePrompts(t *testing.T, prompts any) string {
	t.Helper()
	b, err := json.Marshal(prompts)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "prompts.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTraceGolden mounts the reference checkpoints of testdata/trace
// with their sequences as token-id prompts and compares every activation
// of layers/NN.safetensors, read through the mount, with DeepSeek's
// reference: max |Δ| ≤ 1e-4 × the tensor's max per tensor, identical expert
// sets. Reading layer 2 first runs layers 0-2; layer 3 then runs alone.
func TestTraceGolden(t *testing.T) {
	for _, name := range []string{"v2lite-tiny", "v3-tiny"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(testdata.Dir(t), "trace", name)
			seqs := readGolden(t, dir)
			var prompts []map[string]any
			for i, s := range seqs {
				prompts = append(prompts, map[string]any{"id": fmt.Sprintf("seq%d", i), "label": "golden", "token_ids": s.TokenIDs})
			}
			m := startMount(t, dir, "--views", "trace", "--device", "cpu", "--trace-prompts", writePrompts(t, prompts))
			if n := layerForwards(t, m); n != 0 {
				t.Fatalf("%d layer forwards before any read", n)
			}
			for _, step := range []struct{ layer, forwards int }{{2, 3}, {3, 4}, {0, 5}, {1, 6}} {
				file := m.path("trace", "layers", fmt.Sprintf("%02d.safetensors", step.layer))
				got := readSafetensors(t, file)
				if n := layerForwards(t, m); n != step.forwards {
					t.Fatalf("after reading layer %d: %d layer forwards, want %d\n%s", step.layer, n, step.forwards, m.log)
				}
				for i, s := range seqs {
					g := func(kind string) *goldenArray { return s.array(t, step.layer, kind) }
					for _, kind := range []string{"attn_out", "ffn_out", "hidden_out", "kv_latent", "k_pe"} {
						name := fmt.Sprintf("seq%d.%s", i, kind)
						ts, ok := got[name]
						if !ok {
							t.Fatalf("layer %d: no tensor %s", step.layer, name)
						}
						want := g(kind)
						if !slices.Equal(ts.meta.Shape, []int64{int64(want.Shape[0]), int64(want.Shape[1])}) || ts.meta.DType != safetensors.F32 {
							t.Fatalf("layer %d: %s is %s %v, want F32 %v", step.layer, name, ts.meta.DType, ts.meta.Shape, want.Shape)
						}
						compare(t, fmt.Sprintf("layer %d %s", step.layer, name), (&goldenArray{Data: ts.data}).f32(), want.f32())
					}
					ids, weights := got[fmt.Sprintf("seq%d.topk_ids", i)], got[fmt.Sprintf("seq%d.topk_weights", i)]
					wantIDs, wantW := g("topk_ids"), g("topk_weights")
					if wantIDs == nil {
						if ids.data != nil || weights.data != nil {
							t.Errorf("layer %d is dense but has routes", step.layer)
						}
						continue
					}
					if ids.meta.DType != safetensors.I32 || weights.meta.DType != safetensors.F32 {
						t.Fatalf("layer %d: routes are %s and %s", step.layer, ids.meta.DType, weights.meta.DType)
					}
					compareRoutes(t, fmt.Sprintf("layer %d seq%d", step.layer, i), ids.data, weights.data, wantIDs.Data, wantW.f32(), wantIDs.Shape[1])
				}
			}
			// The documents are valid JSON and agree with the files.
			var rec struct {
				Layer   int `json:"layer"`
				Routing struct {
					PerPrompt []struct {
						Tokens      int `json:"tokens"`
						TokenRoutes []struct {
							Token *string `json:"token"`
						} `json:"token_routes"`
					} `json:"per_prompt"`
				} `json:"routing"`
			}
			b, err := os.ReadFile(m.path("trace", "layers", "03.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &rec); err != nil || rec.Layer != 3 || len(rec.Routing.PerPrompt) != 2 ||
				rec.Routing.PerPrompt[1].Tokens != len(seqs[1].TokenIDs) || rec.Routing.PerPrompt[0].TokenRoutes[0].Token != nil {
				t.Fatalf("layers/03.json (%v):\n%s", err, b)
			}
			var doc struct {
				Environment struct {
					Backend string `json:"backend"`
				} `json:"environment"`
				Execution struct {
					Layers []json.RawMessage `json:"layers"`
				} `json:"execution"`
			}
			b, err = os.ReadFile(m.path("trace", "trace.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &doc); err != nil || doc.Environment.Backend != "cpu" || len(doc.Execution.Layers) != 4 {
				t.Fatalf("trace.json (%v): %.500s", err, b)
			}
			if n := layerForwards(t, m); n != 6 {
				t.Errorf("the documents ran %d more layers", n-6)
			}
		})
	}
}

// compare is the V2/V3 goldens' tolerance: max |Δ| ≤ 1e-4 × the golden's
// largest magnitude.
func compare(t *testing.T, what string, got, want []float32) {
	t.Helper()
	compareWithin(t, what, got, want, 1e-4)
}

// compareWithin fails t unless got has want's length and max |Δ| ≤ rel ×
// want's largest magnitude.
func compareWithin(t *testing.T, what string, got, want []float32, rel float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var scale, worst float64
	for i := range want {
		scale = math.Max(scale, math.Abs(float64(want[i])))
		worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
	}
	if !(worst <= rel*scale) {
		t.Errorf("%s: max |Δ| %.3g exceeds %g × %.3g", what, worst, rel, scale)
	}
}

// compareRoutes checks that every token has the reference's expert set,
// with the weights of the same experts.
func compareRoutes(t *testing.T, what string, ids, weights, wantIDs []byte, wantW []float32, k int) {
	t.Helper()
	if len(ids) != len(wantIDs) {
		t.Fatalf("%s: %d route bytes, want %d", what, len(ids), len(wantIDs))
	}
	got := (&goldenArray{Data: weights}).f32()
	for tok := range len(ids) / 4 / k {
		a := map[int32]float32{}
		b := map[int32]float32{}
		for j := range k {
			i := tok*k + j
			a[int32(binary.LittleEndian.Uint32(ids[4*i:]))] = got[i]
			b[int32(binary.LittleEndian.Uint32(wantIDs[4*i:]))] = wantW[i]
		}
		for e, w := range b {
			gw, ok := a[e]
			if !ok {
				t.Fatalf("%s: token %d: experts %v, want %v", what, tok, a, b)
			}
			if math.Abs(float64(gw-w)) > 1e-4*math.Max(1, math.Abs(float64(w))) {
				t.Errorf("%s: token %d expert %d: weight %g, want %g", what, tok, e, gw, w)
			}
		}
	}
}

// TestTraceSynth traces the synthetic v2lite-tiny checkpoint with its
// tokenizer and the seed's four prompts, as dsfs demo would.
func TestTraceSynth(t *testing.T) {
	needMount(t)
	src := t.TempDir()
	if err := synth.Write("v2lite-tiny", src); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, src, "--views", "trace")
	var prompts []struct {
		ID       string   `json:"id"`
		TokenIDs []int    `json:"token_ids"`
		Tokens   []string `json:"tokens"`
	}
	b, err := os.ReadFile(m.path("trace", "prompts.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &prompts); err != nil || len(prompts) != 4 || prompts[0].ID != "zh_explanation" ||
		len(prompts[3].Tokens) != len(prompts[3].TokenIDs) {
		t.Fatalf("prompts.json (%v): %s", err, b)
	}
	fi, err := os.Stat(m.path("trace", "layers", "01.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	// Sizes are known before anything runs: per prompt 3 × [T, 128] +
	// [T, 64] + [T, 16] floats, and [T, 3] ids and weights on MoE layers.
	tokens := 0
	for _, p := range prompts {
		tokens += len(p.TokenIDs)
	}
	data := int64(tokens) * (3*128 + 64 + 16 + 3 + 3) * 4
	if fi.Size() <= data || fi.Size() > data+8192 {
		t.Errorf("layers/01.safetensors is %d bytes for %d of data", fi.Size(), data)
	}
	if n := layerForwards(t, m); n != 0 {
		t.Errorf("%d forwards after a stat", n)
	}
	// sha256sum reads it as an ordinary tool would.
	run(t, "sha256sum", m.path("trace", "layers", "01.safetensors"))
	if n := layerForwards(t, m); n != 2 {
		t.Errorf("%d forwards to read layer 1, want 2", n)
	}
}

// TestTraceBadInput checks that what trace/ cannot run is said in
// trace/ERROR.txt and in one log line, and that a bad --trace-prompts file or
// --device stops the mount with a clear message.
func TestTraceBadInput(t *testing.T) {
	needMount(t)
	v2 := t.TempDir()
	if err := synth.Write("v2lite-tiny", v2); err != nil {
		t.Fatal(err)
	}
	const victim = "model.layers.2.self_attn.kv_b_proj.weight"
	shardOf := func(t *testing.T, dir, tensor string) string {
		b, err := os.ReadFile(filepath.Join(dir, synth.IndexName))
		if err != nil {
			t.Fatal(err)
		}
		var ix struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		json.Unmarshal(b, &ix)
		return filepath.Join(dir, ix.WeightMap[tensor])
	}
	for _, tt := range []struct {
		name    string
		src     func(t *testing.T) string
		want    []string // in ERROR.txt
		layers  int      // layer files served
		noFiles bool     // trace/ holds ERROR.txt alone
	}{
		{"unknown architecture", func(t *testing.T) string {
			// DeepSeek-V4 with Engram blocks, which no release has.
			dir := t.TempDir()
			if err := synth.Write("v4-tiny", dir); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, checkpoint.ConfigName)
			b, err := os.ReadFile(p)
			if err == nil {
				b, err = checkpoint.PatchConfig(b, []string{"engram_layer_ids"}, []any{1})
			}
			if err == nil {
				err = os.WriteFile(p, b, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			return dir
		}, []string{"deepseek_v4", "Engram"}, 0, true},
		{"no tokenizer for the default prompts", func(t *testing.T) string { return filepath.Join(testdata.Dir(t), "trace", "v3-tiny") },
			[]string{"no tokenizer.json", "token_ids"}, 0, true},
		{"missing tensor", func(t *testing.T) string {
			dir := t.TempDir()
			run(t, "cp", "-a", v2+"/.", dir)
			rewriteHeader(t, shardOf(t, dir, victim), func(h map[string]map[string]any) {
				h[victim+"_renamed"] = h[victim]
				delete(h, victim)
			})
			return dir
		}, []string{"tensor " + victim + ": missing", "layers 2-3 are not served"}, 2, false},
		{"wrong shape", func(t *testing.T) string {
			dir := t.TempDir()
			run(t, "cp", "-a", v2+"/.", dir)
			rewriteHeader(t, shardOf(t, dir, victim), func(h map[string]map[string]any) {
				s := h[victim]["shape"].([]any)
				h[victim]["shape"] = []any{s[1], s[0]}
			})
			return dir
		}, []string{victim + ": shape [64 256], want [256 64]"}, 2, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := startMount(t, tt.src(t), "--views", "trace")
			b, err := os.ReadFile(m.path("trace", "ERROR.txt"))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("ERROR.txt lacks %q:\n%s", w, b)
				}
			}
			// The log says it in one short line pointing at ERROR.txt; the
			// details are not repeated there.
			var lines []string
			for _, l := range strings.Split(m.log.String(), "\n") {
				if strings.Contains(l, "ERROR.txt") || slices.ContainsFunc(tt.want, func(w string) bool { return strings.Contains(l, w) }) {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "trace/ERROR.txt") || len(lines[0]) > 160 {
				t.Errorf("want one short WARN line naming trace/ERROR.txt, got %q", lines)
			}
			ents, _ := os.ReadDir(m.path("trace"))
			if tt.noFiles && len(ents) != 1 {
				t.Errorf("trace/ holds %d entries, want ERROR.txt alone", len(ents))
			}
			layers, _ := filepath.Glob(m.path("trace", "layers", "*.safetensors"))
			if len(layers) != tt.layers {
				t.Errorf("%d layer files, want %d", len(layers), tt.layers)
			}
			if tt.layers > 0 {
				run(t, "cat", m.path("trace", "layers", "01.safetensors"))
				run(t, "cat", m.path("trace", "trace.json"))
			}
		})
	}
	golden := filepath.Join(testdata.Dir(t), "trace", "v2lite-tiny")
	for _, tt := range []struct {
		name string
		args []string
		src  string
		want string
	}{
		{"bad prompt id", []string{"--trace-prompts", writePrompts(t, []map[string]any{{"id": "a b", "token_ids": []int{1}}})}, golden, `id "a b" must match`},
		{"text without tokenizer", []string{"--trace-prompts", writePrompts(t, []map[string]any{{"id": "a", "text": "hi"}})}, golden, "no tokenizer.json"},
		{"token past the vocabulary", []string{"--trace-prompts", writePrompts(t, []map[string]any{{"id": "a", "token_ids": []int{1, 512}}})}, golden, "outside the model's vocabulary of 512"},
		{"missing prompts file", []string{"--trace-prompts", filepath.Join(t.TempDir(), "none.json")}, golden, "none.json"},
		{"unknown device", []string{"--device", "tpu"}, golden, `unknown device "tpu"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			needMount(t)
			out, err := exec.Command(dsfsBin, append(append([]string{"mount"}, tt.args...), tt.src, t.TempDir())...).CombinedOutput()
			if err == nil {
				t.Fatalf("mount succeeded:\n%s", out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("output lacks %q:\n%s", tt.want, out)
			}
		})
	}
}
