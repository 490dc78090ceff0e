package integration

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/gguf"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/manifest"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/trace/model"
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

// routeMarginFloor is the routing margin (selection score of the k-th
// expert minus the (k+1)-th, or of the last allowed group minus the next)
// below which a token's experts may differ between llama.cpp and an exact
// float32 forward: llama.cpp rounds matmul inputs to the weights' type, so
// the router sees a hidden state a few 1e-3 off. v3-tiny has a decision
// at 0.0007 that llama.cpp takes the other way (prompt 1, token 2, layer
// 1); the next smallest margins of the golden prompts (0.0019 and up)
// agree. A flipped route changes that token's output and, through
// attention, every later position, so logits are compared up to the first
// such token.
const routeMarginFloor = 0.001

// traceLogits is dsfs's own forward of the checkpoint (trace/model, the
// engine trace/ runs, checked against DeepSeek's reference in its golden
// tests) through every layer, then the final RMSNorm and the head in
// float64. firm[i] is the number of leading positions of prompt i whose
// routes, in every layer, are decided by more than routeMarginFloor.
func traceLogits(t *testing.T, dir string, prompts [][]int) (logits [][][]float64, firm []int) {
	t.Helper()
	cat, err := manifest.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	m, err := model.Open(cat)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config
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
			out, err := m.Forward(context.Background(), model.NewCPU(), l, hidden, []int{len(ids)})
			if err != nil {
				t.Fatal(err)
			}
			hidden = out.HiddenOut
			if out.Routes != nil {
				for p, mg := range out.Routes.Margin {
					if mg < routeMarginFloor {
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
// a gguf/ file and dsfs's float32 forward of the same checkpoint, relative
// to the largest |logit|. See TestGGUFLlamaCppLogits for where the
// figures come from.
var ggufTolerance = map[string]float64{"BF16": 0.02}

// TestGGUFLlamaCppLogits loads gguf/ files of the reference V2-Lite and V3
// checkpoints through the mount with real llama.cpp, as one file and as
// split shards, evaluates the golden prompts and compares the logits at
// every position with dsfs's own forward.
func TestGGUFLlamaCppLogits(t *testing.T) {
	needMount(t)
	llama := llamaCppDir(t)
	for _, name := range []string{"v2lite-tiny", "v3-tiny"} {
		t.Run(name, func(t *testing.T) {
			src, prompts := ggufCheckpoint(t, name)
			want, firm := traceLogits(t, src, prompts)
			m := startMount(t, src, "--views", "gguf", "--gguf-split-mb", "1")
			for _, recipe := range []string{"BF16"} {
				single := m.path("gguf", recipe, name+"-"+recipe+".gguf")
				shards, _ := filepath.Glob(m.path("gguf", recipe, "split", "*.gguf"))
				if len(shards) < 2 {
					t.Fatalf("%s: %d split shards at 1 MiB, want several", recipe, len(shards))
				}
				for _, file := range []string{single, shards[0]} {
					got := llamaLogits(t, llama, file, prompts)
					all := make([]int, len(prompts))
					for i, p := range prompts {
						all[i] = len(p)
					}
					d, s, _, n := logitAgreement(t, got, want, all, math.Inf(1))
					t.Logf("%s %s: all %d positions: max |Δlogit| %.3g (largest |logit| %.3g)", recipe, filepath.Base(file), n, d, s)
					diff, scale, _, _ := logitAgreement(t, got, want, firm, 0)
					diff, scale, differ, n := logitAgreement(t, got, want, firm, ggufTolerance[recipe]*scale)
					rel := diff / scale
					t.Logf("%s %s: %d positions before a route within %g of a tie: max |Δlogit| %.3g (relative %.3g), argmax differs at %d",
						recipe, filepath.Base(file), n, routeMarginFloor, diff, rel, differ)
					if differ != 0 || rel > ggufTolerance[recipe] {
						t.Errorf("%s %s: llama.cpp disagrees with dsfs's forward: relative %.3g (tolerance %g), argmax differs at %d of %d",
							recipe, filepath.Base(file), rel, ggufTolerance[recipe], differ, n)
					}
				}
			}
		})
	}
}
