package views

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/synth"
)

// TestNoQuantisationClaimedWithoutConversion builds the transcoding views
// of checkpoints that hold neither MXFP4 experts nor Engram tables (V2,
// V3): their config.json must be the source's, byte for byte, and nvfp4/
// must not describe NVFP4 experts in hf_quant_config.json.
func TestNoQuantisationClaimedWithoutConversion(t *testing.T) {
	for _, preset := range []string{"v2lite-tiny", "v3-tiny"} {
		t.Run(preset, func(t *testing.T) {
			cat, s, cache := presetSet(t, preset, "nvfp4", "engram-fp4", "nvfp4+engram-fp4")
			for _, name := range []string{"nvfp4", "engram-fp4", "nvfp4+engram-fp4"} {
				view := s.Root.Child(name)
				if view == nil {
					t.Fatalf("%s: no view", name)
				}
				if got := readAll(t, view.Child("config.json"), cache); !bytes.Equal(got, cat.ConfigBytes) {
					t.Errorf("%s/config.json differs from the source's:\n%s", name, got)
				}
				if view.Child("hf_quant_config.json") != nil {
					t.Errorf("%s/hf_quant_config.json exists for a checkpoint without MXFP4 experts", name)
				}
			}
		})
	}
}

// presetSet builds the given views of a fresh synth checkpoint of preset.
func presetSet(t *testing.T, preset string, views ...string) (*checkpoint.Catalog, *Set, *blockcache.Cache) {
	t.Helper()
	dir := t.TempDir()
	if err := synth.Write(preset, dir); err != nil {
		t.Fatal(err)
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Build(cat, Options{Views: views})
	if err != nil {
		t.Fatal(err)
	}
	cache := blockcache.New(16<<20, 2)
	t.Cleanup(func() { cache.Close(); s.Close(); cat.Close() })
	return cat, s, cache
}

// TestConfigPatched: nvfp4/'s config.json carries the loader contract
// (the source's FP8 settings kept, MIXED_PRECISION with NVFP4 experts,
// expert_dtype still fp4, and the top-level expert_dtype V4 writes), on
// V4.1's nested config and V4's flat one; inference/config.json, which
// DeepSeek's own code reads and which has no NVFP4 expert type, stays the
// source's in every view.
func TestConfigPatched(t *testing.T) {
	for _, preset := range []string{"v41-tiny", "v4-tiny"} {
		t.Run(preset, func(t *testing.T) {
			cat, s, cache := presetSet(t, preset, "nvfp4", "engram-fp4")
			for _, v := range []string{"nvfp4", "engram-fp4"} {
				n, err := s.Root.Lookup(v + "/" + checkpoint.InferenceConfigName)
				if err != nil {
					t.Fatal(err)
				}
				if got := readAll(t, n, cache); !bytes.Equal(got, cat.InferenceConfigBytes) {
					t.Errorf("%s/inference/config.json changed:\n%s", v, got)
				}
			}
			raw := readAll(t, s.Root.Child("nvfp4").Child("config.json"), cache)
			var doc map[string]any
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			q, _ := doc["quantization_config"].(map[string]any)
			srcQ, _ := cat.Config.Raw["quantization_config"].(map[string]any)
			for k, v := range srcQ {
				if k == "expert_dtype" {
					continue
				}
				if fmt.Sprint(q[k]) != fmt.Sprint(v) {
					t.Errorf("quantization_config.%s = %v, the source's is %v", k, q[k], v)
				}
			}
			for k, want := range map[string]any{"quant_method": "fp8", "quant_algo": "MIXED_PRECISION", "moe_quant_algo": "NVFP4",
				"expert_dtype": "fp4", "group_size": 16.0, "kv_cache_quant_algo": nil} {
				if got, ok := q[k]; !ok || got != want {
					t.Errorf("quantization_config.%s = %v, want %v", k, got, want)
				}
			}
			if _, ok := cat.Config.Raw["expert_dtype"]; ok && doc["expert_dtype"] != "fp4" {
				t.Errorf("top-level expert_dtype %v, want fp4", doc["expert_dtype"])
			}
		})
	}
}
