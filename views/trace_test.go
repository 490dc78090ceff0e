package views

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/trace"
)

func traceSet(t *testing.T, dir string, opt Options) (*Set, error) {
	t.Helper()
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	opt.Views = []string{"trace"}
	s, err := Build(cat, opt)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// TestTraceView lays out trace/ for the synthetic v3-tiny checkpoint with
// token-id prompts and reads a layer's activations through a Reader.
func TestTraceView(t *testing.T) {
	dir := t.TempDir()
	if err := synth.Write("v3-tiny", dir); err != nil {
		t.Fatal(err)
	}
	prompts := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(prompts, []byte(`[{"id":"a","token_ids":[0,5,9]},{"id":"b","label":"B","text":"def f(x): return x"}]`), 0o644)
	s, err := traceSet(t, dir, Options{Values: map[string]string{"trace-prompts": prompts, "device": "cpu"}})
	if err != nil {
		t.Fatal(err)
	}
	v := s.Root.Child("trace")
	for _, p := range []string{"prompts.json", "trace.json", "layers/00.json", "layers/03.safetensors"} {
		if _, err := v.Lookup(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if v.Child("ERROR.txt") != nil {
		t.Error("ERROR.txt for a model that runs")
	}
	n, _ := v.Lookup("layers/02.safetensors")
	cache := blockcache.New(16<<20, 2)
	defer cache.Close()
	b := readAll(t, n, cache)
	h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]safetensors.Tensor{}
	for _, ts := range h.Tensors {
		names[ts.Name] = ts
	}
	if ts := names["a.topk_ids"]; ts.DType != safetensors.I32 || len(ts.Shape) != 2 || ts.Shape[0] != 3 || ts.Shape[1] != 4 {
		t.Errorf("a.topk_ids: %+v", ts)
	}
	if ts := names["b.hidden_out"]; ts.DType != safetensors.F32 || ts.Shape[1] != 128 {
		t.Errorf("b.hidden_out: %+v", ts)
	}
	if len(names) != 14 {
		t.Errorf("%d tensors, want 7 per prompt", len(names))
	}
}

func TestTraceViewErrors(t *testing.T) {
	// An architecture the engine cannot run (V4 with Engram blocks):
	// ERROR.txt alone, a warning.
	odd := t.TempDir()
	if err := synth.Write("v4-tiny", odd); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(odd, checkpoint.ConfigName))
	if err == nil {
		cfg, err = checkpoint.PatchConfig(cfg, []string{"engram_layer_ids"}, []any{1})
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(odd, checkpoint.ConfigName), cfg, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := traceSet(t, odd, Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := s.Root.Child("trace")
	if len(v.Children) != 1 || v.Child("ERROR.txt") == nil {
		t.Fatalf("trace/ of v4-tiny with Engram holds %d entries", len(v.Children))
	}
	cache := blockcache.New(1<<20, 1)
	defer cache.Close()
	// What the V4 engine still lacks, and not what it has.
	if msg := string(readAll(t, v.Child("ERROR.txt"), cache)); !strings.Contains(msg, "Engram") || strings.Contains(msg, "hyper-connections") {
		t.Errorf("ERROR.txt: %s", msg)
	}
	// One short log line; the list of missing features stays in ERROR.txt.
	if w := s.Warnings(); len(w) != 1 || !strings.Contains(w[0], "deepseek_v4") || !strings.Contains(w[0], "trace/ERROR.txt") ||
		strings.Contains(w[0], "hyper-connections") || len(w[0]) > 120 {
		t.Errorf("warnings %q", w)
	}
	// What the user asked for and cannot be had fails the build.
	dir := t.TempDir()
	if err := synth.Write("v2lite-tiny", dir); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(bad, []byte(`[{"id":"x","token_ids":[1]},{"id":"x","token_ids":[2]}]`), 0o644)
	for _, opt := range []Options{{Values: map[string]string{"trace-prompts": bad}}, {Values: map[string]string{"device": "cuda0"}}, {Values: map[string]string{"trace-prompts": filepath.Join(dir, "none")}}} {
		if _, err := traceSet(t, dir, opt); err == nil {
			t.Errorf("%+v: built", opt)
		}
	}
}

// TestTraceTokenizerProblems holds closed two tokenizer.json defects of
// trace/: a file missing its byte-level tokens made ERROR.txt say the
// checkpoint has no tokenizer.json before the real parse error, and a
// normalizer Sequence of five Replace("a" -> 1,000 "a") grew the default
// prompts to 12 GB at mount. ERROR.txt now leads with the real reason, and
// the growth stops at what a prompt's tokens can hold.
func TestTraceTokenizerProblems(t *testing.T) {
	grow := map[string]any{"type": "Replace", "pattern": map[string]any{"String": "a"}, "content": strings.Repeat("a", 1000)}
	cases := []struct {
		name  string
		edit  func(tj map[string]any)
		want  []string // in ERROR.txt's first line
		avoid string
	}{
		{"no byte-level tokens", func(tj map[string]any) {
			model := tj["model"].(map[string]any)
			vocab := model["vocab"].(map[string]any)
			for k := range vocab {
				if len([]rune(k)) == 1 {
					delete(vocab, k)
				}
			}
		}, []string{"tokenizer.json cannot be read", "model:"}, "has no tokenizer.json"},
		{"normalizer growth of an added token", func(tj map[string]any) {
			tj["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{grow, grow, grow, grow, grow}}
		}, []string{"tokenizer.json cannot be read", "text too long"}, ""},
		{"normalizer growth of a prompt", func(tj map[string]any) {
			tj["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{grow, grow, grow, grow, grow}}
			for _, a := range tj["added_tokens"].([]any) {
				a.(map[string]any)["normalized"] = false
			}
		}, []string{"text too long", "4096 tokens"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := synth.Write("v2lite-tiny", dir); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "tokenizer.json")
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var tj map[string]any
			if err := json.Unmarshal(b, &tj); err != nil {
				t.Fatal(err)
			}
			c.edit(tj)
			if b, err = json.Marshal(tj); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			s, err := traceSet(t, dir, Options{})
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 256<<20 {
				t.Errorf("building trace/ allocated %d MiB", got>>20)
			}
			cache := blockcache.New(1<<20, 1)
			defer cache.Close()
			e := s.Root.Child("trace").Child("ERROR.txt")
			if e == nil {
				t.Fatal("no ERROR.txt")
			}
			first, _, _ := strings.Cut(string(readAll(t, e, cache)), "\n")
			for _, w := range c.want {
				if !strings.Contains(first, w) {
					t.Errorf("ERROR.txt's first line %q lacks %q", first, w)
				}
			}
			if c.avoid != "" && strings.Contains(first, c.avoid) {
				t.Errorf("ERROR.txt's first line %q says %q", first, c.avoid)
			}
		})
	}
}

// writePrompts writes n prompts of length tokens each (ids below 100).
func writePrompts(t testing.TB, n, length int) string {
	t.Helper()
	ps := make([]map[string]any, n)
	for i := range ps {
		ids := make([]int, length)
		for j := range ids {
			ids[j] = (i*7 + j*13) % 100
		}
		ps[i] = map[string]any{"id": fmt.Sprint("p", i), "token_ids": ids}
	}
	b, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "prompts.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTracePromptsBudget holds closed prompts that were within the token
// limits yet cost without bound: 8,000 one-token prompts took 10.6 GB on
// v4-tiny and 8.2 GB on v2lite-tiny (the routing record compares every
// pair of prompts). Such prompts are now refused at mount, naming the
// estimate and --trace-memory-mb, having cost little; the default prompts
// under a budget too small for them leave ERROR.txt.
func TestTracePromptsBudget(t *testing.T) {
	for _, preset := range []string{"v2lite-tiny", "v4-tiny", "v41-tiny"} {
		t.Run(preset, func(t *testing.T) {
			dir := t.TempDir()
			if err := synth.Write(preset, dir); err != nil {
				t.Fatal(err)
			}
			prompts := writePrompts(t, 8000, 1)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := traceSet(t, dir, Options{Values: map[string]string{"trace-prompts": prompts, "device": "cpu"}})
			runtime.ReadMemStats(&after)
			var be *trace.BudgetError
			if !errors.As(err, &be) || !strings.Contains(err.Error(), "--trace-memory-mb") || !strings.Contains(err.Error(), "8000 prompts") {
				t.Fatalf("8000 prompts: %v", err)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 256<<20 {
				t.Errorf("refusing allocated %d MiB", got>>20)
			}
			// The same with room for them builds.
			if _, err := traceSet(t, dir, Options{Values: map[string]string{"trace-prompts": writePrompts(t, 4, 3), "device": "cpu"}}); err != nil {
				t.Fatal(err)
			}
			if preset == "v2lite-tiny" {
				s, err := traceSet(t, dir, Options{Values: map[string]string{"trace-memory-mb": "1"}})
				if err != nil {
					t.Fatal(err)
				}
				cache := blockcache.New(1<<20, 1)
				defer cache.Close()
				if msg := string(readAll(t, s.Root.Child("trace").Child("ERROR.txt"), cache)); !strings.Contains(msg, "more than the 1 MiB of --trace-memory-mb") {
					t.Errorf("ERROR.txt: %s", msg)
				}
			}
		})
	}
}

// TestTraceWorkingMemoryOnceRead: trace/'s working memory counts from its
// first forward, not from the build, so a mount's memory limit does not
// let other views' garbage grow into it while nothing reads trace/; and
// it counts once, whatever is read after.
func TestTraceWorkingMemoryOnceRead(t *testing.T) {
	dir := t.TempDir()
	if err := synth.Write("v3-tiny", dir); err != nil {
		t.Fatal(err)
	}
	var told []int64
	s, err := traceSet(t, dir, Options{Values: map[string]string{"device": "cpu"}, Working: func(total int64) { told = append(told, total) }})
	if err != nil {
		t.Fatal(err)
	}
	if w := s.WorkingMemory(); w != 0 || len(told) != 0 {
		t.Fatalf("working memory %d (told %v) before anything is read, want 0", w, told)
	}
	cache := blockcache.New(16<<20, 2)
	defer cache.Close()
	v := s.Root.Child("trace")
	for _, p := range []string{"prompts.json", "layers/01.json", "layers/03.safetensors", "trace.json"} {
		n, err := v.Lookup(p)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, n, cache)
	}
	if w := s.WorkingMemory(); w <= 0 || !slices.Equal(told, []int64{w}) {
		t.Errorf("working memory %d after reading trace/, told %v: want it told once", w, told)
	}
}
