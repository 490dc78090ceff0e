package views

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/synth"
)

// TestGGUFReadme holds what gguf/README.md tells a newcomer: for V4.1
// that llama.cpp has no deepseek41 architecture yet and what to use
// meanwhile (with ERROR.txt, the view serving nothing), not the V2/V3
// trace engine's reasons; for v3-tiny, whose expert rows are not whole
// 256-weight blocks, that its IQ2_XXS/ quantises nothing and why; for a
// checkpoint whose experts quantise, no such note.
func TestGGUFReadme(t *testing.T) {
	wide := synth.V3TinySpec()
	wide.Hidden, wide.MoEInter = 256, 256
	for _, tc := range []struct {
		name        string
		src         func(t *testing.T) string
		files       []string
		want, avoid []string
	}{
		{"v41-tiny", func(*testing.T) string { return tinyDir }, []string{"ERROR.txt", "README.md"},
			[]string{"No GGUF file is made for this checkpoint: llama.cpp has no deepseek41 architecture yet",
				"ggml-org/llama.cpp#28696", "`trace/` runs this checkpoint's decoder layers",
				"`nvfp4/` serves it to vLLM and SGLang", "`source/` is the checkpoint as released"},
			[]string{"engine lacks", "hyper-connections", "not made for this checkpoint"}},
		{"v3-tiny", func(t *testing.T) string { return writePreset(t, "v3-tiny") }, nil,
			[]string{"No routed expert is quantised here: IQ2_XXS and Q2_K pack 256 weights a block along a row, and this checkpoint's expert rows hold 128 (gate), 48 (down), 128 (up) weights, so they stay BF16 and the file is the size of BF16/'s."},
			[]string{"deepseek41"}},
		{"experts of 256-weight rows", func(t *testing.T) string {
			dir := t.TempDir()
			if err := synth.WriteMLA(wide, dir); err != nil {
				t.Fatal(err)
			}
			return dir
		}, nil, nil, []string{"No routed expert is quantised", "ERROR.txt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cat, err := checkpoint.Open(tc.src(t))
			if err != nil {
				t.Fatal(err)
			}
			defer cat.Close()
			s, err := Build(cat, Options{Views: []string{"gguf"}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			v := s.Root.Child("gguf")
			if tc.files != nil {
				var names []string
				for _, c := range v.Children {
					names = append(names, c.Name)
				}
				if strings.Join(names, " ") != strings.Join(tc.files, " ") {
					t.Errorf("gguf/ holds %q, want %q", names, tc.files)
				}
			} else if v.Child("ERROR.txt") != nil || v.Child("IQ2_XXS") == nil {
				t.Errorf("gguf/ has ERROR.txt or no IQ2_XXS/")
			}
			cache := blockcache.New(1<<20, 1)
			defer cache.Close()
			if e := v.Child("ERROR.txt"); e != nil {
				if msg := string(readAll(t, e, cache)); !strings.HasPrefix(msg, "gguf/: no GGUF file: llama.cpp has no deepseek41 architecture yet") || strings.Count(msg, "\n") != 1 {
					t.Errorf("ERROR.txt: %q", msg)
				}
			}
			readme := string(readAll(t, v.Child("README.md"), cache))
			for _, w := range tc.want {
				if !strings.Contains(readme, w) {
					t.Errorf("README.md lacks %q:\n%s", w, readme)
				}
			}
			for _, a := range tc.avoid {
				if strings.Contains(readme, a) {
					t.Errorf("README.md says %q:\n%s", a, readme)
				}
			}
		})
	}
}

// writePreset writes a synth preset into a temporary directory.
func writePreset(t *testing.T, preset string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), preset)
	if err := synth.Write(preset, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}
