package check

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/trace"
	_ "github.com/dsfs/dsfs/trace/deepseek2"
	_ "github.com/dsfs/dsfs/trace/deepseek4"
	_ "github.com/dsfs/dsfs/trace/deepseek41"
	"github.com/dsfs/dsfs/vfile"
	"github.com/dsfs/dsfs/views"
)

// exportTrace synthesises preset and writes its trace/ view (the default
// prompts, on the CPU) into a directory, as dsfs export would; it returns
// the checkpoint's directory and that one.
func exportTrace(t *testing.T, preset string) (src, dir string) {
	t.Helper()
	src, dir = t.TempDir(), t.TempDir()
	if err := synth.Write(preset, src); err != nil {
		t.Fatal(err)
	}
	cat, err := checkpoint.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	cache := blockcache.New(64<<20, 1)
	defer cache.Close()
	s, err := views.Build(cat, views.Options{Views: []string{"trace"}, Cache: cache, Values: map[string]string{"device": "cpu"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Root.Child("trace").Walk(func(p string, n *vfile.Node) error {
		out := filepath.Join(dir, p)
		var b []byte
		var err error
		switch {
		case n.IsDir():
			return os.MkdirAll(out, 0o755)
		case n.Doc != nil:
			b, err = n.Doc.Bytes(context.Background())
		default:
			b, err = io.ReadAll(io.NewSectionReader(vfile.NewReader(n.File, cache), 0, n.File.Size()))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return src, dir
}

func defaultIDs() []string {
	var ids []string
	for _, p := range trace.DefaultPrompts() {
		ids = append(ids, p.ID)
	}
	return ids
}

func TestTrace(t *testing.T) {
	for _, tc := range []struct {
		preset                 string
		files, moe, hash, topK int
		rule                   string
	}{
		// Files: two per layer and a load chart per MoE layer, a route
		// map per prompt, prompts.json, trace.json and (V4, V4.1)
		// logits.safetensors.
		{"v41-tiny", 25, 6, 0, 2, "sqrtsoftplus, normalised to 1.5"},
		{"v4-tiny", 19, 4, 2, 2, "sqrtsoftplus, normalised to 1.5"},
		{"v2lite-tiny", 17, 3, 0, 3, "softmax, times 1"},
		{"v3-tiny", 17, 3, 0, 4, "sigmoid, normalised to 2.5"},
	} {
		t.Run(tc.preset, func(t *testing.T) {
			src, dir := exportTrace(t, tc.preset)
			r, err := Trace(src, dir, defaultIDs())
			if err != nil {
				t.Fatal(err)
			}
			var prompts []tracePrompt
			b, _ := os.ReadFile(filepath.Join(dir, "prompts.json"))
			json.Unmarshal(b, &prompts)
			tokens := 0
			for _, p := range prompts {
				tokens += len(p.TokenIDs)
			}
			if r.Prompts != 4 || r.Tokens != tokens || r.MoELayers != tc.moe || r.Routes != int64(tokens*tc.moe) ||
				r.HashRoutes != int64(tokens*tc.hash) || r.TopK != tc.topK || r.Rule != tc.rule || r.WorstSum > sumTolerance ||
				r.Values == 0 || r.Files != tc.files {
				t.Errorf("%+v, want 4 prompts of %d tokens over %d MoE layers (%d hash-routed)", r, tokens, tc.moe, tc.hash)
			}
			if _, err := Trace(src, dir, []string{"other"}); err == nil || !strings.Contains(err.Error(), "prompts") {
				t.Errorf("other prompts wanted: %v", err)
			}
		})
	}
}

// TestTraceDoctored holds that the trace check fails, naming the file,
// when one record or tensor of a correct trace/ is changed: a duplicate
// expert, a weight the scoring function cannot give (changed in the
// record and the tensors alike), a route the tensors do not hold, a
// hash-routed token sent elsewhere than tid2eid says, a missing prompt,
// a NaN activation, and an ERROR.txt.
func TestTraceDoctored(t *testing.T) {
	src, good := exportTrace(t, "v4-tiny")
	for _, tc := range []struct {
		name   string
		want   []string // in the error
		doctor func(t *testing.T, dir string)
	}{
		{"duplicate expert", []string{"trace/layers/02.json: prompt code token 3: expert", "chosen twice"}, func(t *testing.T, dir string) {
			editRoute(t, dir, 2, "code", 3, func(e []any) {
				e[1].(map[string]any)["expert"] = e[0].(map[string]any)["expert"]
			})
		}},
		{"weight off the scoring function", []string{"trace/layers/03.json: prompt math token 5: weights sum to", "normalisation"}, func(t *testing.T, dir string) {
			// The heaviest expert's weight 1% up, in the record and the
			// tensor alike: only the scoring function tells.
			var w float32
			var expert int32
			editRoute(t, dir, 3, "math", 5, func(e []any) {
				m := e[0].(map[string]any)
				w = float32(m["weight"].(float64) * 1.01)
				m["weight"], expert = float64(w), int32(m["expert"].(float64))
			})
			ids := readInts(t, dir, 3, "math.topk_ids")
			editTensor(t, dir, 3, "math.topk_weights", func(v []byte) {
				for k := range 2 {
					if ids[5*2+k] == expert {
						binary.LittleEndian.PutUint32(v[4*(5*2+k):], math.Float32bits(w))
					}
				}
			})
		}},
		{"record and tensors disagree", []string{"trace/layers/02.json: prompt en_architecture token 0", "layers/02.safetensors has experts"}, func(t *testing.T, dir string) {
			editTensor(t, dir, 2, "en_architecture.topk_weights", func(v []byte) {
				binary.LittleEndian.PutUint32(v, math.Float32bits(0.5))
			})
		}},
		{"hash route not tid2eid's", []string{"trace/layers/00.json: prompt zh_explanation token 0", "layers.0.ffn.gate.tid2eid row 0 says"}, func(t *testing.T, dir string) {
			// The two experts of token 0 swapped with their weights: the
			// same route as a set, not in tid2eid's order.
			for _, name := range []string{"zh_explanation.topk_ids", "zh_explanation.topk_weights"} {
				editTensor(t, dir, 0, name, func(v []byte) {
					a, b := binary.LittleEndian.Uint32(v), binary.LittleEndian.Uint32(v[4:])
					binary.LittleEndian.PutUint32(v, b)
					binary.LittleEndian.PutUint32(v[4:], a)
				})
			}
		}},
		{"missing prompt", []string{"trace/layers/01.json: no routes for prompt code"}, func(t *testing.T, dir string) {
			editRecord(t, dir, 1, func(rec map[string]any) {
				r := rec["routing"].(map[string]any)
				pp := r["per_prompt"].([]any)
				r["per_prompt"] = append(pp[:2:2], pp[3:]...)
			})
		}},
		{"NaN activation", []string{"trace/layers/03.safetensors: code.ffn_out: value 7 is NaN"}, func(t *testing.T, dir string) {
			editTensor(t, dir, 3, "code.ffn_out", func(v []byte) {
				binary.LittleEndian.PutUint32(v[28:], math.Float32bits(float32(math.NaN())))
			})
		}},
		{"ERROR.txt", []string{"trace/ERROR.txt: trace/: broken"}, func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "ERROR.txt"), []byte("trace/: broken\nmore\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, good, dir)
			tc.doctor(t, dir)
			_, err := Trace(src, dir, defaultIDs())
			if err == nil {
				t.Fatal("passed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v lacks %q", err, w)
				}
			}
		})
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// editRecord rewrites layers/NN.json through edit.
func editRecord(t *testing.T, dir string, layer int, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "layers", fmt.Sprintf("%02d.json", layer))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	edit(rec)
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// editRoute edits the experts_by_weight of one token of one prompt.
func editRoute(t *testing.T, dir string, layer int, prompt string, token int, edit func([]any)) {
	t.Helper()
	editRecord(t, dir, layer, func(rec map[string]any) {
		for _, p := range rec["routing"].(map[string]any)["per_prompt"].([]any) {
			if p := p.(map[string]any); p["id"] == prompt {
				edit(p["token_routes"].([]any)[token].(map[string]any)["experts_by_weight"].([]any))
			}
		}
	})
}

// editTensor changes the bytes of one tensor of layers/NN.safetensors.
func editTensor(t *testing.T, dir string, layer int, name string, edit func([]byte)) {
	t.Helper()
	p := filepath.Join(dir, "layers", fmt.Sprintf("%02d.safetensors", layer))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseTensors(b)
	if err != nil {
		t.Fatal(err)
	}
	tt, ok := f.h.Find(name)
	if !ok {
		t.Fatalf("%s: no tensor %s", p, name)
	}
	edit(f.data[tt.Begin:tt.End])
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readInts(t *testing.T, dir string, layer int, name string) []int32 {
	t.Helper()
	var out []int32
	editTensor(t, dir, layer, name, func(v []byte) {
		for i := 0; i < len(v); i += 4 {
			out = append(out, int32(binary.LittleEndian.Uint32(v[i:])))
		}
	})
	return out
}
