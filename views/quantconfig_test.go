package views

import (
	"bytes"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/vfile"
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

// TestBothConfigsPatched: nvfp4/ says NVFP4 experts in config.json and in
// inference/config.json (the released text with that one value changed),
// on V4.1's nested config and V4's flat one with its top-level
// expert_dtype; engram-fp4/ leaves inference/config.json as it is
// (ModelArgs takes no engram_dtype).
func TestBothConfigsPatched(t *testing.T) {
	for _, preset := range []string{"v41-tiny", "v4-tiny"} {
		t.Run(preset, func(t *testing.T) {
			cat, s, cache := presetSet(t, preset, "nvfp4", "engram-fp4")
			lookup := func(path string) *vfile.Node {
				n, err := s.Root.Lookup(path)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			nv := s.Root.Child("nvfp4")
			inf := readAll(t, lookup("nvfp4/"+checkpoint.InferenceConfigName), cache)
			if want := bytes.Replace(cat.InferenceConfigBytes, []byte(`"expert_dtype": "fp4"`), []byte(`"expert_dtype": "nvfp4"`), 1); !bytes.Equal(inf, want) || bytes.Equal(inf, cat.InferenceConfigBytes) {
				t.Errorf("nvfp4/inference/config.json:\n%s\nwant\n%s", inf, want)
			}
			cfg, err := checkpoint.ParseConfig(readAll(t, nv.Child("config.json"), cache))
			if err != nil || cfg.Quant.ExpertDType != "nvfp4" || bytes.Contains(readAll(t, nv.Child("config.json"), cache), []byte(`"fp4"`)) {
				t.Errorf("nvfp4/config.json: expert dtype %q (%v), or still fp4 somewhere", cfg.Quant.ExpertDType, err)
			}
			if got := readAll(t, lookup("engram-fp4/"+checkpoint.InferenceConfigName), cache); !bytes.Equal(got, cat.InferenceConfigBytes) {
				t.Errorf("engram-fp4/inference/config.json changed:\n%s", got)
			}
		})
	}
}
