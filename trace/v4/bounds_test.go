package v4

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/safetensors"
)

// TestOpenClaimsBeyondCheckpoint opens v4-tiny under configs that claim
// far more than its tensors: Open checks only what exists, reports the
// excess in one problem, and allocates in proportion to config.json's
// size (decoding two million compress_ratios twice is about 240 MB), not
// to the claim (before the bound, two million layers cost gigabytes of
// per-tensor problems, 10^9 experts never ended).
func TestOpenClaimsBeyondCheckpoint(t *testing.T) {
	const layers = 2_000_000
	ratios := make([]int, layers)
	cases := []struct {
		name    string
		set     map[string]any // config.json and inference/config.json keys
		layer   int            // whose problem is checked
		problem string
	}{
		{"layers", map[string]any{"num_hidden_layers": layers, "n_layers": layers, "compress_ratios": ratios}, 5,
			"no tensors in the checkpoint, nor for layers 6-1999999 (config.json num_hidden_layers 2000000)"},
		{"experts", map[string]any{"n_routed_experts": 1_000_000_000}, 0,
			"n_routed_experts 1000000000: the checkpoint holds"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := rewriteTiny(t, func(_ *safetensors.Spec, b []byte) []byte { return b })
			for _, f := range []string{"config.json", "inference/config.json"} {
				p := filepath.Join(dir, f)
				raw, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				var cfg map[string]any
				if err := json.Unmarshal(raw, &cfg); err != nil {
					t.Fatal(err)
				}
				for k, v := range tc.set {
					cfg[k] = v
				}
				if raw, err = json.Marshal(cfg); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, raw, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cat, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer cat.Close()
			inf, err := os.ReadFile(filepath.Join(dir, "inference", "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			m, err := Open(cat, inf)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("Open allocated %d KiB", (after.TotalAlloc-before.TotalAlloc)>>10)
			if got := after.TotalAlloc - before.TotalAlloc; got > 1<<30 {
				t.Errorf("opening allocated %d MiB", got>>20)
			}
			if m.Checked() > 7 {
				t.Errorf("checked %d layers of a checkpoint with 5", m.Checked())
			}
			if l := tc.layer; l >= m.Checked() || !strings.Contains(strings.Join(m.Problems(l), "; "), tc.problem) {
				t.Errorf("layer %d problems %q, want one containing %q", tc.layer, m.Problems(min(tc.layer, m.Checked()-1)), tc.problem)
			}
		})
	}
}

// TestSinkhornItersClaim holds closed hc_sinkhorn_iters 1e9 (DeepSeek's
// releases run 20): the mixing loop of one token never ended, reads never
// finished and a core stayed busy after the readers died. Open now
// refuses it with one line naming the key and the value.
func TestSinkhornItersClaim(t *testing.T) {
	for _, iters := range []int{1_000_000_000, MaxSinkhornIters + 1} {
		dir := rewriteTiny(t, func(_ *safetensors.Spec, b []byte) []byte { return b })
		for _, f := range []string{"config.json", "inference/config.json"} {
			p := filepath.Join(dir, f)
			raw, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if raw, err = checkpoint.PatchConfig(raw, []string{"hc_sinkhorn_iters"}, iters); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cat, err := checkpoint.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		inf, err := os.ReadFile(filepath.Join(dir, "inference", "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Open(cat, inf)
		cat.Close()
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("hc_sinkhorn_iters %d", iters)) || strings.Contains(err.Error(), "\n") {
			t.Errorf("hc_sinkhorn_iters %d: %v", iters, err)
		}
	}
}
