package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs/iq2xxs"
	"github.com/dsfs/dsfs/codecs/q2k"
	"github.com/dsfs/dsfs/gguf"
	"github.com/dsfs/dsfs/internal/fp8ckpt"
	"github.com/dsfs/dsfs/internal/ggufread"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/trace/backend"
	"github.com/dsfs/dsfs/trace/deepseek2"
	"github.com/x448/float16"
)

// llamaCppDir returns where node-llama-cpp is installed ($DSFS_NODE_LLAMA_CPP,
// else ~/.cache/dsfs/node-llama-cpp, where .ci/run installs it), skipping
// the test with the reason when node or the package is missing.
func llamaCppDir(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not found: the llama.cpp tests need node and npm's node-llama-cpp@3.22.1 (.ci/run installs them)")
	}
	dir := os.Getenv("DSFS_NODE_LLAMA_CPP")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "dsfs", "node-llama-cpp")
	}
	for _, p := range []string{"node-llama-cpp/package.json", "@node-llama-cpp/linux-x64/package.json"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", p)); err != nil {
			t.Skipf("%s: node-llama-cpp not installed there (npm install node-llama-cpp@3.22.1 in it, as .ci/run does, or set DSFS_NODE_LLAMA_CPP)", dir)
		}
	}
	return dir
}

// llamaLogits runs llama.cpp on a GGUF file and returns the logits at every
// position of every prompt.
func llamaLogits(t *testing.T, dir, modelPath string, prompts [][]int) [][][]float64 {
	t.Helper()
	pf := filepath.Join(t.TempDir(), "prompts.json")
	b, _ := json.Marshal(prompts)
	if err := os.WriteFile(pf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "testdata/llama_logits.mjs", dir, modelPath, pf)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llama.cpp on %s: %v\n%s", modelPath, err, stderr.String())
	}
	var res struct{ Logits [][][]float64 }
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("llama.cpp output: %v", err)
	}
	return res.Logits
}

// ggufCheckpoint is a reference checkpoint of testdata/trace (the weights
// its golden activations come from) with the tokenizer files of the synth
// preset of the same name, which llama.cpp needs to load a model.
func ggufCheckpoint(t *testing.T, name string) (dir string, prompts [][]int) {
	t.Helper()
	ref, prompts := testdata.TraceSequences(t, name)
	dir = filepath.Join(t.TempDir(), name)
	tok := filepath.Join(t.TempDir(), "synth")
	if err := synth.Write(name, tok); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		copyFile(t, filepath.Join(ref, f), filepath.Join(dir, f))
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		copyFile(t, filepath.Join(tok, f), filepath.Join(dir, f))
	}
	return dir, prompts
}

// readGGUF reads a GGUF file whole and parses its header with the strict
// reader.
func readGGUF(t *testing.T, path string) ([]byte, *ggufread.File) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ggufread.Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return data, f
}

// writeValueCheckpoint writes a one-shard checkpoint of specs into a new
// folder "from-gguf", each tensor's bytes from write, with the configs
// (paths under src) copied beside it, and returns the folder.
func writeValueCheckpoint(t *testing.T, src string, configs []string, specs []safetensors.Spec, write func(w io.Writer, name string)) string {
	t.Helper()
	lay, err := safetensors.NewLayout(nil, specs)
	if err != nil {
		t.Fatal(err)
	}
	file := bytes.NewBuffer(lay.Header)
	for _, lt := range lay.Tensors {
		write(file, lt.Name)
	}
	dir := filepath.Join(t.TempDir(), "from-gguf")
	for _, name := range configs {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		copyFile(t, filepath.Join(src, name), filepath.Join(dir, name))
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// routeMarginFloor is, by recipe, the routing margin (selection score of
// the k-th expert minus the (k+1)-th, or of the last allowed group minus
// the next) below which a token's experts may differ between llama.cpp
// and an exact float32 forward: llama.cpp rounds matmul inputs to the
// weights' dot-product type, so the router sees a hidden state slightly
// off. With BF16 inputs v3-tiny has a decision at 0.0007 that llama.cpp
// takes the other way (prompt 1, token 2, layer 1) while every margin of
// 0.0019 and up agrees; Q8_0 inputs are coarser and flipped one at 0.0020
// (token 4, layer 3) and others up to about 0.01 on the FP8 checkpoint.
// The floors are in sigmoid-score units (V3) and taken at a quarter for
// softmax probabilities (V2). A flipped route changes that token's output
// and, through attention, every later position, so logits are compared up
// to the first token with a margin below the floor.
var routeMarginFloor = map[string]float32{"BF16": 0.001, "Q8_0": 0.02, "IQ2_XXS": 0.02}

// traceLogits is dsfs's own forward of the checkpoint (trace/deepseek2, the
// engine trace/ runs, checked against DeepSeek's reference in its golden
// tests) through every layer, then the final RMSNorm and the head in
// float64. firm[i] is the number of leading positions of prompt i whose
// routes, in every layer, are decided by more than floor.
func traceLogits(t *testing.T, dir string, prompts [][]int, floor float32) (logits [][][]float64, firm []int) {
	t.Helper()
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	m, err := deepseek2.Open(cat)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config
	if c.ScoringFunc == "softmax" {
		// Softmax probabilities over V2-Lite's experts run about a
		// quarter of the sigmoid scores the floors are set in.
		floor /= 4
	}
	norm, err := gguf.DecodeRows(cat.Tensor("model.norm.weight"), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	head, err := gguf.DecodeRows(cat.Tensor("lm_head.weight"), 0, int64(c.Vocab))
	if err != nil {
		t.Fatal(err)
	}
	for _, ids := range prompts {
		hidden, err := m.EmbedRows(ids)
		if err != nil {
			t.Fatal(err)
		}
		n := len(ids)
		for l := range c.Layers {
			out, err := m.Forward(context.Background(), backend.NewCPU(), l, hidden, []int{len(ids)})
			if err != nil {
				t.Fatal(err)
			}
			hidden = out.HiddenOut
			if out.Routes != nil {
				for p, mg := range out.Routes.Margin {
					if mg < floor {
						n = min(n, p)
					}
				}
			}
		}
		firm = append(firm, n)
		rows := make([][]float64, len(ids))
		for p := range ids {
			h := hidden[p*c.Hidden : (p+1)*c.Hidden]
			var ss float64
			for _, v := range h {
				ss += float64(v) * float64(v)
			}
			inv := 1 / math.Sqrt(ss/float64(c.Hidden)+c.RMSNormEps)
			rows[p] = make([]float64, c.Vocab)
			for v := range c.Vocab {
				var dot float64
				for d, x := range h {
					dot += float64(x) * inv * float64(norm[d]) * float64(head[v*c.Hidden+d])
				}
				rows[p][v] = dot
			}
		}
		logits = append(logits, rows)
	}
	return logits, firm
}

// logitAgreement compares the first firm[i] positions of each prompt: the
// largest absolute logit difference, the largest |logit| of the reference,
// the positions compared, and those whose argmax differs although the
// reference's best logit leads the next by more than tie (a lead within
// the tolerance is a tie the comparison cannot decide).
func logitAgreement(t *testing.T, got, want [][][]float64, firm []int, tie float64) (maxDiff, maxAbs float64, argmaxDiffer, positions int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d prompts of logits, want %d", len(got), len(want))
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("prompt %d: %d positions, want %d", i, len(got[i]), len(want[i]))
		}
		for p := range firm[i] {
			g, w := got[i][p], want[i][p]
			if len(g) != len(w) {
				t.Fatalf("prompt %d position %d: %d logits, want %d", i, p, len(g), len(w))
			}
			ga, wa := 0, 0
			for v := range w {
				maxDiff = max(maxDiff, math.Abs(g[v]-w[v]))
				maxAbs = max(maxAbs, math.Abs(w[v]))
				if g[v] > g[ga] {
					ga = v
				}
				if w[v] > w[wa] {
					wa = v
				}
			}
			second := math.Inf(-1)
			for v := range w {
				if v != wa {
					second = max(second, w[v])
				}
			}
			if ga != wa && w[wa]-second > tie {
				argmaxDiffer++
			}
			positions++
		}
	}
	return maxDiff, maxAbs, argmaxDiffer, positions
}

// ggufTolerance bounds the largest logit difference between llama.cpp on
// a gguf/ file and dsfs's float32 forward of the values the file holds,
// relative to the largest |logit|, at the positions routed firmly (see
// routeMarginFloor). llama.cpp's CPU matmuls round their inputs to the
// weights' dot-product type: BF16 (8 significant bits) for BF16 weights,
// Q8_0 blocks (int8 with a per-32 scale) for Q8_0 weights; over four
// layers that moved the logits of the tiny checkpoints by 0.58-0.85% (BF16)
// and 1.8-3.1% (Q8_0) of the largest logit, and 1.6% for IQ2_XXS/Q2_K
// experts (inputs in Q8_K) over BF16 (the quantisation itself is in the
// reference: its forward runs on the decoded blocks). The bounds are about
// 2.5-3 times the largest; experts stacked in the wrong order move them by
// 86% (TestGGUFLlamaCppExpertOrder).
var ggufTolerance = map[string]float64{"BF16": 0.02, "Q8_0": 0.08, "IQ2_XXS": 0.05}

// TestGGUFLlamaCppLogits loads gguf/ files of the reference V2-Lite and V3
// checkpoints through the mount with real llama.cpp, as one file and as
// split shards, evaluates the golden prompts and compares the logits at
// every position with dsfs's own forward of the values the file holds
// (decoded by an independent strict reader and written back as a float32
// checkpoint). For BF16, which is lossless on BF16 checkpoints, that
// forward must equal the forward of the source exactly; the FP8 checkpoint
// is dequantised as the converter does.
func TestGGUFLlamaCppLogits(t *testing.T) {
	needMount(t)
	llama := llamaCppDir(t)
	for _, name := range []string{"v2lite-tiny", "v3-tiny", "v3-tiny-fp8"} {
		t.Run(name, func(t *testing.T) {
			ref, fp8 := strings.CutSuffix(name, "-fp8")
			src, prompts := ggufCheckpoint(t, ref)
			if fp8 { // DeepSeek-V3's published layout: FP8 with 128x128 F32 scales
				if err := fp8ckpt.Write(src, src+"-fp8"); err != nil {
					t.Fatal(err)
				}
				src += "-fp8"
				// FP8 rounding leaves the golden prompts' first tokens
				// within 0.001 of a routing tie.
				prompts = nil
			}
			// Prompts routed firmly, so that the quantised recipe has
			// positions to compare too.
			prompts = append(prompts, firmPrompts(t, src, 2, 6)...)
			source, _ := traceLogits(t, src, prompts, 0)
			m := startMount(t, src, "--views", "gguf", "--gguf-split-mb", "1")
			for _, recipe := range []string{"BF16", "Q8_0"} {
				single := m.path("gguf", recipe, name+"-"+recipe+".gguf")
				shards, _ := filepath.Glob(m.path("gguf", recipe, "split", "*.gguf"))
				if len(shards) < 2 {
					t.Fatalf("%s: %d split shards at 1 MiB, want several", recipe, len(shards))
				}
				want, firm := traceLogits(t, ggufAsCheckpoint(t, single, src), prompts, routeMarginFloor[recipe])
				if recipe == "BF16" && !fp8 {
					if d, _, _, _ := logitAgreement(t, want, source, lens(prompts), math.Inf(1)); d != 0 {
						t.Errorf("BF16: the values of the file are not the source's: logits differ by %g", d)
					}
				}
				for _, file := range []string{single, shards[0]} {
					got := llamaLogits(t, llama, file, prompts)
					d, s, _, n := logitAgreement(t, got, want, lens(prompts), math.Inf(1))
					t.Logf("%s %s: all %d positions: max |Δlogit| %.3g (largest |logit| %.3g)", recipe, filepath.Base(file), n, d, s)
					_, scale, _, _ := logitAgreement(t, got, want, firm, 0)
					diff, _, differ, n := logitAgreement(t, got, want, firm, ggufTolerance[recipe]*scale)
					if n < 7 {
						t.Errorf("%s %s: only %d positions routed firmly enough to compare", recipe, filepath.Base(file), n)
					}
					rel := diff / scale
					t.Logf("%s %s: %d positions routed firmly: max |Δlogit| %.3g (relative %.3g), argmax differs at %d",
						recipe, filepath.Base(file), n, diff, rel, differ)
					if differ != 0 || rel > ggufTolerance[recipe] {
						t.Errorf("%s %s: llama.cpp disagrees with dsfs's forward: relative %.3g (tolerance %g), argmax differs at %d of %d",
							recipe, filepath.Base(file), rel, ggufTolerance[recipe], differ, n)
					}
				}
			}
		})
	}
}

// firmPrompts picks n prompts of length tokens (seeded, so the same on
// every run) whose every token is routed by more than the largest
// routeMarginFloor in every layer of dsfs's forward of src.
func firmPrompts(t *testing.T, src string, n, tokens int) [][]int {
	t.Helper()
	var floor float32
	for _, f := range routeMarginFloor {
		floor = max(floor, f)
	}
	rng := rand.New(rand.NewPCG(15, 15))
	var picked [][]int
	for try := 0; try < 1000 && len(picked) < n; try++ {
		p := make([]int, tokens)
		for i := range p {
			p[i] = 3 + rng.IntN(500)
		}
		if _, firm := traceLogits(t, src, [][]int{p}, floor); firm[0] == tokens {
			picked = append(picked, p)
		}
	}
	if len(picked) < n {
		t.Fatalf("%s: found %d of %d prompts routed firmly", src, len(picked), n)
	}
	return picked
}

// lens is every position of every prompt.
func lens(prompts [][]int) []int {
	n := make([]int, len(prompts))
	for i, p := range prompts {
		n[i] = len(p)
	}
	return n
}

// ggufTensorValues decodes a tensor of a GGUF file read by the strict
// reader into float32, ggml order (row after row of Ne[0] values).
func ggufTensorValues(t *testing.T, f *ggufread.File, data []byte, ti ggufread.Tensor) []float32 {
	t.Helper()
	b := data[f.DataStart+ti.Offset : f.DataStart+ti.Offset+ti.Size]
	n := int64(1)
	for _, d := range ti.Ne {
		n *= d
	}
	v := make([]float32, n)
	switch ti.Type {
	case 0:
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case 30:
		for i := range v {
			v[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	case 1:
		for i := range v {
			v[i] = float16.Frombits(binary.LittleEndian.Uint16(b[2*i:])).Float32()
		}
	case 16: // IQ2_XXS and Q2_K: ggml's to_float, which the codecs match bit for bit
		iq2xxs.Dequantize(v, b)
	case 10:
		q2k.Dequantize(v, b)
	case 8: // Q8_0: a binary16 d then 32 int8 codes, value q·d
		for blk := range n / 32 {
			d := float16.Frombits(binary.LittleEndian.Uint16(b[34*blk:])).Float32()
			for j := range int64(32) {
				v[32*blk+j] = float32(int8(b[34*blk+2+j])) * d
			}
		}
	default:
		t.Fatalf("tensor %s: type %d", ti.Name, ti.Type)
	}
	return v
}

// ggufAsCheckpoint reads a deepseek2 GGUF file (through the mount) with
// the strict reader, decodes every tensor and writes it back as a float32
// Hugging Face checkpoint beside config.json of src: experts unstacked,
// attn_k_b and attn_v_b joined back into kv_b_proj. dsfs's forward of it
// is what llama.cpp should compute from the file, so the values every
// mounted byte stands for are checked, whatever the recipe.
func ggufAsCheckpoint(t *testing.T, path, src string) string {
	t.Helper()
	data, f := readGGUF(t, path)
	hf := map[string]string{
		"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
		"attn_q": "self_attn.q_proj", "attn_q_a": "self_attn.q_a_proj", "attn_q_a_norm": "self_attn.q_a_layernorm",
		"attn_q_b": "self_attn.q_b_proj", "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa",
		"attn_kv_a_norm": "self_attn.kv_a_layernorm", "attn_output": "self_attn.o_proj",
		"ffn_gate": "mlp.gate_proj", "ffn_down": "mlp.down_proj", "ffn_up": "mlp.up_proj",
		"ffn_gate_inp": "mlp.gate", "exp_probs_b": "mlp.gate.e_score_correction_bias",
		"ffn_gate_shexp": "mlp.shared_experts.gate_proj", "ffn_down_shexp": "mlp.shared_experts.down_proj",
		"ffn_up_shexp": "mlp.shared_experts.up_proj",
	}
	out := make(map[string][]float32)
	shapes := make(map[string][]int64)
	put := func(name string, v []float32, shape ...int64) { out[name], shapes[name] = v, shape }
	kb := make(map[string]ggufread.Tensor)
	for _, ti := range f.Tensors {
		v := ggufTensorValues(t, f, data, ti)
		switch ti.Name {
		case "token_embd.weight":
			put("model.embed_tokens.weight", v, ti.Ne[1], ti.Ne[0])
			continue
		case "output_norm.weight":
			put("model.norm.weight", v, ti.Ne[0])
			continue
		case "output.weight":
			put("lm_head.weight", v, ti.Ne[1], ti.Ne[0])
			continue
		}
		var l int
		var rest string
		if _, err := fmt.Sscanf(ti.Name, "blk.%d.%s", &l, &rest); err != nil {
			t.Fatalf("tensor %s: %v", ti.Name, err)
		}
		base, suffix, _ := strings.Cut(rest, ".")
		prefix := fmt.Sprintf("model.layers.%d.", l)
		switch base {
		case "ffn_gate_exps", "ffn_down_exps", "ffn_up_exps":
			proj := map[string]string{"ffn_gate_exps": "gate_proj", "ffn_down_exps": "down_proj", "ffn_up_exps": "up_proj"}[base]
			per := ti.Ne[0] * ti.Ne[1]
			for e := range ti.Ne[2] {
				put(fmt.Sprintf("%smlp.experts.%d.%s.weight", prefix, e, proj), v[e*per:(e+1)*per], ti.Ne[1], ti.Ne[0])
			}
		case "attn_k_b", "attn_v_b":
			kb[fmt.Sprintf("%d.%s", l, base)] = ti
			out[fmt.Sprintf("%d.%s", l, base)] = v
		default:
			name, ok := hf[base]
			if !ok {
				t.Fatalf("tensor %s: no Hugging Face name", ti.Name)
			}
			shape := []int64{ti.Ne[0]}
			if len(ti.Ne) == 2 {
				shape = []int64{ti.Ne[1], ti.Ne[0]}
			}
			if base == "exp_probs_b" {
				put(prefix+name, v, shape...)
			} else {
				put(prefix+name+"."+suffix, v, shape...)
			}
		}
	}
	for key, k := range kb {
		l, isK := strings.CutSuffix(key, ".attn_k_b")
		if !isK {
			continue
		}
		kv, vb := out[key], out[l+".attn_v_b"]
		vt := kb[l+".attn_v_b"]
		nope, kvr, heads, vdim := k.Ne[0], k.Ne[1], k.Ne[2], vt.Ne[1]
		w := make([]float32, heads*(nope+vdim)*kvr)
		for h := range heads {
			for j := range nope {
				for c := range kvr {
					w[(h*(nope+vdim)+j)*kvr+c] = kv[(h*kvr+c)*nope+j] // k_b[h][c][j]
				}
			}
			copy(w[(h*(nope+vdim)+nope)*kvr:(h+1)*(nope+vdim)*kvr], vb[h*vdim*kvr:(h+1)*vdim*kvr])
		}
		put("model.layers."+l+".self_attn.kv_b_proj.weight", w, heads*(nope+vdim), kvr)
		delete(out, key)
		delete(out, l+".attn_v_b")
	}
	var specs []safetensors.Spec
	for name := range out {
		specs = append(specs, safetensors.Spec{Name: name, DType: safetensors.F32, Shape: shapes[name]})
	}
	return writeValueCheckpoint(t, src, []string{"config.json"}, specs, func(w io.Writer, name string) {
		binary.Write(w, binary.LittleEndian, out[name])
	})
}

// TestGGUFLlamaCppExpertOrder is the negative control of the logit
// comparison: the same BF16 file with each layer's stacked experts in
// reverse order still loads in llama.cpp (the shapes are right), and only
// the comparison catches it, so it must.
func TestGGUFLlamaCppExpertOrder(t *testing.T) {
	needMount(t)
	llama := llamaCppDir(t)
	src, prompts := ggufCheckpoint(t, "v3-tiny")
	m := startMount(t, src, "--views", "gguf")
	bad, reversed := reverseExperts(t, m.path("gguf", "BF16", "v3-tiny-BF16.gguf"))
	want, firm := traceLogits(t, src, prompts, routeMarginFloor["BF16"])
	got := llamaLogits(t, llama, bad, prompts)
	_, scale, _, _ := logitAgreement(t, got, want, firm, 0)
	diff, _, differ, n := logitAgreement(t, got, want, firm, ggufTolerance["BF16"]*scale)
	t.Logf("experts reversed in %d tensors: max |Δlogit| %.3g (relative %.3g), argmax differs at %d of %d", reversed, diff, diff/scale, differ, n)
	if differ == 0 && diff/scale <= ggufTolerance["BF16"] {
		t.Errorf("the logit comparison passes a file whose experts are stacked in reverse (relative %.3g, tolerance %g)", diff/scale, ggufTolerance["BF16"])
	}
}

// reverseExperts copies the GGUF file at path to a temporary file with the
// experts of each stacked expert tensor in reverse order, and returns that
// file and how many tensors it reversed.
func reverseExperts(t *testing.T, path string) (string, int) {
	t.Helper()
	data, f := readGGUF(t, path)
	reversed := 0
	for _, ti := range f.Tensors {
		if !strings.HasSuffix(ti.Name, "_exps.weight") {
			continue
		}
		b := data[f.DataStart+ti.Offset : f.DataStart+ti.Offset+ti.Size]
		per, orig := ti.Size/ti.Ne[2], bytes.Clone(b)
		for e := range ti.Ne[2] {
			copy(b[e*per:(e+1)*per], orig[(ti.Ne[2]-1-e)*per:(ti.Ne[2]-e)*per])
		}
		reversed++
	}
	if reversed == 0 {
		t.Fatal("no stacked expert tensors in the file")
	}
	bad := filepath.Join(t.TempDir(), "reversed.gguf")
	if err := os.WriteFile(bad, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return bad, reversed
}

// TestGGUFFiles checks the files of gguf/ through the mount: sizes exact
// from the first stat, before any read; every file parses with the strict
// reader; each split shard's tensors hold the same bytes as the single
// file's; and dsfs export writes the same bytes.
func TestGGUFFiles(t *testing.T) {
	needMount(t)
	src, _ := ggufCheckpoint(t, "v3-tiny")
	m := startMount(t, src, "--views", "gguf", "--gguf-split-mb", "1")
	sizes := make(map[string]int64)
	for _, rel := range files(t, m.path("gguf")) {
		fi, err := os.Stat(m.path("gguf", rel))
		if err != nil {
			t.Fatal(err)
		}
		sizes[rel] = fi.Size()
	}
	if len(sizes) < 5 {
		t.Fatalf("gguf/ holds %v", sizes)
	}
	out := t.TempDir()
	run(t, dsfsBin, "export", "--gguf-split-mb", "1", "gguf", src, out)
	for _, recipe := range []string{"BF16", "Q8_0"} {
		single := filepath.Join(recipe, "v3-tiny-"+recipe+".gguf")
		tensors := make(map[string][]byte)
		read := func(rel string) *ggufread.File {
			data, err := os.ReadFile(m.path("gguf", rel))
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(data)) != sizes[rel] {
				t.Errorf("%s: stat said %d bytes before the read, read %d", rel, sizes[rel], len(data))
			}
			if exp, err := os.ReadFile(filepath.Join(out, rel)); err != nil || !bytes.Equal(exp, data) {
				t.Errorf("%s: export differs from the mount (%v)", rel, err)
			}
			f, err := ggufread.Read(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			for _, ti := range f.Tensors {
				b := data[f.DataStart+ti.Offset : f.DataStart+ti.Offset+ti.Size]
				if prev, ok := tensors[ti.Name]; ok && !bytes.Equal(prev, b) {
					t.Errorf("%s: tensor %s differs from the single file's", rel, ti.Name)
				}
				tensors[ti.Name] = b
			}
			return f
		}
		whole := read(single)
		n := len(tensors)
		if whole.KV["general.architecture"] != "deepseek2" || whole.KV["general.alignment"] != uint32(gguf.DefaultAlignment) {
			t.Errorf("%s: architecture %v, alignment %v", single, whole.KV["general.architecture"], whole.KV["general.alignment"])
		}
		shards, _ := filepath.Glob(m.path("gguf", recipe, "split", "*.gguf"))
		if len(shards) < 2 {
			t.Fatalf("%s: %d shards", recipe, len(shards))
		}
		count := 0
		for i, sh := range shards {
			rel, _ := filepath.Rel(m.path("gguf"), sh)
			if want := gguf.SplitName("v3-tiny-"+recipe, i, len(shards)); filepath.Base(sh) != want {
				t.Errorf("shard %d is %s, want %s", i, filepath.Base(sh), want)
			}
			f := read(rel)
			count += len(f.Tensors)
			if f.KV["split.no"] != uint16(i) || f.KV["split.count"] != uint16(len(shards)) || f.KV["split.tensors.count"] != int32(n) {
				t.Errorf("%s: split keys %v %v %v", rel, f.KV["split.no"], f.KV["split.count"], f.KV["split.tensors.count"])
			}
			if _, ok := f.KV["general.architecture"]; ok != (i == 0) {
				t.Errorf("%s: model metadata present %v, want only in the first shard", rel, ok)
			}
		}
		if count != n || len(tensors) != n {
			t.Errorf("%s: shards hold %d tensors (%d names), the single file %d", recipe, count, len(tensors), n)
		}
	}
}

// TestGGUFLlamaCppIQ2XXS loads the IQ2_XXS recipe of a V3-shaped checkpoint
// whose experts are whole 256-blocks wide through a mount with a disk
// cache, compares llama.cpp's logits with dsfs's forward of the values the
// file holds (ggml's IQ2_XXS and Q2_K decode), then mounts again on the
// same cache and checks that the file is served from it, byte for byte.
func TestGGUFLlamaCppIQ2XXS(t *testing.T) {
	needMount(t)
	llama := llamaCppDir(t)
	spec := synth.V3TinySpec()
	spec.Hidden, spec.MoEInter, spec.MaxShardBytes = 256, 256, 4<<20
	src := filepath.Join(t.TempDir(), "v3-wide")
	if err := synth.WriteMLA(spec, src); err != nil {
		t.Fatal(err)
	}
	cacheDir := t.TempDir()
	m := startMount(t, src, "--views", "gguf", "--cache-dir", cacheDir)
	file := m.path("gguf", "IQ2_XXS", "v3-wide-IQ2_XXS.gguf")
	first, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ref := ggufAsCheckpoint(t, file, src)
	prompts := firmPrompts(t, ref, 3, 6)
	want, firm := traceLogits(t, ref, prompts, routeMarginFloor["IQ2_XXS"])
	got := llamaLogits(t, llama, file, prompts)
	_, scale, _, _ := logitAgreement(t, got, want, firm, 0)
	diff, _, differ, n := logitAgreement(t, got, want, firm, ggufTolerance["IQ2_XXS"]*scale)
	t.Logf("IQ2_XXS: %d positions routed firmly: max |Δlogit| %.3g (relative %.3g), argmax differs at %d", n, diff, diff/scale, differ)
	if n < 7 || differ != 0 || diff/scale > ggufTolerance["IQ2_XXS"] {
		t.Errorf("IQ2_XXS: llama.cpp disagrees with dsfs's forward at %d positions: relative %.3g (tolerance %g), argmax differs at %d",
			n, diff/scale, ggufTolerance["IQ2_XXS"], differ)
	}
	s1, _ := readStats(t, m)
	m.stop(t)
	m2 := startMount(t, src, "--views", "gguf", "--cache-dir", cacheDir)
	second, err := os.ReadFile(m2.path("gguf", "IQ2_XXS", "v3-wide-IQ2_XXS.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	s2, raw := readStats(t, m2)
	if !bytes.Equal(first, second) || s1.DiskCache.Writes == 0 || s2.DiskCache.Hits < s1.DiskCache.Writes || s2.DiskCache.Writes != 0 {
		t.Errorf("remount on the cache: same bytes %v, first mount wrote %d entries, second hit %d and wrote %d\n%s",
			bytes.Equal(first, second), s1.DiskCache.Writes, s2.DiskCache.Hits, s2.DiskCache.Writes, raw)
	}
}
